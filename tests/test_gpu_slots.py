"""One GPU per local job: processes started together lock distinct devices (a fake device count
stands in for the GPUs), one more waits until a device frees, and a scheduler's choice is kept."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest
from kennel import gpu_slots
from kennel.errors import KennelError
from kennel.gpu_slots import FAKE_COUNT_ENV, SLOT_DIR_ENV, acquire_slot, bind_gpu

# A GPU job in miniature: bind, say which device, hold it until stdin says go.
HOLDER = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from kennel.gpu_slots import bind_gpu
print(bind_gpu(), flush=True)
sys.stdin.readline()
"""


def job_environment(slot_dir, devices=4):
    environment = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environment.update({FAKE_COUNT_ENV: str(devices), SLOT_DIR_ENV: str(slot_dir)})
    return environment


def start_holder(environment):
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        env=environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def device_of(process, timeout):
    """The device the process printed, or None if it printed nothing within ``timeout`` s."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline().strip() if ready else None


@pytest.fixture
def holders():
    started = []
    yield started
    for process in started:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            stream.close()


def test_jobs_started_together_get_distinct_devices_and_a_fifth_waits(tmp_path, holders):
    environment = job_environment(tmp_path / "slots")
    holders += [start_holder(environment) for _ in range(4)]
    devices = [device_of(process, timeout=60) for process in holders]
    assert sorted(devices) == ["0", "1", "2", "3"]

    fifth = start_holder(environment)
    holders.append(fifth)
    assert device_of(fifth, timeout=3) is None, "a fifth job got a device while four were held"

    freed = holders[2]
    freed.stdin.write("go\n")
    freed.stdin.flush()
    assert freed.wait(timeout=30) == 0
    assert device_of(fifth, timeout=30) == devices[2]
    fifth.stdin.write("go\n")
    fifth.stdin.flush()
    assert fifth.wait(timeout=30) == 0
    log = fifth.stderr.read()
    assert "all 4 GPUs are taken" in log and f"GPU {devices[2]} is free now" in log
    assert f"CUDA_VISIBLE_DEVICES={devices[2]} " in log


def test_a_killed_job_frees_its_device(tmp_path, holders):
    environment = job_environment(tmp_path / "slots", devices=2)
    holders += [start_holder(environment) for _ in range(2)]
    devices = [device_of(process, timeout=60) for process in holders]
    holders[0].send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the lock
    holders[0].wait()
    holders.append(start_holder(environment))
    assert device_of(holders[-1], timeout=60) == devices[0]


def test_waiting_gives_up_after_the_timeout_with_one_clear_line(tmp_path):
    held = [acquire_slot(["0", "1"], tmp_path) for _ in range(2)]
    assert sorted(slot.device for slot in held) == ["0", "1"]
    with pytest.raises(KennelError, match=r"all 2 GPUs are taken .*--resources gpu=2"):
        acquire_slot(["0", "1"], tmp_path, timeout=0.3)
    held[1].release()
    assert acquire_slot(["0", "1"], tmp_path, timeout=0.3).device == held[1].device


@pytest.mark.parametrize("chosen", ["3", "", "GPU-8a1c2e"])
def test_a_device_chosen_before_kennel_is_kept(tmp_path, monkeypatch, chosen):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", chosen)
    monkeypatch.setenv(FAKE_COUNT_ENV, "4")
    monkeypatch.setenv(SLOT_DIR_ENV, str(tmp_path / "slots"))
    assert bind_gpu() == chosen
    assert os.environ["CUDA_VISIBLE_DEVICES"] == chosen
    assert not (tmp_path / "slots").exists()


def test_one_device_or_none_needs_no_binding(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(SLOT_DIR_ENV, str(tmp_path / "slots"))
    for count in ("0", "1"):
        monkeypatch.setenv(FAKE_COUNT_ENV, count)
        assert bind_gpu() is None
        assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert not (tmp_path / "slots").exists()


def test_a_multi_gpu_allocation_is_divided_among_its_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setenv(SLOT_DIR_ENV, str(tmp_path))
    try:
        assert bind_gpu() == "4"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "4"
        assert acquire_slot(["4", "6"], tmp_path, timeout=0).device == "6"
    finally:
        gpu_slots._held.release()


def test_a_fake_count_that_is_not_a_number_is_refused(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(FAKE_COUNT_ENV, "four")
    with pytest.raises(KennelError, match="KENNEL_FAKE_GPU_COUNT='four'"):
        bind_gpu()


class FakeNvml:
    """pynvml's calls device_count makes: a machine of ``count`` devices, or no NVML library."""

    def __init__(self, count: int | None) -> None:
        self.count = count
        self.shutdowns = 0

    def install(self, monkeypatch) -> None:
        import pynvml

        def init():
            if self.count is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

        def shutdown():
            self.shutdowns += 1

        monkeypatch.setattr(pynvml, "nvmlInit", init)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: self.count)
        monkeypatch.setattr(pynvml, "nvmlShutdown", shutdown)


