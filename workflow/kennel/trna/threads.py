"""How a job's CPUs are split: extraction workers, escapepod's rayon pool, torch's intra-op
threads and htslib's BGZF threads, for every kind of job (extract, classify decoupled or fused,
score-snps); :func:`apply_plan` sets them and logs the split when the job starts.

escapepod's ``refine_signal_map`` holds the GIL, so extraction scales with worker processes;
``span_statistics_batch`` runs on escapepod's rayon pool, sized by ``RAYON_NUM_THREADS``.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from kennel.errors import KennelError

logger = logging.getLogger(__name__)

JOBS = ("extract", "classify", "classify-fused", "tag", "score-snps")


@dataclass(frozen=True)
class ThreadPlan:
    extraction_workers: int  # processes running the banded DP (0: no extraction in the job)
    rayon_threads: int  # escapepod's pool inside each worker
    feed_reserve: int  # CPUs kept for the device feed: producer, writer (0 in extract jobs)
    torch_threads: int = 1  # torch's intra-op threads (the model's forward on a CPU)
    bam_threads: int = 0  # htslib BGZF compression threads of the BAM writer (0: none written)

    def describe(self) -> str:
        return (
            f"{self.extraction_workers} extraction workers x {self.rayon_threads} rayon, "
            f"{self.torch_threads} torch, {self.bam_threads} BGZF, "
            f"{self.feed_reserve} kept for the feed"
        )


def feed_reserve(threads: int) -> int:
    """CPUs a fused GPU job keeps for its feeder and writer: a quarter, at least 1, at most 4.

    Proportional rather than a flat reservation, so small jobs keep most CPUs for extraction
    (16 → 4, 8 → 2, 4 → 1).
    """
    return min(4, max(1, threads // 4))


def plan_threads(threads: int, fused: bool, environ: Mapping[str, str] | None = None) -> ThreadPlan:
    """Split ``threads`` (the rule's) of an extraction (``fused``: inside a classify job) into
    extraction workers, rayon threads and, when fused, the feed's reservation, which also runs
    torch's forward and the BAM compression.

    An explicit ``RAYON_NUM_THREADS`` in the environment wins for the rayon pool.
    """
    environ = os.environ if environ is None else environ
    threads = max(1, int(threads))
    reserve = feed_reserve(threads) if fused else 0
    workers = max(1, threads - reserve)
    explicit = environ.get("RAYON_NUM_THREADS", "").strip()
    rayon = int(explicit) if explicit.isdigit() and int(explicit) > 0 else 1
    return ThreadPlan(
        extraction_workers=workers,
        rayon_threads=rayon,
        feed_reserve=reserve,
        torch_threads=max(1, reserve),
        bam_threads=reserve,
    )


def plan_job(
    job: str, threads: int, environ: Mapping[str, str] | None = None, *, on_cpu: bool = False
) -> ThreadPlan:
    """The split of a ``job``'s ``threads`` (one of :data:`JOBS`); ``on_cpu``: a classify job's
    model runs on the CPU rather than a GPU.

    On a GPU, a decoupled classify job keeps the feed's reservation for reading features and
    writing the outputs (or compressing the BAM, when it tags too) and gives torch the rest
    (its threads only launch kernels there). On the CPU the forward is nearly all the job's
    work, so torch gets every CPU: a leech TCNDwell on 2 CPUs classifies 242 reads/s with 2
    torch threads and 135 with 1 (the reader and writer need little); fused, it shares them
    with the extraction workers (the OS keeps every CPU busy with one or the other). A tag
    job compresses the BAM on all CPUs but the one tagging its records; score-snps keeps one
    CPU for its prefetch thread.
    """
    threads = max(1, int(threads))
    if job == "extract":
        return plan_threads(threads, fused=False, environ=environ)
    if job == "classify-fused":
        plan = plan_threads(threads, fused=True, environ=environ)
        # the forward on the CPU: torch takes every CPU beside the extraction workers, as
        # decoupled (a leech TCNDwell fused on 2 CPUs: 44.3 s with 1 torch thread, 33.4 s with 2)
        return replace(plan, torch_threads=threads) if on_cpu else plan
    if job == "classify":
        reserve = feed_reserve(threads)
        torch_threads = threads if on_cpu else max(1, threads - reserve)
        return ThreadPlan(0, 0, reserve, torch_threads=torch_threads, bam_threads=reserve)
    if job == "tag":  # one CPU walks and tags the records in Python, the rest compress
        return ThreadPlan(0, 0, 1, torch_threads=1, bam_threads=max(1, threads - 1))
    if job == "score-snps":
        return ThreadPlan(0, 0, 1, torch_threads=max(1, threads - 1))
    raise ValueError(f"job {job!r} is not one of {', '.join(JOBS)}")


def apply_plan(plan: ThreadPlan, job: str, threads: int) -> ThreadPlan:
    """Give torch its intra-op threads (the extraction workers and the BAM writer take theirs
    from the plan) and log the split once, at job start."""
    import torch

    torch.set_num_threads(plan.torch_threads)
    logger.info("%s: %d CPUs: %s", job, threads, plan.describe())
    return plan


def ordered_map(
    producer: Iterable[tuple],
    task: Callable,
    plan: ThreadPlan,
    initializer: Callable,
    initargs: tuple,
    tasks_in_flight_per_worker: int = 2,
) -> Iterator:
    """``task(*item)`` for each item of ``producer``, in order, on ``plan``'s worker processes.

    The extraction of both kinds of bundle runs this way: ``initializer(*initargs)`` sets up
    each worker once (open the POD5s and the BAM, parse the k-mer table), then tasks (kennel's
    features: where a batch of records starts in the BAM; leech's inputs: the batch of reads)
    flow through a bounded number of in-flight tasks, so memory does not grow with the number
    of reads. One worker runs in this process, with no pool at all. A worker process that dies
    (killed for memory, a crash in native code) ends the job with one line.

    In an extract job (no feed reservation) this process is itself one of the workers: it
    starts one process fewer and, whenever those have all their tasks in flight, runs the next
    task here instead of waiting. Otherwise it would sit between producing tasks and writing
    results while its workers had every CPU, and the one CPU-count more of processes than CPUs
    cost the 2-worker job a fifth of its throughput (when tasks still carried their reads). A fused
    classify job keeps this process for feeding the device.
    """
    if plan.extraction_workers == 1:
        os.environ.setdefault("RAYON_NUM_THREADS", str(plan.rayon_threads))
        initializer(*initargs)
        for item in producer:
            yield task(*item)
        return
    works_here = plan.feed_reserve == 0
    processes = plan.extraction_workers - 1 if works_here else plan.extraction_workers
    if works_here:
        os.environ.setdefault("RAYON_NUM_THREADS", str(plan.rayon_threads))
        initializer(*initargs)
    context = multiprocessing.get_context("spawn")  # no fork: callers may hold threads/CUDA
    try:
        with concurrent.futures.ProcessPoolExecutor(
            processes,
            mp_context=context,
            initializer=_init_worker_process,
            initargs=(plan.rayon_threads, initializer, initargs),
        ) as pool:
            widen_pipes(pool)
            limit = processes * tasks_in_flight_per_worker
            # futures and results computed here, in the producer's order
            pending: deque = deque()
            for item in producer:
                busy = sum(not _finished(entry) for entry in pending)
                if works_here and busy >= limit:
                    pending.append(_Done(task(*item)))
                else:
                    pending.append(pool.submit(task, *item))
                while pending and _finished(pending[0]):
                    yield _result(pending.popleft())
                if len(pending) > limit + INLINE_RESULTS_WAITING:
                    yield _result(pending.popleft())
            while pending:
                yield _result(pending.popleft())
    except concurrent.futures.process.BrokenProcessPool:
        # seen in a task's result, or in the next submission when the pool noticed first; the
        # worker's own traceback, if it left one, is in the log above: the job ends in one line
        raise KennelError(
            "an extraction worker process died (killed for memory, or a crash in native code)"
        ) from None


# results computed here that may wait behind a worker's unfinished task: enough to keep this
# process busy while the worker processes start (~0.45 s; a task takes ~0.07 s with 256 reads
# of kennel's features, ~0.6 s with 128 through leech's DP), each holding about 1 MB
INLINE_RESULTS_WAITING = 8


@dataclass(frozen=True)
class _Done:
    """A task's result computed in this process, queued among the workers' futures."""

    value: object


def _finished(entry) -> bool:
    return isinstance(entry, _Done) or entry.done()


def _result(entry):
    return entry.value if isinstance(entry, _Done) else entry.result()


# bytes of each of a pool's pipes: a 256-read result of kennel's features is ~0.6 MB
PIPE_BYTES = 1 << 20


def widen_pipes(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Give ``pool``'s task and result pipes :data:`PIPE_BYTES` (Linux; advisory).

    Through Linux's default 64 KiB pipe a worker wrote each ~0.6-MB result in ten pieces, each
    waiting for the job's process to read the one before: 1.9 ms per 70-ms task on 2 CPUs,
    where both processes are busy. Given room for a whole result it writes once and goes on.
    2-worker extraction, 5 alternating runs of 20k reads (whole job, separate from
    bench_extract's runs): 5,715-5,936 reads/s against 5,003-5,573 with the default pipes, and
    less CPU. The queues' ends are the executor's own
    attributes, so a Python without them, or a kernel that refuses (``pipe-max-size``, a
    user's pipe quota), keeps the default size and is only slower.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: default pipes
        return
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if set_size is None:
        return
    for name in ("_call_queue", "_result_queue"):
        reader = getattr(getattr(pool, name, None), "_reader", None)
        if reader is not None:
            with contextlib.suppress(OSError, ValueError):
                fcntl.fcntl(reader.fileno(), set_size, PIPE_BYTES)


def _init_worker_process(rayon: int, initializer: Callable, initargs: tuple) -> None:
    os.environ["RAYON_NUM_THREADS"] = str(rayon)  # before escapepod starts its pool
    initializer(*initargs)
