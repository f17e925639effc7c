"""Keeping the accelerator fed: device choice, compile policy and fixed-shape batches.

Both arms feed a model the same way and differ only in what they feed, so the pieces live here:
:func:`resolve_device` picks the device, :func:`should_compile` decides whether compiling pays
off, :func:`compile_for` compiles the callable the feeder actually calls, :func:`pad_rows`
keeps every batch the same shape so a job compiles once, and :class:`BatchRunner` runs batches
in pieces of one fixed size with the one out-of-memory policy. Streaming and measuring on a
GPU (pinned buffers, CUDA events, NVML) live in :mod:`kennel.gpu`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path

import torch

from kennel.cuda_graphs import ready_cuda_graphs_thread
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


# cuBLAS, cuDNN 8, cuFFT and cuSOLVER report a failed workspace allocation as a RuntimeError
# naming *_ALLOC_FAILED (cuDNN 9: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED), and the
# CUDA runtime an allocation outside torch's allocator (a CUDA graph's instantiation, a
# module's load) as "CUDA error: out of memory" (torch's AcceleratorError, a RuntimeError), not
# as torch.OutOfMemoryError: the same shortage
_LIBRARY_OUT_OF_MEMORY = ("_ALLOC_FAILED", "_DEVICE_ALLOCATION_FAILED", "CUDA error: out of memory")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says the device ran out of memory (what halving the batch can mend)."""
    return any(isinstance(e, torch.OutOfMemoryError) for e in _causes(error)) or (
        is_library_out_of_memory(error)
    )


def is_library_out_of_memory(error: BaseException) -> bool:
    """Whether device memory ran out outside torch's allocator (a CUDA library's workspace,
    or the CUDA runtime's own allocation): emptying torch's cache may be enough."""
    return any(
        isinstance(e, RuntimeError) and any(text in str(e) for text in _LIBRARY_OUT_OF_MEMORY)
        for e in _causes(error)
    )


def _in_compilation(error: BaseException) -> bool:
    """Whether ``error`` is torch.compile's for one in the compilation it ran."""
    from torch._dynamo.exc import BackendCompilerFailed

    return isinstance(error, BackendCompilerFailed)


