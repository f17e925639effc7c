"""Atomic outputs: a file either appears complete or not at all.

Every writer in kennel goes through :func:`atomic_outputs`, so a crash, a kill or a bad
record never leaves a half-written file that Snakemake (or a user) could mistake for a result.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from kennel.errors import KennelError

_TEMPORARY = re.compile(r"^\.tmp-\d+\.")


def _temporary_name(path: Path) -> Path:
    # keep the real name as the suffix: some writers choose the format by extension
    return path.with_name(f".tmp-{os.getpid()}.{path.name}")


@contextlib.contextmanager
def atomic_outputs(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Yield temporary paths beside ``paths``; rename them into place only on success.

    On any exception the temporaries are removed and the final paths are left untouched.
    Parent directories are created as needed.
    """
    finals = [Path(p) for p in paths]
    temporaries = [_temporary_name(p) for p in finals]
    for final in finals:
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise KennelError(f"{final}: cannot create its directory ({error.strerror})") from None
        # a writer killed with SIGKILL could not clean up; its output is being rewritten now
        for stale in final.parent.glob(f".tmp-*.{final.name}"):
            stale.unlink(missing_ok=True)
    try:
        yield temporaries
    except BaseException:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
        raise
    missing = [final for temporary, final in zip(temporaries, finals, strict=True)
               if not temporary.exists()]  # fmt: skip
    if missing:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
        raise RuntimeError(f"{missing[0]}: writer finished without producing output")
    for temporary, final in zip(temporaries, finals, strict=True):
        os.replace(temporary, final)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Single-file form of :func:`atomic_outputs`."""
    with atomic_outputs(path) as (temporary,):
        yield temporary


def sweep_stale_temporaries(*roots: str | os.PathLike) -> list[Path]:
    """Remove every writer temporary (``.tmp-<pid>.<name>``) below ``roots``; return them.

    Called when a workflow run succeeds: Snakemake's directory lock means no job of this
    workflow is writing then, so any temporary is a leftover of a killed job, including one
    whose output Snakemake will never rebuild because everything downstream is up to date.
    """
    removed = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for path in root.rglob(".tmp-*"):
            if path.is_file() and _TEMPORARY.match(path.name):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
