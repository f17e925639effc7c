"""One way to print benchmark rows: measure, value, goal."""


def print_table(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(name) for name, _, _ in rows)
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:>16}  {goal}")


def under(ratio: float, goal: float) -> str:
    """The goal column of a ratio that should stay below ``goal``."""
    return f"< {goal:g}x ({'meets' if ratio < goal else 'MISSES'})"
