"""Keeping the accelerator fed: device choice, compile policy and fixed-shape batches.

Both arms feed a model the same way and differ only in what they feed, so the pieces live here:
:func:`resolve_device` picks the device, :func:`should_compile` decides whether compiling pays
off, :func:`compile_for` compiles the callable the feeder actually calls, :func:`pad_rows`
keeps every batch the same shape so a job compiles once, and :class:`BatchRunner` runs batches
in pieces of one fixed size with the one out-of-memory policy.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from kennel.errors import KennelError

logger = logging.getLogger(__name__)

DEVICES = ("auto", "cuda", "cpu")
COMPILE_MODES = ("auto", "on", "off")


def resolve_device(requested: str) -> torch.device:
    """Map ``'auto'`` (CUDA when present, else CPU), ``'cuda'`` or ``'cpu'`` to a device."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise KennelError(
                f"device: 'cuda' was requested but torch {torch.__version__} sees no CUDA device "
                "(use 'auto' to fall back to the CPU)"
            )
        return torch.device("cuda")
    if requested == "cpu":
        return torch.device("cpu")
    raise KennelError(f"device: {requested!r} is not one of {', '.join(DEVICES)}")


def should_compile(mode: str, n_items: int, threshold: int, cache_dir: str | None) -> bool:
    """Decide whether to ``torch.compile``: ``'on'``, ``'off'``, or ``'auto'``.

    ``'auto'`` compiles only when the job is big enough to repay the compile time
    (``n_items > threshold``) or when a persistent inductor cache makes compiling cheap.
    """
    if mode == "on":
        return True
    if mode == "off":
        return False
    if mode == "auto":
        return n_items > threshold or bool(cache_dir)
    raise KennelError(f"compile: {mode!r} is not one of {', '.join(COMPILE_MODES)}")


def configure_inductor_cache(cache_dir: str | os.PathLike | None) -> None:
    """Point inductor's on-disk caches at ``cache_dir`` so later jobs reuse compiled kernels."""
    if not cache_dir:
        return
    path = Path(cache_dir).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KennelError(f"{cache_dir}: cannot create the inductor cache ({error})") from None
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True


def compile_for(
    module: torch.nn.Module | Callable, device: torch.device, has_python_hooks: bool
) -> Callable:
    """Compile the callable that the feeder calls, for fixed shapes, and return it.

    On CUDA without Python forward hooks this is ``mode='reduce-overhead'`` (CUDA graphs:
    one launch per batch); CUDA graphs replay kernels without running Python, so modules with
    hooks, and CPU runs, get plain inductor. ``dynamic=False`` because batches are padded to one
    shape; a new shape is a deliberate recompile, not a dynamic graph.
    """
    mode = "reduce-overhead" if uses_cuda_graphs(device, has_python_hooks) else None
    logger.info("compiling %s with inductor (mode=%s)", type(module).__name__, mode or "default")
    return torch.compile(module, backend="inductor", mode=mode, dynamic=False)


def uses_cuda_graphs(device: torch.device, has_python_hooks: bool) -> bool:
    """Whether :func:`compile_for` records CUDA graphs (callers then mark steps and clone
    outputs before the next replay overwrites them)."""
    return device.type == "cuda" and not has_python_hooks


def ready_cuda_graphs_thread() -> None:
    """Let this thread run CUDA graphs recorded by torch.compile (call it on the thread that
    will, before the first compiled call).

    Before torch 2.13 (pytorch#123177), cudagraph trees keep their per-device managers in state
    that exists only on the thread that imported them and on autograd's threads: a compiled
    call on any other Python thread (classify's device thread, a second job's thread) failed an
    assertion. This seeds that state on the current thread as torch 2.13 does lazily; where it
    already exists, nothing changes.
    """
    from collections import defaultdict

    from torch._inductor import cudagraph_trees

    local = cudagraph_trees.local
    if hasattr(local, "tree_manager_containers") or torch._C._is_key_in_tls(
        "tree_manager_containers"
    ):
        return
    local.tree_manager_containers = {}
    local.tree_manager_locks = defaultdict(threading.Lock)
    torch._C._stash_obj_in_tls("tree_manager_containers", local.tree_manager_containers)
    torch._C._stash_obj_in_tls("tree_manager_locks", local.tree_manager_locks)


