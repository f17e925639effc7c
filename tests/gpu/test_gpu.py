"""On a CUDA device only (skipped elsewhere; `bash bench/gpu/run.sh` runs them): compiled
classify with CUDA graphs, pinned side-stream copies (classify's batches and the SNP scorer's
windows), the out-of-memory path under a capped memory fraction, a device thread that first
imports CUDA graph trees, a job bound to one device,
and Flashzoi's attention on torch's fused kernels against flash_attn's module."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import h5py
import numpy as np
import pysam
import pytest
import torch
from kennel.cuda_graphs import ready_cuda_graphs_thread
from kennel.sim.snp import simulate_snp
from kennel.snp.scoring import ScoreOptions, score_snps
from kennel.trna.classify import ClassifySettings, classify_shard

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _classify(sharded, features, bundle, out, **settings):
    out.mkdir(parents=True, exist_ok=True)
    return classify_shard(
        sharded.bams[1], bundle, out / "c.bam", out / "c.tsv", out / "c.json",
        ClassifySettings(**settings), features=features[1],
    ), out / "c.bam"  # fmt: skip


def _calls(path):
    with pysam.AlignmentFile(str(path)) as bam:
        return {
            (r.query_name, r.flag): (r.get_tag("aa"), r.get_tag("ac"))
            for r in bam.fetch(until_eof=True)
            if r.has_tag("aa")
        }


def test_compiled_with_cuda_graphs_agrees_with_the_cpu(sharded, features, bundle, tmp_path):
    cpu, cpu_bam = _classify(sharded, features, bundle, tmp_path / "cpu", device="cpu")
    gpu, gpu_bam = _classify(
        sharded, features, bundle, tmp_path / "gpu", device="cuda", compile="on", batch_size=256
    )
    assert gpu["device"].startswith("cuda") and gpu["compiled"] and gpu["compilations"] >= 1
    _assert_same_calls(_calls(gpu_bam), _calls(cpu_bam))


def _assert_same_calls(ours, theirs):
    """The same records tagged; classes equal but for a near tie or two (TF32 convolutions and
    other kernels round differently), confidences within the uint8 tags' rounding."""
    assert ours.keys() == theirs.keys()
    differ = sum(ours[key][0] != theirs[key][0] for key in ours)
    assert differ <= max(1, len(ours) // 1000)
    same = [key for key in ours if ours[key][0] == theirs[key][0]]
    assert all(abs(ours[key][1] - theirs[key][1]) <= 1 for key in same)


def test_pinned_side_stream_copies_are_timed_and_the_gpu_duty_sampled(
    sharded, features, bundle, tmp_path
):
    stats, _ = _classify(sharded, features, bundle, tmp_path, device="cuda", batch_size=128)
    events = stats["cuda_event_s"]
    assert events and all(events[name] > 0 for name in ("copy_in", "compute", "copy_back"))
    # computing spans do not overlap, so they sum to less than the run's wall time
    assert events["compute"] < stats["wall_s"]
    assert 0 <= stats["gpu_busy_fraction_nvml"] <= 1


def test_snp_windows_go_up_on_the_side_stream_and_score_as_on_the_cpu(tmp_path):
    sim = simulate_snp(tmp_path / "sim", n_variants=120, seq_len=2048)
    scores = {}
    for device in ("cpu", "cuda"):
        options = ScoreOptions(device=device, batch_size=8, rc=True, shifts=(-1, 0, 1))
        out = tmp_path / f"{device}.h5"
        report = score_snps(sim["variants"], sim["genome"], sim["model"], sim["targets"], out,
                            options)  # fmt: skip
        with h5py.File(out) as handle:
            scores[device] = handle["SUM"][:].astype(np.float64)
    assert report.copy_in_seconds is not None and report.copy_in_seconds > 0
    # the forwards timed on the GPU (CUDA events), not their launches: inside the wall time
    assert 0 < report.forward_seconds < report.wall_seconds
    # the same windows: only the device's float arithmetic (TF32 convolutions) may differ
    assert np.allclose(scores["cuda"], scores["cpu"], rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("compile_mode", ["off", "on"])
def test_out_of_memory_halves_under_a_capped_memory_fraction(
    sharded, features, bundle, tmp_path, compile_mode
):
    reference, reference_bam = _classify(
        sharded, features, bundle, tmp_path / "r", device="cuda", batch_size=256
    )
    # what earlier tests hold (compiled graphs and their CUDA-graph pools) would count
    # against the cap
    ready_cuda_graphs_thread()  # the reset reaches CUDA graph state this thread may lack
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, (768 << 20) / total))
    # a batch a few times what fits (~2 kB of input and ~25 kB of activations a row per layer):
    # a halving or two, each a new shape (compiled: a compilation), not six of them
    batch = 1 << 15
    try:
        # compiled, the halving records a new CUDA graph after the failed one
        stats, bam = _classify(
            sharded, features, bundle, tmp_path / "small", device="cuda", batch_size=batch,
            compile=compile_mode,
        )  # fmt: skip
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert stats["out_of_memory_halvings"] >= 1 and stats["rows_per_forward"] < batch
    _assert_same_calls(_calls(bam), _calls(reference_bam))


