"""Progress lines for long jobs: counts and rates in the rule's log, at most every few seconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

Item = TypeVar("Item")


class Progress:
    """Counts items as a stage finishes them and logs the count and rate now and then."""

    def __init__(
        self, logger: logging.Logger, what: str, total: int | None = None, every: float = 10.0
    ):
        self._logger, self._what, self._total, self._every = logger, what, total, every
        self._start = self._last = time.monotonic()
        self.done = 0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self._every:
            of_total = f"/{self._total}" if self._total is not None else ""
            rate = self.done / max(now - self._start, 1e-9)
            self._logger.info("%s: %d%s (%.0f/s)", self._what, self.done, of_total, rate)
            self._last = now

    def finish(self) -> None:
        elapsed = time.monotonic() - self._start
        self._logger.info(
            "%s: %d done in %.1f s (%.0f/s)",
            self._what, self.done, elapsed, self.done / max(elapsed, 1e-9),
        )  # fmt: skip


def logged_progress(
    batches: Iterable[Item], logger: logging.Logger, what: str, total: int | None = None
) -> Iterator[Item]:
    """Yield ``batches`` unchanged, counting ``len(batch)`` items as each is consumed."""
    progress = Progress(logger, what, total)
    for batch in batches:
        yield batch
        progress.add(len(batch))
    progress.finish()