def _causes(error: BaseException | None) -> Iterator[BaseException]:
    """``error`` and the errors it wraps: torch.compile raises its own error for one in the
    compilation it ran (a shortage while inductor benchmarks kernels), holding it as
    ``inner_exception`` (raised ``from None``); others say ``raise ... from``."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or getattr(error, "inner_exception", None)


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
def copying_to(device: torch.device, job: str, what: str) -> Iterator[None]:
    """Copying ``what`` (e.g. "a batch of 1024 rows") to ``device``: out of memory there ends
    the job in one line (the forward's halving cannot help a batch that does not fit at all)."""
    try:
        yield
    except (torch.OutOfMemoryError, RuntimeError) as error:
        if not is_out_of_memory(error):
            raise
        raise KennelError(
            f"{job}: out of {device.type} memory copying {what} to the device "
            f"({free_memory(device)})"
        ) from None


# glibc gives a freed block of over 128 KiB straight back to the kernel (munmap, or a trim of
# the heap's top), so each CPU forward faults its activations in again, page by page: kennel's
# TCN on 2 CPUs spent more time in the kernel than computing (49 s system vs 36 s user over a
# 97k-read shard). Blocks up to M_MMAP_THRESHOLD come from the heap instead, and up to
# M_TRIM_THRESHOLD of free heap is kept for the next forward (a thread's arena holds at most
# 64 MiB a block whatever the threshold, so a larger one is mapped anyway).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
CPU_HEAP_BLOCK = 64 << 20
CPU_HEAP_KEPT = 256 << 20
_heap_kept = False


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed activations for the next CPU forward (process-wide, once);
    False where the C library is not glibc (another allocator has its own policy)."""
    global _heap_kept
    if _heap_kept:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt (macOS); musl's takes nothing (returns 0)
        return False
    # setting either also stops glibc raising them itself after each freed mapping
    _heap_kept = bool(
        mallopt(_M_TRIM_THRESHOLD, CPU_HEAP_KEPT) and mallopt(_M_MMAP_THRESHOLD, CPU_HEAP_BLOCK)
    )
    if _heap_kept:
        logger.info(
            "CPU forwards: malloc keeps freed blocks of up to %d MiB, %d MiB of free heap",
            CPU_HEAP_BLOCK >> 20, CPU_HEAP_KEPT >> 20,
        )  # fmt: skip
    return _heap_kept


class BatchRunner:
    """Runs batches through a model in pieces of one fixed size, with the one out-of-memory
    policy both arms share.

    A batch runs as pieces of ``rows`` rows (cache-sized pieces on the CPU, the whole batch on a
    GPU); with ``pad`` the last piece is zero-padded to ``rows``, so a compiled model sees one
    shape. On an out-of-memory error the piece size halves for this batch and every later one
    (one new shape: at most one more compilation per halving) and the batch is run again; a
    warning says so (a CUDA library's failed allocation, or any with CUDA graphs, first retries
    the same size once with torch's cache emptied, except with CUDA graphs at a size where that
    model has never completed a forward). When even one row does not fit: one line naming the
    job, the batch size and the free memory. Rows do not interact, so the outputs do not depend
    on the piece size.
    On the CPU it has malloc keep freed activations for the next piece
    (:func:`keep_freed_memory`).
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
        # (model, piece size) pairs a forward has completed at: one runner may serve several
        # compiled models (the SNP arm's replicates), each its own CUDA graphs
        self.shapes_run: set[tuple[Hashable, int]] = set()
        if device.type == "cpu":
            keep_freed_memory()

    def warm_up(
        self, forward: Callable, inputs: list[torch.Tensor], model: Hashable = None
    ) -> None:
        """Run ``forward`` on the batches' shape before the first batch, so any compilation
        (and any halving) happens here, never mid-stream. CUDA graph trees run a new graph's
        first call eagerly and record it on the second, so with CUDA graphs it runs twice: the
        recording, with its synchronisation, is not the first batch's either."""
        for _ in range(2 if self.cuda_graphs else 1):
            self(forward, inputs, model=model)

    def __call__(
        self,
        forward: Callable,
        inputs: list[torch.Tensor],
        n_real: int | None = None,
        model: Hashable = None,
    ):
        """``forward(*inputs)`` over the first ``n_real`` rows (default: all), outputs cut to
        them; a tuple output keeps its structure (None stays None). ``model`` names which
        compiled model ``forward`` runs, where one runner serves several."""
        n_real = inputs[0].shape[0] if n_real is None else n_real
        if self.cuda_graphs:  # on whichever thread runs the batches (classify: its own)
            ready_cuda_graphs_thread()
        emptied = False
        while True:
            try:
                return self._run(forward, inputs, n_real, model)
            except (torch.OutOfMemoryError, RuntimeError) as error:
                if not is_out_of_memory(error):
                    raise
                library = is_library_out_of_memory(error)
                if self.device.type == "cuda" and (library or self.cuda_graphs) and not emptied:
                    # torch empties its cache before its own out-of-memory, but not for cuBLAS/
                    # cuDNN (their state is allocated outside it) nor while a CUDA graph is
                    # being warmed up or recorded (allocations then go to the graph's pool):
                    # freed blocks may hold what was lacking. Give them back and retry this
                    # size once before a smaller shape costs a compilation
                    torch.cuda.empty_cache()
                    emptied = True
                    # except a CUDA-graph shape that never ran: graph trees count its first
                    # (eager) call as warmed up before running it, so a retry would record a
                    # graph with kernels never run, which inductor tunes on their first run
                    # (synchronising, which a capture forbids); a new shape warms up afresh
                    # (a compilation that ran out of memory made no graph: it may retry)
                    if (
                        not self.cuda_graphs
                        or (model, self.rows) in self.shapes_run
                        or _in_compilation(error)
                    ):
                        logger.warning(
                            "%s: %s ran out of memory; retrying with torch's cache emptied",
                            self.job, "a CUDA library" if library else "a CUDA-graph forward",
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

    def _run(self, forward: Callable, inputs: list[torch.Tensor], n_real: int, model: Hashable):
        pieces = []
        for start in range(0, max(n_real, 1), self.rows):
            real = min(self.rows, n_real - start)
            piece = [t[start : start + self.rows] for t in inputs]
            if self.pad:
                piece = [pad_rows(t, self.rows) for t in piece]
            if self.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            output = forward(*piece)
            self.shapes_run.add((model, self.rows))
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