_DEVICE_THREADS = """
import gc, sys, threading, torch
from kennel.feed import BatchRunner, compile_for

device = torch.device(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).to(device).eval()
forward = compile_for(model, device, has_python_hooks=False)
outputs = []


def device_thread():
    runner = BatchRunner(8, job="t", device=device, cuda_graphs=device.type == "cuda")
    with torch.inference_mode():
        x = torch.ones(8, 16, device=device)
        runner.warm_up(forward, [x])
        outputs.append(float(runner(forward, [x]).sum()))


first = "torch._inductor.cudagraph_trees" not in sys.modules
thread = threading.Thread(target=device_thread)  # one a job, as in classify
thread.start()
thread.join()
gc.collect()
junk = [{"n": [n] * 3} for n in range(200_000)]  # reuse what a double release freed
del junk
print("first import on a device thread:", first, "outputs:", len(set(outputs)), len(outputs))
"""


def test_a_device_thread_that_first_imports_cuda_graph_trees_ends_cleanly():
    """A classify job's path, in a fresh process: compiled on the main thread, called first on
    its device thread, which imports torch's CUDA graph trees; the thread and then the process
    end normally (torch < 2.13 freed such a thread's objects twice: kennel.cuda_graphs takes the
    reference its store does not)."""
    done = subprocess.run(
        [sys.executable, "-c", _DEVICE_THREADS, "cuda"], capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    print(done.stdout)  # whether this torch imported the graph trees first on a device thread
    assert done.stdout.rstrip().endswith("outputs: 1 1"), done.stdout


def test_a_job_is_bound_to_one_device(tmp_path):
    """With several GPUs a job locks one and sees only it; with one (the lent machine) there is
    nothing to choose and the job sees that one."""
    code = (
        "from kennel.gpu_slots import bind_gpu; import os, torch; d = bind_gpu(); "
        "print(d, os.environ.get('CUDA_VISIBLE_DEVICES'), torch.cuda.device_count())"
    )
    env = {**os.environ, "KENNEL_GPU_SLOT_DIR": str(tmp_path)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    device, visible, count = result.stdout.split()
    if torch.cuda.device_count() == 1:
        assert (device, visible, count) == ("None", "None", "1")
    else:
        assert device == visible and count == "1"


def test_flashzoi_attention_on_the_gpu_eager_and_compiled_in_bfloat16():
    """Where borzoi-pytorch runs Flashzoi (CUDA, bfloat16 autocast, flash_attn's kernel),
    kennel's attention runs on torch's flash kernel (forced: it raises where that kernel cannot
    take these shapes) and compiled with CUDA graphs as the scorer compiles it: float32 within
    rounding of flash_attn's module, bfloat16 within bfloat16's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tests.snp.snp_helpers import flashzoi_attention_reference

    module, x, expected = flashzoi_attention_reference()
    module, x = module.cuda(), x.cuda()
    with torch.no_grad():
        exact = module(x).cpu().numpy()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                flash = module(x).float().cpu().numpy()
            compiled = torch.compile(module, mode="reduce-overhead", dynamic=False)
            for _ in range(3):  # the first call runs eagerly, the second records the graph
                torch.compiler.cudagraph_mark_step_begin()
                graphed = compiled(x).float().cpu().numpy()
    np.testing.assert_allclose(exact, expected, rtol=0, atol=1e-4)
    for half in (flash, graphed):
        np.testing.assert_allclose(half, expected, rtol=0, atol=0.25)
        assert np.corrcoef(half.ravel(), expected.ravel())[0, 1] > 0.9999
