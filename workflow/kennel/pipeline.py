"""The GPU feed's moving parts: producer → batcher → device → writer (the SNP scorer shares
:class:`Prefetcher` and :mod:`kennel.feed`'s batch runner).

* :func:`fixed_batches` re-cuts a stream of variable-sized batches into batches of exactly one
  shape, padding the last, so a compiled model never sees a new shape (one compilation per run).
* :class:`DeviceStage` runs the model on a single worker thread (device calls stay sequential
  and in order) with several batches in flight: while the device computes batch *i*, the
  producer prepares *i+1* and the writer drains *i−1*.
* :class:`WriterThread` owns the output file behind a bounded queue, so the device consumer
  never waits on compression or disk; a dead writer surfaces as an error within a timeout,
  never as a hang.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kennel.errors import KennelError

_STOP = object()


@dataclass
class FixedBatch:
    """``arrays`` all have ``size`` rows; only the first ``n_real`` are real, the rest padding."""

    arrays: dict[str, np.ndarray]
    n_real: int
    size: int

    def __len__(self) -> int:
        return self.n_real


def fixed_batches(
    batches: Iterable[dict[str, np.ndarray]], size: int, padded: Sequence[str]
) -> Iterator[FixedBatch]:
    """Re-cut dicts of row-aligned arrays into batches of exactly ``size`` rows.

    Arrays named in ``padded`` are zero-padded up to ``size`` in the last batch (they feed the
    device); the others (ids, metadata) are only ever sliced to the real rows.
    """
    pending: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    pending_rows = 0
    for batch in batches:
        rows = len(next(iter(batch.values())))
        if rows == 0:
            continue
        for name, values in batch.items():
            pending[name].append(values)
        pending_rows += rows
        while pending_rows >= size:
            joined = {name: _joined(parts) for name, parts in pending.items()}
            yield FixedBatch({name: a[:size] for name, a in joined.items()}, size, size)
            pending = collections.defaultdict(list, {n: [a[size:]] for n, a in joined.items()})
            pending_rows -= size
    if pending_rows:
        joined = {name: _joined(parts) for name, parts in pending.items()}
        arrays = {}
        for name, values in joined.items():
            if name in padded:
                pad = np.zeros((size - pending_rows, *values.shape[1:]), values.dtype)
                values = np.concatenate([values, pad])
            arrays[name] = values
        yield FixedBatch(arrays, pending_rows, size)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)  # no copy when already whole


@dataclass
class StageTimes:
    """Seconds each stage spent working, to tell which one bounds the run."""

    produce: float = 0.0
    device: float = 0.0
    waited_on_device: float = 0.0  # for queued batches to come back (DeviceStage's finish)
    write: float = 0.0
    waited_on_writer: float = 0.0
    batches: int = 0


class WriterThread:
    """A dedicated thread that applies ``write(item)`` in order, behind a bounded queue."""

    def __init__(
        self,
        write: Callable[[Any], None],
        close: Callable[[], None] | None = None,
        depth: int = 8,
        put_timeout: float = 120.0,
        name: str = "kennel-writer",
    ):
        self._write = write
        self._close = close
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._put_timeout = put_timeout
        self._error: BaseException | None = None
        self._aborted = threading.Event()
        self.busy_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    item = self._queue.get(timeout=0.1)
                except queue.Empty:
                    if self._aborted.is_set():
                        return
                    continue
                if self._aborted.is_set():
                    return  # an error elsewhere: drop what is queued, close nothing
                if item is _STOP:
                    break
                started = time.perf_counter()
                self._write(item)
                self.busy_seconds += time.perf_counter() - started
            if self._close is not None:
                self._close()
        except BaseException as error:  # surfaced to the producer side by put()/finish()
            self._error = error
            # drain so a producer blocked on a full queue wakes up and sees the error
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break

    def put(self, item: Any) -> float:
        """Queue ``item``; returns seconds spent waiting for room. Raises if the writer died."""
        started = time.perf_counter()
        deadline = started + self._put_timeout
        while True:
            self._raise_if_failed()
            try:
                self._queue.put(item, timeout=min(1.0, max(deadline - time.perf_counter(), 0.01)))
                return time.perf_counter() - started
            except queue.Full:
                if not self._thread.is_alive():
                    self._raise_if_failed()
                    raise RuntimeError("writer thread stopped without an error") from None
                if time.perf_counter() >= deadline:
                    raise TimeoutError(
                        f"writer made no progress for {self._put_timeout:.0f} s (queue full)"
                    ) from None

    def finish(self) -> None:
        """Flush, close and join; re-raise the writer's error if it had one."""
        if self._thread.is_alive():
            try:
                self.put(_STOP)
            finally:
                self._thread.join(timeout=self._put_timeout)
        if self._thread.is_alive():  # the caller closes and renames the outputs next
            raise KennelError(
                f"writer: still writing {self._put_timeout:.0f} s after it was told to finish"
            )
        self._raise_if_failed()

    def abort(self) -> None:
        """Stop without flushing (on error elsewhere) and join the thread.

        A write in progress finishes first; nothing queued after it is written.
        """
        self._aborted.set()
        self._thread.join(timeout=self._put_timeout)  # the error being raised stays the one seen

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error


