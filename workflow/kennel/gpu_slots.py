"""One GPU per job where no scheduler has chosen one.

SLURM gives each job its own device through ``CUDA_VISIBLE_DEVICES``. A local
``snakemake --cores N --resources gpu=G`` only counts: it starts G GPU jobs at once, and each
would see every device and use the first. :func:`bind_gpu` closes that gap. At the start of a GPU
command, before torch initialises CUDA (the driver reads ``CUDA_VISIBLE_DEVICES`` once, then),
it takes an exclusive ``flock`` on one slot file per device, in a directory every job on the
machine shares, and sets ``CUDA_VISIBLE_DEVICES`` to that device for the rest of the process.
The kernel drops the lock when the process ends, however it ends, so a killed job never keeps a
device. When every slot is taken the job waits for one (more jobs than devices) and says so.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kennel.errors import KennelError

logger = logging.getLogger(__name__)

SLOT_DIR_ENV = "KENNEL_GPU_SLOT_DIR"  # where the slot files live (default: per user, in $TMPDIR)
FAKE_COUNT_ENV = "KENNEL_FAKE_GPU_COUNT"  # pretend this many devices (tests, no GPU needed)
POLL_SECONDS = 0.5


@dataclass
class GpuSlot:
    """A device reserved for this process: held while ``handle`` (its locked slot file) is open."""

    device: str
    path: Path
    handle: TextIO

    def release(self) -> None:
        self.handle.close()


_held: GpuSlot | None = None  # the process's reservation; the lock lasts as long as the process


def device_count() -> int:
    """CUDA devices on this machine, without initialising CUDA (``KENNEL_FAKE_GPU_COUNT`` wins)."""
    fake = os.environ.get(FAKE_COUNT_ENV, "").strip()
    if fake:
        if not fake.isdigit():
            raise KennelError(f"{FAKE_COUNT_ENV}={fake!r} is not a number of devices")
        return int(fake)
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    count = _nvml_device_count()
    if count is not None:
        return count
    # NVML did not answer: the CUDA runtime would, but in this process it would initialise, and
    # CUDA_VISIBLE_DEVICES set after that is never read, so every job would share device 0
    logger.warning("NVML cannot count the GPUs; a child process asks CUDA")
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if child.returncode != 0 or not child.stdout.strip().isdigit():
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]  # the error, not its trace
        raise KennelError(f"cannot count the CUDA devices: {last}")
    return int(child.stdout)


def _nvml_device_count() -> int | None:
    """The machine's NVIDIA devices by NVML (it leaves CUDA uninitialised); None if it fails."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()  # fails without the NVML library or a driver
    except pynvml.NVMLError:
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def slot_directory() -> Path:
    """The directory of slot files: one per user and machine, or per SLURM allocation.

    Machine-wide rather than per workflow run, because two runs on one machine share its GPUs.
    Inside a SLURM allocation device numbers may be the allocation's own (0..n-1 under
    cgroups), so each allocation gets its own directory.
    """
    explicit = os.environ.get(SLOT_DIR_ENV)
    if explicit:
        return Path(explicit)
    name = f"kennel-gpu-slots-{os.getuid()}"
    if os.environ.get("SLURM_JOB_ID"):
        name += f"-job{os.environ['SLURM_JOB_ID']}"
    return Path(tempfile.gettempdir()) / name


def _try_slot(path: Path, device: str) -> GpuSlot | None:
    handle = open(path, "a+")  # noqa: SIM115 - kept open: the open file holds the lock
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")  # who holds it, for the waiting message
    handle.flush()
    return GpuSlot(device, path, handle)


def _holders(directory: Path, devices: list[str]) -> str:
    held = []
    for device in devices:
        try:
            pid = (directory / f"gpu{device}.lock").read_text().strip()
        except OSError:
            pid = "?"
        held.append(f"GPU {device}: pid {pid or '?'}")
    return ", ".join(held)


def acquire_slot(devices: list[str], directory: Path, timeout: float | None = None) -> GpuSlot:
    """Lock the first free device of ``devices``; wait for one (at most ``timeout`` s)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KennelError(f"{directory}: cannot create the GPU slot directory ({error})") from None
    deadline = None if timeout is None else time.monotonic() + timeout
    waiting = False
    while True:
        for device in devices:
            slot = _try_slot(directory / f"gpu{device}.lock", device)
            if slot is not None:
                if waiting:
                    logger.info("GPU %s is free now", device)
                return slot
        if deadline is not None and time.monotonic() >= deadline:
            raise KennelError(
                f"all {len(devices)} GPUs are taken ({_holders(directory, devices)}) and none "
                f"freed within {timeout:g} s; run at most {len(devices)} GPU jobs at once "
                f"(snakemake --resources gpu={len(devices)})"
            )
        if not waiting:
            logger.warning(
                "all %d GPUs are taken (%s); waiting for one to free",
                len(devices),
                _holders(directory, devices),
            )
            waiting = True
        time.sleep(POLL_SECONDS)


def bind_gpu(timeout: float | None = None) -> str | None:
    """Give this process one GPU of its own unless someone already chose, and log the choice.

    - ``CUDA_VISIBLE_DEVICES`` names one device (or none): the scheduler or the user chose; kept.
    - It names several (a multi-GPU allocation running local jobs): one of those is locked.
    - It is unset: with more than one device on the machine, one of them is locked.

    Returns the ``CUDA_VISIBLE_DEVICES`` now in force (``None``: unset). Call it before anything
    initialises CUDA; the reservation lasts until the process ends.
    """
    global _held
    preset = os.environ.get("CUDA_VISIBLE_DEVICES")
    if preset is not None:
        devices = [device.strip() for device in preset.split(",") if device.strip()]
        if len(devices) <= 1:
            logger.info("CUDA_VISIBLE_DEVICES=%s (set before kennel started)", preset)
            return preset
    else:
        count = device_count()
        if count <= 1:
            logger.info("CUDA_VISIBLE_DEVICES unset; %d CUDA device(s), nothing to bind", count)
            return None
        devices = [str(index) for index in range(count)]
    directory = slot_directory()
    _held = acquire_slot(devices, directory, timeout)
    os.environ["CUDA_VISIBLE_DEVICES"] = _held.device
    logger.info(
        "CUDA_VISIBLE_DEVICES=%s (one of %d devices, reserved by %s)",
        _held.device,
        len(devices),
        _held.path,
    )
    return _held.device