def has_forward_hooks(module: torch.nn.Module) -> bool:
    """Whether any submodule runs Python forward (pre-)hooks."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


def compile_count() -> int:
    """Frames torch._dynamo has compiled in this process (tests assert a job adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """Pad the batch (first) dimension with zeros up to ``rows``, so every batch has one shape."""
    have = tensor.shape[0]
    if have > rows:
        raise ValueError(f"batch of {have} rows does not fit a fixed size of {rows}")
    if have == rows:
        return tensor
    padding = tensor.new_zeros((rows - have, *tensor.shape[1:]))
    return torch.cat([tensor, padding])


# Rows per forward on the CPU: measured on the leech TCNDwell (2 cores), a 1024-row batch ran
# 2.6x slower per row than 128-row pieces of it (its activations fall out of cache)
CPU_ROWS = 128


def cpu_parts(rows: int, limit: int = CPU_ROWS) -> int:
    """Into how many equal pieces a ``rows``-row batch is cut for the CPU: the fewest that are
    at most ``limit`` rows and divide ``rows`` exactly (so a compiled graph sees one shape); 1
    when that would leave pieces under a quarter of ``limit``."""
    for parts in range(-(-rows // limit), rows + 1):
        if rows % parts == 0:
            return parts if rows // parts >= limit // 4 else 1
    return 1


# cuBLAS, cuDNN, cuFFT and cuSOLVER report a failed workspace allocation as a RuntimeError
# naming *_ALLOC_FAILED, not as torch.OutOfMemoryError: the same shortage of device memory
_LIBRARY_OUT_OF_MEMORY = "_ALLOC_FAILED"


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says the device ran out of memory (what halving the batch can mend)."""
    return isinstance(error, torch.OutOfMemoryError) or is_library_out_of_memory(error)


def is_library_out_of_memory(error: BaseException) -> bool:
    """Whether a CUDA library, not torch's allocator, failed to allocate device memory."""
    return isinstance(error, RuntimeError) and _LIBRARY_OUT_OF_MEMORY in str(error)


def free_memory(device: torch.device) -> str:
    """The device's free memory, for an out-of-memory message."""
    if device.type == "cuda":
        # the device's free memory ignores a per-process cap: torch's own holding says more
        free, total = torch.cuda.mem_get_info(device)
        held = torch.cuda.memory_reserved(device)
        return f"{free >> 20} MiB free of {total >> 20} MiB, {held >> 20} MiB held by torch"
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return f"{int(line.split()[1]) >> 10} MiB available"
    except OSError:
        pass
    return "free memory unknown"


@contextlib.contextmanager
def copying_to(device: torch.device, job: str, rows: int) -> Iterator[None]:
    """Copying a batch of ``rows`` rows to ``device``: out of memory there ends the job in one
    line (the forward's halving cannot help a batch that does not fit at all)."""
    try:
        yield
    except (torch.OutOfMemoryError, RuntimeError) as error:
        if not is_out_of_memory(error):
            raise
        raise KennelError(
            f"{job}: out of {device.type} memory copying a batch of {rows} rows to the device "
            f"({free_memory(device)})"
        ) from None


class BatchRunner:
    """Runs batches through a model in pieces of one fixed size, with the one out-of-memory
    policy both arms share.

    A batch runs as pieces of ``rows`` rows (cache-sized pieces on the CPU, the whole batch on a
    GPU); with ``pad`` the last piece is zero-padded to ``rows``, so a compiled model sees one
    shape. On an out-of-memory error the piece size halves for this batch and every later one
    (one new shape: at most one more compilation per halving) and the batch is run again; a
    warning says so (a CUDA library's failed allocation first retries the same size once, with
    torch's cache emptied). When even one row does not fit: one line naming the job, the batch
    size and the free memory. Rows do not interact, so the outputs do not depend on the piece size.
    """

    def __init__(
        self,
        rows: int,
        job: str,
        device: torch.device,
        pad: bool = True,
        cuda_graphs: bool = False,
    ) -> None:
        self.rows = max(1, int(rows))
        self.job = job
        self.device = device
        self.pad = pad
        self.cuda_graphs = cuda_graphs
        self.halvings = 0

    def __call__(self, forward: Callable, inputs: list[torch.Tensor], n_real: int | None = None):
        """``forward(*inputs)`` over the first ``n_real`` rows (default: all), outputs cut to
        them; a tuple output keeps its structure (None stays None)."""
        n_real = inputs[0].shape[0] if n_real is None else n_real
        if self.cuda_graphs:  # on whichever thread runs the batches (classify: its own)
            ready_cuda_graphs_thread()
        emptied = False
        while True:
            try:
                return self._run(forward, inputs, n_real)
            except (torch.OutOfMemoryError, RuntimeError) as error:
                if not is_out_of_memory(error):
                    raise
                if self.device.type == "cuda" and is_library_out_of_memory(error) and not emptied:
                    # cuBLAS/cuDNN allocate their own state outside torch's cache, which may
                    # hold the memory they lack as freed blocks (torch empties it before its
                    # own out-of-memory, never for theirs): give it back and retry this size
                    # once before a smaller shape costs a compilation
                    torch.cuda.empty_cache()
                    emptied = True
                    logger.warning(
                        "%s: a CUDA library ran out of memory; retrying with torch's cache "
                        "emptied", self.job,
                    )  # fmt: skip
                    continue
                if self.rows == 1:
                    raise KennelError(
                        f"{self.job}: out of {self.device.type} memory even one row at a time "
                        f"(batch size {inputs[0].shape[0]}; {free_memory(self.device)})"
                    ) from None
                self.rows //= 2
                self.halvings += 1
                logger.warning(
                    "%s: out of %s memory; running this and later batches in pieces of %d rows",
                    self.job, self.device.type, self.rows,
                )  # fmt: skip

    def _run(self, forward: Callable, inputs: list[torch.Tensor], n_real: int):
        pieces = []
        for start in range(0, max(n_real, 1), self.rows):
            real = min(self.rows, n_real - start)
            piece = [t[start : start + self.rows] for t in inputs]
            if self.pad:
                piece = [pad_rows(t, self.rows) for t in piece]
            if self.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            output = forward(*piece)
            pieces.append(_cut(output, real, clone=self.cuda_graphs))
        if len(pieces) == 1:
            return pieces[0]
        if isinstance(pieces[0], tuple):
            return tuple(
                None if parts[0] is None else torch.cat(parts)
                for parts in zip(*pieces, strict=True)
            )
        return torch.cat(pieces)


def _cut(output, rows: int, clone: bool):
    """The first ``rows`` rows of a forward's output (a tensor or a tuple of tensors or None);
    cloned when a CUDA graph will reuse the memory on its next replay."""
    if isinstance(output, tuple):
        return tuple(None if o is None else _cut(o, rows, clone) for o in output)
    output = output[:rows]
    return output.clone() if clone else output


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
        self, arrays: list[np.ndarray]
    ) -> tuple[list[torch.Tensor], int, tuple[torch.cuda.Event, ...]]:
        slot = self.next_slot
        self.next_slot = (slot + 1) % len(self.buffers)
        if self.copied[slot] is not None:
            self.copied[slot].synchronize()  # its previous copy has left the buffer
        self._count(slot)
        host = self.buffers[slot]
        for buffer, array in zip(host, arrays, strict=True):
            buffer[: len(array)].copy_(torch.from_numpy(array))
        began, copied = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        with torch.cuda.stream(self.copy_stream), copying_to(self.device, self.job, len(arrays[0])):
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

    def upload(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        """``arrays`` (at most the buffers' rows) on the device, usable on the current stream;
        the copy's time is counted when its slot comes round again, or by :meth:`settle`."""
        inputs, slot, (began, copied, _ready) = self._to_device(arrays)
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
        returned = torch.cuda.Event(enable_timing=True)
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
        while not self._stop.wait(self.interval):
            self.samples.append(torch.cuda.utilization(self.device) / 100)

    def restart(self) -> None:
        """Forget the samples so far: the fraction covers only what runs from here on."""
        self.samples.clear()

    def __enter__(self) -> GpuMonitor:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def fraction(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None
