"""The package's shape: modules short enough to read whole, and module-level imports that run one
way (a cycle between two modules means one of them holds the other's concern)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "workflow" / "kennel"
# a module past this is split by concern (issue 18), not trimmed of its comments
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(statements: list[ast.stmt]) -> set[str]:
    """Names imported when the module is imported: not inside functions or classes (those are
    lazy on purpose), not under ``if TYPE_CHECKING`` (never run)."""
    names: set[str] = set()
    for node in statements:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            names |= _module_level_imports(node.body) | _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                names |= _module_level_imports(block)
        elif isinstance(node, ast.With):
            names |= _module_level_imports(node.body)
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in modules.items():
        imported = _module_level_imports(ast.parse(path.read_text()).body)
        graph[name] = {other for other in imported if other in modules and other != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as the list of its modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return path[path.index(successor) :] + [successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_module_is_longer_than_the_limit():
    lengths = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_module_level_imports_have_no_cycle():
    assert find_cycle(import_graph(_modules())) is None


def test_the_cycle_check_sees_a_cycle():
    # the check's own reference: a plain two-module circle, and one through a third module
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_are_read_as_python_runs_them():
    source = """
import kennel.a
from kennel import b
from kennel.c import thing
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from kennel.d import Never
try:
    from kennel.e import maybe
except ImportError:
    pass
def lazy():
    from kennel.f import later
"""
    names = _module_level_imports(ast.parse(source).body)
    assert {"kennel.a", "kennel.b", "kennel.c", "kennel.e"} <= names
    assert not any(name.startswith(("kennel.d", "kennel.f")) for name in names)
