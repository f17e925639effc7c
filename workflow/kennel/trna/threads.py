"""How a job's CPUs are split between extraction and the GPU feed.

escapepod's ``refine_signal_map`` holds the GIL, so extraction scales with worker processes;
``span_statistics_batch`` runs on escapepod's rayon pool, sized by ``RAYON_NUM_THREADS``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    extraction_workers: int  # processes running the banded DP
    rayon_threads: int  # escapepod's pool inside each worker
    feed_reserve: int  # CPUs left to the GPU feeder and BAM writer (0 when not fused)


def feed_reserve(threads: int) -> int:
    """CPUs a fused GPU job keeps for its feeder and writer: a quarter, at least 1, at most 4.

    Proportional rather than a flat reservation, so small jobs keep most CPUs for extraction
    (16 → 4, 8 → 2, 4 → 1).
    """
    return min(4, max(1, threads // 4))


def plan_threads(threads: int, fused: bool, environ: Mapping[str, str] | None = None) -> ThreadPlan:
    """Split ``threads`` (the rule's) into extraction workers and rayon threads.

    An explicit ``RAYON_NUM_THREADS`` in the environment wins for the rayon pool.
    """
    environ = os.environ if environ is None else environ
    threads = max(1, int(threads))
    reserve = feed_reserve(threads) if fused else 0
    workers = max(1, threads - reserve)
    explicit = environ.get("RAYON_NUM_THREADS", "").strip()
    rayon = int(explicit) if explicit.isdigit() and int(explicit) > 0 else 1
    return ThreadPlan(extraction_workers=workers, rayon_threads=rayon, feed_reserve=reserve)