class DeviceStage:
    """One worker thread for every device call; up to ``depth`` batches in flight.

    ``run(batch)`` runs on that thread. Without ``finish`` it returns the batch's result. With
    ``finish`` it only queues the batch's work on the device and returns a handle, so the
    device really holds up to ``depth`` batches; ``finish(handle)``, called in order as a batch
    leaves, waits for that batch alone and returns its result. ``busy_seconds`` is host time
    on the device thread (on CUDA: launching, not the GPU's own busy time).
    """

    def __init__(
        self,
        run: Callable[[FixedBatch], Any],
        depth: int = 3,
        finish: Callable[[Any], Any] | None = None,
    ):
        self._run = run
        self._finish = finish
        self._depth = max(1, depth)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kennel-device")
        self._in_flight: collections.deque = collections.deque()
        self.busy_seconds = 0.0
        self.finish_seconds = 0.0  # waiting for queued batches to come back

    def _timed(self, batch: FixedBatch):
        started = time.perf_counter()
        result = self._run(batch)
        self.busy_seconds += time.perf_counter() - started
        return batch, result

    def _leave(self, future: concurrent.futures.Future) -> tuple[FixedBatch, Any]:
        batch, result = future.result()
        if self._finish is not None:
            started = time.perf_counter()
            result = self._finish(result)
            self.finish_seconds += time.perf_counter() - started
        return batch, result

    def call(self, function: Callable[[], Any]) -> Any:
        """Run ``function`` on the device thread and wait for it: warm-up belongs there, since
        CUDA graphs (torch.compile's reduce-overhead) are recorded per thread."""
        return self._pool.submit(function).result()

    def submit(self, batch: FixedBatch) -> list[tuple[FixedBatch, Any]]:
        """Queue ``batch``; return, in order, the finished (batch, result) pairs that must leave."""
        self._in_flight.append(self._pool.submit(self._timed, batch))
        done = []
        while len(self._in_flight) >= self._depth:
            done.append(self._leave(self._in_flight.popleft()))
        return done

    def drain(self) -> list[tuple[FixedBatch, Any]]:
        done = [self._leave(future) for future in self._in_flight]
        self._in_flight.clear()
        return done

    def close(self) -> None:
        for future in self._in_flight:
            future.cancel()
        self._in_flight.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)


def run_pipeline(
    produce: Iterable[FixedBatch],
    device: DeviceStage,
    writer: WriterThread,
    times: StageTimes,
) -> StageTimes:
    """Drive producer → device → writer to the end; every thread is joined, on success or error."""
    try:
        iterator = iter(produce)
        while True:
            started = time.perf_counter()
            batch = next(iterator, None)
            times.produce += time.perf_counter() - started
            if batch is None:
                break
            times.batches += 1
            for finished in device.submit(batch):
                times.waited_on_writer += writer.put(finished)
        for finished in device.drain():
            times.waited_on_writer += writer.put(finished)
        writer.finish()
    except BaseException:
        device.close()
        writer.abort()
        raise
    device.close()
    times.device = device.busy_seconds
    times.waited_on_device = device.finish_seconds
    times.write = writer.busy_seconds
    return times


class Prefetcher:
    """Runs ``produce`` over ``items`` on a thread, at most ``depth`` results ahead (the SNP
    engine encodes the next windows here while the device runs the current ones)."""

    _DONE = object()

    def __init__(self, produce: Callable, items: Sequence, depth: int = 1) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._work, args=(produce, items), name="kennel-prefetch", daemon=True
        )
        self._thread.start()

    def _work(self, produce, items) -> None:
        try:
            for item in items:
                if self._stop.is_set():
                    return
                self._put(produce(item))
            self._put(self._DONE)
        except BaseException as error:  # handed to the consumer, which re-raises it
            self._put(error)

    def _put(self, value) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(value, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator:
        while True:
            value = self._queue.get()
            if value is self._DONE:
                return
            if isinstance(value, BaseException):
                raise value
            yield value

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
