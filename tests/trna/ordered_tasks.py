"""Tasks for ordered_map's tests: importable by spawned worker processes, and light."""

import os
import time


def pid_of(index: int) -> tuple[int, int]:
    """``(index, pid)`` after a short wait, so a pool's tasks stay in flight a while."""
    time.sleep(0.01)
    return index, os.getpid()


def setup() -> None:
    """An initializer that does nothing."""


def payload_of(index: int) -> tuple[int, bytes]:
    """``(index, bytes)`` of 1.5 MB, larger than a widened pipe, so results span several writes."""
    return index, bytes([index % 256]) * 1_500_000


def dies_in_a_worker(index: int, job_pid: int) -> int:
    """``index``, except that a worker process (not the job's own) dies at the fifth task."""
    if index == 5 and os.getpid() != job_pid:
        os._exit(3)  # as if killed: no exception, no result
    return index
