"""The shared feed: fixed shapes, order, a dead writer surfaces, no thread outlives a run."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from kennel.pipeline import (
    DeviceStage,
    StageTimes,
    WriterThread,
    fixed_batches,
    run_pipeline,
)


def _ragged(sizes):
    start = 0
    for size in sizes:
        yield {
            "x": np.arange(start, start + size, dtype=np.float32)[:, None],
            "id": np.arange(start, start + size),
        }
        start += size


def test_fixed_batches_have_one_shape_and_keep_every_row_in_order():
    batches = list(fixed_batches(_ragged([5, 0, 17, 3, 40, 1]), 16, padded=("x",)))
    assert {b.arrays["x"].shape for b in batches} == {(16, 1)}
    assert [b.n_real for b in batches] == [16, 16, 16, 16, 2]
    ids = np.concatenate([b.arrays["id"][: b.n_real] for b in batches])
    np.testing.assert_array_equal(ids, np.arange(66))
    last = batches[-1]
    assert len(last.arrays["id"]) == 2 and not last.arrays["x"][2:].any()


def _threads_named(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_pipeline_writes_in_order_and_joins_every_thread():
    written = []
    writer = WriterThread(lambda item: written.append(item[1]), depth=2)
    device = DeviceStage(lambda batch: batch.arrays["id"][: batch.n_real] * 2, depth=3)
    times = run_pipeline(fixed_batches(_ragged([7] * 20), 8, ("x",)), device, writer, StageTimes())
    np.testing.assert_array_equal(np.concatenate(written), np.arange(140) * 2)
    assert times.batches == 18
    assert not _threads_named("kennel-")


def test_a_call_runs_on_the_thread_that_runs_the_batches():
    seen = []
    device = DeviceStage(lambda batch: seen.append(threading.get_ident()), depth=2)
    assert device.call(lambda: seen.append(threading.get_ident()) or "warm") == "warm"
    writer = WriterThread(lambda item: None, depth=2)
    run_pipeline(fixed_batches(_ragged([5] * 4), 4, ("x",)), device, writer, StageTimes())
    assert len(seen) == 6 and set(seen) != {threading.get_ident()} and len(set(seen)) == 1


def test_dead_writer_surfaces_as_an_error_not_a_hang():
    def failing_write(item):
        raise OSError("disk full")

    calls = []
    writer = WriterThread(failing_write, depth=1, put_timeout=5)
    device = DeviceStage(lambda batch: calls.append(batch.n_real), depth=1)
    with pytest.raises(OSError, match="disk full"):
        run_pipeline(fixed_batches(_ragged([4] * 50), 4, ("x",)), device, writer, StageTimes())
    # the feed stopped within a few queue depths of the failed write, not after all 50 batches
    assert 1 <= len(calls) <= 10
    assert not _threads_named("kennel-")


def test_stuck_writer_times_out():
    release = threading.Event()
    writer = WriterThread(lambda item: release.wait(), depth=1, put_timeout=0.5)
    device = DeviceStage(lambda batch: batch.n_real, depth=1)
    with pytest.raises(TimeoutError, match="writer made no progress"):
        run_pipeline(fixed_batches(_ragged([4] * 20), 4, ("x",)), device, writer, StageTimes())
    release.set()
    for thread in _threads_named("kennel-"):  # the released writer then sees the abort and ends
        thread.join(timeout=30)
    assert not _threads_named("kennel-")


def test_device_error_stops_the_writer_too():
    def broken(batch):
        raise RuntimeError("CUDA error: device-side assert")

    writer = WriterThread(lambda item: None, depth=2)
    with pytest.raises(RuntimeError, match="device-side assert"):
        run_pipeline(
            fixed_batches(_ragged([4] * 10), 4, ("x",)),
            DeviceStage(broken, 2),
            writer,
            StageTimes(),
        )
    assert not _threads_named("kennel-")


def test_writer_runs_beside_the_device():
    """The writer writes batch 0 while the device is inside its call on batch 1.

    Both wait at a two-party barrier, which only opens if the two calls are in progress at the
    same time; run one after the other, the barrier times out and the run raises.
    """
    meeting = threading.Barrier(2, timeout=30)
    met = []

    def write(item):
        batch, _ = item
        if batch.arrays["id"][0] == 0:
            met.append(("writer", meeting.wait()))

    def compute(batch):
        if batch.arrays["id"][0] == 4:
            met.append(("device", meeting.wait()))

    writer = WriterThread(write, depth=4)
    device = DeviceStage(compute, depth=3)
    times = run_pipeline(fixed_batches(_ragged([4] * 12), 4, ("x",)), device, writer, StageTimes())
    assert times.batches == 12
    assert sorted(who for who, _ in met) == ["device", "writer"]
    assert not _threads_named("kennel-")


def test_with_finish_batches_wait_on_the_device_and_leave_in_order():
    """The CUDA shape of the stage, with a thread standing in for the GPU's queue: ``run`` only
    queues a batch and returns; ``finish`` waits for that batch alone. Several batches are
    queued on the "device" at once, and results still leave in order."""
    import concurrent.futures
    import time

    gpu = concurrent.futures.ThreadPoolExecutor(1)  # runs queued work in order, like a stream
    queued, deepest = [0], [0]
    lock = threading.Lock()

    def compute(batch):
        time.sleep(0.01)
        with lock:
            queued[0] -= 1
        return batch.arrays["id"][: batch.n_real] * 2

    def run(batch):
        with lock:
            queued[0] += 1
            deepest[0] = max(deepest[0], queued[0])
        return gpu.submit(compute, batch)

    written = []
    writer = WriterThread(lambda item: written.append(item[1]), depth=2)
    device = DeviceStage(run, depth=3, finish=lambda future: future.result())
    run_pipeline(fixed_batches(_ragged([7] * 20), 8, ("x",)), device, writer, StageTimes())
    gpu.shutdown()
    np.testing.assert_array_equal(np.concatenate(written), np.arange(140) * 2)
    assert deepest[0] >= 2  # the device held more than the batch just launched
    assert not _threads_named("kennel-")