@pytest.fixture
def cuda_torch(monkeypatch):
    """torch as a CUDA build on a machine where counting through CUDA here is a failure: after
    CUDA starts in a process, CUDA_VISIBLE_DEVICES set later is never read."""
    import torch

    monkeypatch.delenv(FAKE_COUNT_ENV, raising=False)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)

    def initialises_cuda(*arguments):
        raise AssertionError("counted through CUDA in this process")

    monkeypatch.setattr(torch.cuda, "device_count", initialises_cuda)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", initialises_cuda, raising=False)


def test_nvml_counts_the_devices_and_cuda_stays_uninitialised(monkeypatch, cuda_torch):
    nvml = FakeNvml(3)
    nvml.install(monkeypatch)
    monkeypatch.setattr(gpu_slots.subprocess, "run", pytest.fail)  # no child either
    assert gpu_slots.device_count() == 3
    assert nvml.shutdowns == 1


def test_without_nvml_a_child_process_counts_the_devices(monkeypatch, cuda_torch, caplog):
    FakeNvml(None).install(monkeypatch)
    children = []
    run = subprocess.run

    def spy(command, **options):
        children.append(command)
        return run(command, **options)  # this CPU torch's child counts 0

    monkeypatch.setattr(gpu_slots.subprocess, "run", spy)
    assert gpu_slots.device_count() == 0
    assert len(children) == 1 and "torch.cuda.device_count()" in children[0][-1]
    assert "NVML cannot count the GPUs" in caplog.text


def test_a_child_that_cannot_count_is_one_line(monkeypatch, cuda_torch):
    FakeNvml(None).install(monkeypatch)
    failed = subprocess.CompletedProcess([], 1, "", "Traceback ...\nRuntimeError: no driver\n")
    monkeypatch.setattr(gpu_slots.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(KennelError, match=r"cannot count the CUDA devices: .*no driver$"):
        gpu_slots.device_count()


def test_a_cpu_build_of_torch_has_no_devices(monkeypatch):
    import torch

    monkeypatch.delenv(FAKE_COUNT_ENV, raising=False)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    monkeypatch.setattr(gpu_slots, "_nvml_device_count", pytest.fail)
    assert gpu_slots.device_count() == 0


@pytest.mark.parametrize(
    "verb, arguments",
    [
        ("classify", ["--bam", "in.bam", "--bundle", "b.pt", "--features", "f.h5",
                      "--output", "o.bam", "--predictions", "p.tsv", "--stats", "s.json"]),
        ("score-snps", ["--vcf", "in.vcf", "--genome", "g.fa", "--model", "m.pt",
                        "--out", "o.h5"]),
    ],
)  # fmt: skip
def test_gpu_commands_bind_before_anything_else_and_log_the_device(tmp_path, verb, arguments):
    environment = job_environment(tmp_path / "slots", devices=2)
    command = [sys.executable, "-m", "kennel.cli", verb, *arguments]
    bound = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert bound.returncode == 2  # the inputs do not exist; the device was bound first
    assert "CUDA_VISIBLE_DEVICES=0 (one of 2 devices" in bound.stderr
    on_cpu = subprocess.run(
        [*command, "--device", "cpu"], cwd=tmp_path, env=environment, capture_output=True, text=True
    )
    assert on_cpu.returncode == 2 and "CUDA_VISIBLE_DEVICES" not in on_cpu.stderr
