"""Progress lines for long jobs: counts and rates in the rule's log, at most every few seconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

Item = TypeVar("Item")


def logged_progress(
    batches: Iterable[Item],
    logger: logging.Logger,
    what: str,
    total: int | None = None,
    every_seconds: float = 10.0,
) -> Iterator[Item]:
    """Yield ``batches`` unchanged, logging how many items (``len(batch)``) have gone by."""
    start = last = time.monotonic()
    done = 0
    for batch in batches:
        done += len(batch)
        now = time.monotonic()
        if now - last >= every_seconds:
            rate = done / max(now - start, 1e-9)
            of_total = f"/{total}" if total is not None else ""
            logger.info("%s: %d%s (%.0f/s)", what, done, of_total, rate)
            last = now
        yield batch
    elapsed = time.monotonic() - start
    logger.info("%s: %d done in %.1f s (%.0f/s)", what, done, elapsed, done / max(elapsed, 1e-9))
