"""Measuring and streaming on the device: what only a GPU makes worth doing.

:class:`PinnedFeed` copies batches through reused pinned host buffers on a side stream and
copies outputs back behind CUDA events, :class:`DeviceTimer` times device work by CUDA events
(the host's clock on a CPU), :class:`GpuMonitor` samples the GPU's busy fraction through NVML.
Both arms use them beside :mod:`kennel.feed`'s batching and out-of-memory policy.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from kennel.feed import copying_to

logger = logging.getLogger(__name__)


class PinnedFeed:
    """CUDA inputs and outputs that never make the host wait on the batch it just launched.

    :meth:`upload` copies arrays into one of ``slots`` reused pinned host buffers, then to the
    device on a side stream; the compute stream waits for that copy only (an event). Both arms
    upload this way: classify a batch at a time, the SNP scorer a cluster's windows at a time.
    :meth:`launch` uploads, runs ``compute`` and copies the outputs back into pinned host
    memory behind a second event, returning at once with the work queued on the device;
    :meth:`finish` waits for that batch's event and hands back numpy arrays. A slot is refilled
    only once the device has read its last copy out (that copy's event), so no upload
    overwrites bytes still on their way. CUDA events time the copy in, the compute and the copy
    back (seconds, summed in :attr:`seconds`; :meth:`settle` adds uploads not yet counted).
    """

    def __init__(self, device: torch.device, shapes: list[tuple[tuple[int, ...], torch.dtype]],
                 slots: int, job: str) -> None:  # fmt: skip
        self.device = device
        self.job = job
        self.copy_stream = torch.cuda.Stream(device=device)
        self.buffers = [
            [torch.empty(shape, dtype=dtype, pin_memory=True) for shape, dtype in shapes]
            for _ in range(max(2, slots))
        ]
        self.copied: list[torch.cuda.Event | None] = [None] * len(self.buffers)
        # per slot, the (start, end) events of an upload() whose copy time is not counted yet
        self.untimed: list[tuple | None] = [None] * len(self.buffers)
        self.next_slot = 0
        self.seconds = {"copy_in": 0.0, "compute": 0.0, "copy_back": 0.0}

    def _to_device(
        self, arrays: list[np.ndarray], what: str | None = None
    ) -> tuple[list[torch.Tensor], int, tuple[torch.cuda.Event, ...]]:
        slot = self.next_slot
        self.next_slot = (slot + 1) % len(self.buffers)
        if self.copied[slot] is not None:
            self.copied[slot].synchronize()  # its previous copy has left the buffer
        self._count(slot)
        host = self.buffers[slot]
        for buffer, array in zip(host, arrays, strict=True):
            buffer[: len(array)].copy_(torch.from_numpy(array))
        began, copied = torch.cuda.Event(enable_timing=True), _waited_event()
        with (
            torch.cuda.stream(self.copy_stream),
            copying_to(self.device, self.job, what or f"a batch of {len(arrays[0])} rows"),
        ):
            began.record()
            inputs = [
                buffer[: len(array)].to(self.device, non_blocking=True)
                for buffer, array in zip(host, arrays, strict=True)
            ]
            copied.record()
        self.copied[slot] = copied
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(copied)
        for tensor in inputs:  # allocated on the copy stream, used on this one
            tensor.record_stream(stream)
        # where this batch's compute may begin: after its copy and after the batches queued
        # before it, so computing times do not overlap and sum to no more than the wall
        ready = torch.cuda.Event(enable_timing=True)
        ready.record(stream)
        return inputs, slot, (began, copied, ready)

    def upload(self, arrays: list[np.ndarray], what: str) -> list[torch.Tensor]:
        """``arrays`` (at most the buffers' rows; ``what`` they hold, for an out-of-memory
        message) on the device, usable on the current stream; the copy's time is counted when
        its slot comes round again, or by :meth:`settle`."""
        inputs, slot, (began, copied, _ready) = self._to_device(arrays, what)
        self.untimed[slot] = (began, copied)
        return inputs

    def launch(self, arrays: list[np.ndarray], compute: Callable) -> tuple:
        inputs, _slot, (began, copied, ready) = self._to_device(arrays)
        stream = torch.cuda.current_stream(self.device)
        outputs = compute(inputs)
        computed = torch.cuda.Event(enable_timing=True)
        computed.record(stream)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        copies = tuple(
            None
            if output is None
            else torch.empty(output.shape, dtype=torch.float32, pin_memory=True).copy_(
                output.float(), non_blocking=True
            )
            for output in outputs
        )
        returned = _waited_event()
        returned.record(stream)
        return (began, copied, ready, computed, returned), copies

    def finish(self, handle: tuple) -> tuple:
        events, copies = handle
        events[-1].synchronize()
        for name, (first, last) in zip(self.seconds, ((0, 1), (2, 3), (3, 4)), strict=True):
            self.seconds[name] += events[first].elapsed_time(events[last]) / 1e3
        return tuple(None if copy is None else copy.numpy().astype(np.float64) for copy in copies)

    def settle(self) -> dict[str, float]:
        """Wait for the uploads not yet counted, add their copy times; :attr:`seconds`."""
        for slot, events in enumerate(self.untimed):
            if events is not None:
                events[1].synchronize()
                self._count(slot)
        return self.seconds

    def _count(self, slot: int) -> None:
        """Add the copy time of ``slot``'s last :meth:`upload` (its copy has finished)."""
        if self.untimed[slot] is not None:
            began, copied = self.untimed[slot]
            self.seconds["copy_in"] += began.elapsed_time(copied) / 1e3
            self.untimed[slot] = None


def _waited_event() -> torch.cuda.Event:
    """A timing event the host will wait on. Blocking: CUDA's default with one context on a
    many-core machine is to spin while waiting, which would take a whole CPU from the writer
    and the extraction workers for every batch's GPU time."""
    return torch.cuda.Event(enable_timing=True, blocking=True)


class DeviceTimer:
    """Seconds the device spends inside timed sections, summed: on CUDA between two events on
    the current stream (the launch returns long before the GPU is done, so host clocks would
    time only the launch), on the CPU by the host's clock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pending: collections.deque = collections.deque()  # CUDA events not yet read
        self._seconds = 0.0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        if not self.cuda:
            began = time.perf_counter()
            yield
            self._seconds += time.perf_counter() - began
            return
        began, ended = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        began.record()
        yield
        ended.record()
        self.pending.append((began, ended))
        while self.pending and self.pending[0][1].query():  # read what is done, wait for none
            self._add(*self.pending.popleft())

    def _add(self, began, ended) -> None:
        self._seconds += began.elapsed_time(ended) / 1e3

    @property
    def seconds(self) -> float:
        """The total so far, waiting for the sections still running on the device."""
        while self.pending:
            began, ended = self.pending.popleft()
            ended.synchronize()
            self._add(began, ended)
        return self._seconds


class GpuMonitor:
    """Samples the GPU's busy fraction through NVML (``torch.cuda.utilization``: the share of
    the last sample period in which a kernel ran) on a thread while a job runs. ``fraction`` is
    None without CUDA or without nvidia-ml-py."""

    def __init__(self, device: torch.device, interval: float = 0.1) -> None:
        self.device = device
        self.interval = interval
        self.samples: list[float] = []
        self.failed = False  # a fraction over part of the run would pass for the whole
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if device.type == "cuda":
            try:
                torch.cuda.utilization(device)
            except Exception as error:  # no NVML library or no nvidia-ml-py: say so, go on
                logger.warning("no NVML GPU busy fraction (%s)", error)
            else:
                self._thread = threading.Thread(
                    target=self._sample, daemon=True, name="kennel-nvml"
                )

    def _sample(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.samples.append(torch.cuda.utilization(self.device) / 100)
        except Exception as error:  # a thread's error would pass unseen: say so, report none
            logger.warning("NVML sampling failed after %d samples (%s)", len(self.samples), error)
            self.failed = True

    def restart(self) -> None:
        """Forget the samples so far: the fraction covers only what runs from here on."""
        self.samples.clear()

    def __enter__(self) -> GpuMonitor:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """End the sampling (once; the ``with`` block's end calls it too): read :attr:`fraction`
        after this, or a run shorter than one interval has none."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if not self.samples and not self.failed:
                # a run shorter than one interval (after restart()) still gets a fraction:
                # NVML's last sample period, which ends now and so covers the run
                try:
                    self.samples.append(torch.cuda.utilization(self.device) / 100)
                except Exception as error:  # the outputs are written: report no fraction
                    logger.warning("no NVML GPU busy fraction at the run's end (%s)", error)
                    self.failed = True

    @property
    def fraction(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples and not self.failed else None
