"""Keeping the accelerator fed: device choice, compile policy and fixed-shape batches.

Both arms feed a model the same way and differ only in what they feed, so the pieces live here:
:func:`resolve_device` picks the device, :func:`should_compile` decides whether compiling pays
off, :func:`compile_for` compiles the callable the feeder actually calls, and :func:`pad_rows`
keeps every batch the same shape so a job compiles once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

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


def forward_in_parts(forward: Callable, inputs: list[torch.Tensor], parts: int) -> tuple:
    """``forward(*inputs)`` on ``parts`` row slices of the batch, outputs concatenated again
    (a model's output tuple; None stays None). Rows do not interact, so the result is the same
    as one call."""
    rows = inputs[0].shape[0]
    if parts <= 1 or rows <= 1:
        return forward(*inputs)
    size = -(-rows // parts)
    pieces = [forward(*(t[start : start + size] for t in inputs)) for start in range(0, rows, size)]
    return tuple(
        None if outputs[0] is None else torch.cat(outputs) for outputs in zip(*pieces, strict=True)
    )
