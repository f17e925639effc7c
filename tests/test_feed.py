"""The GPU-feed helpers both arms use: device choice, compile policy, fixed-shape batches."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from kennel import cuda_graphs, feed, gpu
from kennel.errors import KennelError


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert feed.resolve_device("auto") == torch.device("cpu")
    assert feed.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(KennelError, match="device: 'cuda' was requested but torch") as raised:
        feed.resolve_device("cuda")
    assert "\n" not in str(raised.value)
    with pytest.raises(KennelError, match="device: 'tpu' is not one of auto, cuda, cpu"):
        feed.resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert feed.resolve_device("auto") == torch.device("cuda")
    assert feed.resolve_device("cuda") == torch.device("cuda")


@pytest.mark.parametrize(
    ("mode", "items", "cache", "expected"),
    [
        ("on", 1, None, True),
        ("off", 10**9, "/cache", False),
        ("auto", 1500, None, False),
        ("auto", 1501, None, True),
        ("auto", 10, "/cache", True),
        ("auto", 10, "", False),
    ],
)
def test_should_compile(mode, items, cache, expected):
    assert feed.should_compile(mode, items, 1500, cache) is expected


def test_should_compile_rejects_unknown_modes():
    with pytest.raises(KennelError, match="compile: 'sometimes' is not one of auto, on, off"):
        feed.should_compile("sometimes", 1, 1, None)


# What a job does: point inductor at the shared cache, compile, run. In a process of its own,
# because configure_inductor_cache sets process-wide state (an environment variable and
# inductor's config) for the rest of the job, which must not leak into this test session: in
# the session it once broke a later test's compilation (test_classify's compiled run).
_JOB = """
import sys, torch
from torch._dynamo.utils import counters
from kennel import feed
feed.configure_inductor_cache(sys.argv[1] if len(sys.argv) > 1 else None)
torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
compiled = feed.compile_for(module, torch.device("cpu"), has_python_hooks=False)
with torch.inference_mode():
    compiled(torch.ones(2, 8))
print(counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"])
"""


def _job(*arguments, env=None):
    result = subprocess.run(
        [sys.executable, "-c", _JOB, *map(str, arguments)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    hits, misses = map(int, result.stdout.split())
    return hits, misses


@pytest.mark.slow
def test_configure_inductor_cache_lets_a_second_job_reuse_the_first_ones_kernels(tmp_path):
    cache = tmp_path / "shared" / "cache"
    assert _job(cache) == (0, 1)  # the first job compiles and fills the cache
    assert (cache / "fxgraph").is_dir()
    assert _job(cache) == (1, 0)  # the next job finds its graph there
    # without the setting, jobs use the session's own cache (conftest), never the shared one
    before = sorted(cache.rglob("*"))
    _job()
    assert sorted(cache.rglob("*")) == before


def test_the_session_compiles_into_its_own_fresh_caches():
    from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir

    from tests.conftest import SESSION_CACHES

    assert Path(cache_dir()).is_relative_to(SESSION_CACHES)
    assert Path(triton_cache_dir(0)).is_relative_to(SESSION_CACHES)


@pytest.mark.parametrize(
    ("device", "hooks", "mode"),
    [("cuda", False, "reduce-overhead"), ("cuda", True, None), ("cpu", False, None)],
)
def test_compile_for_picks_the_mode(monkeypatch, device, hooks, mode):
    seen = {}

    def fake_compile(module, **kwargs):
        seen.update(kwargs, module=module)
        return "compiled"

    monkeypatch.setattr(torch, "compile", fake_compile)
    module = torch.nn.Linear(2, 2)
    assert feed.compile_for(module, torch.device(device), hooks) == "compiled"
    assert seen == {"module": module, "backend": "inductor", "mode": mode, "dynamic": False}


def test_has_forward_hooks():
    module = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert not feed.has_forward_hooks(module)
    module[0].register_forward_hook(lambda *args: None)
    assert feed.has_forward_hooks(module)


def test_compile_count_counts_compiled_frames():
    module = torch.nn.Linear(3, 2)
    compiled = torch.compile(module, backend="eager", dynamic=False)
    before = feed.compile_count()
    for _ in range(3):
        compiled(torch.ones(4, 3))
    assert feed.compile_count() - before == 1
    compiled(torch.ones(5, 3))  # a new shape is a new compilation
    assert feed.compile_count() - before == 2


def test_pad_rows():
    batch = torch.arange(6, dtype=torch.float16).reshape(3, 2)
    padded = feed.pad_rows(batch, 5)
    assert padded.shape == (5, 2) and padded.dtype == torch.float16
    assert torch.equal(padded[:3], batch) and not padded[3:].any()
    assert feed.pad_rows(batch, 3) is batch
    with pytest.raises(ValueError, match="batch of 3 rows does not fit a fixed size of 2"):
        feed.pad_rows(batch, 2)


@pytest.mark.parametrize(
    ("rows", "parts"),
    [(1024, 8), (1000, 8), (128, 1), (100, 1), (256, 2), (1009, 1), (96, 1), (384, 3)],
)
def test_cpu_parts_are_equal_divisors_of_the_batch(rows, parts):
    assert feed.cpu_parts(rows, 128) == parts
    assert rows % parts == 0 and (parts == 1 or rows // parts <= 128)


def test_batch_runner_pieces_equal_one_forward_and_keep_one_shape():
    """Cutting a batch into pieces (the CPU's, or after an out-of-memory halving) must not
    change any row: compared with one plain call; padded pieces all have the fixed shape."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.ReLU())
    shapes = []

    def forward(x, y):
        shapes.append(x.shape[0])
        return module(x).sum(dim=-1) + y, None

    x, y = torch.randn(10, 2, 16), torch.randn(10, 4)
    with torch.inference_mode():
        whole, none = forward(x, y)
        shapes.clear()
        runner = feed.BatchRunner(4, job="test", device=torch.device("cpu"))
        pieces = runner(forward, [x, y], n_real=9)  # 4 + 4 + 1 real rows, the last padded
    assert none is None and pieces[1] is None
    assert shapes == [4, 4, 4]
    torch.testing.assert_close(pieces[0], whole[:9], rtol=0, atol=1e-6)
    unpadded = feed.BatchRunner(4, job="test", device=torch.device("cpu"), pad=False)
    shapes.clear()
    with torch.inference_mode():
        alone = unpadded(lambda x: module(x), [x])  # a plain tensor output
    assert shapes == [] and alone.shape == (10, 4, 16)
    torch.testing.assert_close(alone, module(x), rtol=0, atol=1e-6)


_HEAP_PROBE = """
import ctypes, sys, threading
import numpy as np, torch
from kennel.feed import BatchRunner

class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2, all size_t
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
BLOCK = 48 << 20  # over the 32 MiB up to which glibc's own threshold ever rises

def probe():
    # (bytes mapped for the block while it lives, free heap bytes once it is freed)
    mapped = libc.mallinfo2().hblkhd
    block = np.ones(BLOCK, np.uint8)
    mapped = libc.mallinfo2().hblkhd - mapped
    del block
    return mapped, libc.mallinfo2().fordblks

def on_a_thread():
    result = []
    thread = threading.Thread(target=lambda: result.append(probe()))
    thread.start(); thread.join()
    return result[0]

before = probe()
if sys.argv[1] == "cpu":
    BatchRunner(8, "probe", torch.device("cpu"))
print(*before, *probe(), *on_a_thread())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
@pytest.mark.parametrize("device", ["cpu", "none"])
def test_cpu_forwards_keep_freed_memory_in_the_heap(device):
    # a fresh process each: the setting is process-wide; "none" makes no runner, glibc's defaults
    probe = subprocess.run(
        [sys.executable, "-c", _HEAP_PROBE, device], capture_output=True, text=True, check=True
    )
    block = 48 << 20
    mapped_before, _, mapped_main, free_main, mapped_thread, free_thread = (
        int(x) for x in probe.stdout.split()
    )
    assert mapped_before >= block  # glibc's default: a block this large is its own mapping
    if device == "cpu":
        # from the heap (the main thread's, and the arena a device thread gets), and kept there
        # once freed, for the next forward
        assert mapped_main == 0 and free_main >= block
        assert mapped_thread == 0 and free_thread >= block
    else:
        assert mapped_main >= block and mapped_thread >= block


def test_batch_runner_halves_on_out_of_memory_and_keeps_the_size():
    calls = []

    def forward(x):
        calls.append(x.shape[0])
        if x.shape[0] > 3:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return x * 2

    runner = feed.BatchRunner(8, job="job 7", device=torch.device("cpu"))
    x = torch.arange(8.0)
    assert torch.equal(runner(forward, [x]), x * 2)
    assert runner.rows == 2 and runner.halvings == 2
    calls.clear()
    assert torch.equal(runner(forward, [x]), x * 2)
    assert calls == [2, 2, 2, 2]  # no new attempt at the larger size
    stuck = feed.BatchRunner(2, job="job 7", device=torch.device("cpu"))
    with pytest.raises(KennelError, match=r"job 7: out of cpu memory even one row at a time"):
        stuck(lambda x: (_ for _ in ()).throw(torch.OutOfMemoryError("oom")), [x])


def _compile_failed(inner: Exception) -> Exception:
    from torch._dynamo.exc import BackendCompilerFailed

    return BackendCompilerFailed(lambda *_: None, inner, None)


def test_an_error_wrapping_no_out_of_memory_is_not_one():
    from torch._dynamo.exc import BackendCompilerFailed

    assert not feed.is_out_of_memory(_compile_failed(ValueError("a kernel did not compile")))
    assert issubclass(BackendCompilerFailed, RuntimeError)  # what the runner's except catches


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        # cuBLAS and cuDNN report a failed workspace allocation as a plain RuntimeError
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        # cuDNN 9 names a failed device allocation anew (cudnn_graph.h, since 9.0.0)
        RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
        # the CUDA runtime's own (torch's AcceleratorError), e.g. instantiating a CUDA graph
        # (before torch 2.8, which has no AcceleratorError, a RuntimeError saying the same)
        getattr(torch, "AcceleratorError", RuntimeError)("CUDA error: out of memory\n..."),
        # torch.compile's own error for one in the compilation it ran (raised from None)
        _compile_failed(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 MiB")),
    ],
)
def test_batch_runner_halves_on_every_form_of_out_of_memory(error):
    def forward(x):
        if x.shape[0] > 2:
            raise error
        return x + 1

    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cpu"))
    x = torch.arange(8.0)
    assert torch.equal(runner(forward, [x]), x + 1)
    assert runner.rows == 2 and runner.halvings == 2


@pytest.mark.parametrize("freed_by_emptying", [True, False])
def test_a_cuda_library_out_of_memory_empties_the_cache_before_halving(
    monkeypatch, freed_by_emptying
):
    """cuBLAS's own allocations miss memory that torch's cache holds as freed blocks: emptying
    the cache may be enough, and costs no new shape; only when it is not does the batch halve."""
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))

    def forward(x):
        if x.shape[0] > 2 and not (freed_by_emptying and emptied):
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`")
        return x + 1

    # the batches stay on the CPU: only the runner's policy reads the device
    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cuda"))
    x = torch.arange(8.0)
    assert torch.equal(runner(forward, [x]), x + 1)
    assert len(emptied) == 1  # once a batch, not once per attempt
    assert (runner.rows, runner.halvings) == ((8, 0) if freed_by_emptying else (2, 2))
    cpu = feed.BatchRunner(8, job="job 3", device=torch.device("cpu"))
    emptied.clear()
    assert torch.equal(cpu(forward, [x]), x + 1)
    assert emptied == [] and cpu.halvings == 2  # no CUDA cache to empty


@pytest.mark.parametrize("cuda_graphs", [True, False])
def test_a_cuda_graph_out_of_memory_empties_the_cache_before_halving(monkeypatch, cuda_graphs):
    """An out-of-memory while a CUDA graph is recorded comes without torch's own emptying of
    its cache: emptied once, the same size is tried again; outside CUDA graphs torch has
    already emptied it, so the batch halves straight away."""
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    calls = []

    def forward(x):
        calls.append(x.shape[0])
        if len(calls) == 2 and not emptied:  # the shape's second call: CUDA graphs record it
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x + 1

    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cuda"), cuda_graphs=cuda_graphs)
    x = torch.arange(8.0)
    for _ in range(2):
        assert torch.equal(runner(forward, [x]), x + 1)
    if cuda_graphs:
        assert emptied == [True] and (runner.rows, runner.halvings) == (8, 0)
        assert calls == [8, 8, 8]
    else:
        assert emptied == [] and (runner.rows, runner.halvings) == (4, 1)


@pytest.mark.parametrize("library", [True, False])
def test_a_cuda_graph_shape_that_never_ran_halves_rather_than_retry(monkeypatch, library):
    """CUDA graph trees count a shape's first call as its warm-up before running it, so after
    an out-of-memory there the same shape would next be recorded with kernels never run: the
    batch halves (a new shape warms up afresh), with the cache emptied once for it."""
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    error = (
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`")
        if library
        else torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    )
    calls = []

    def forward(x):
        calls.append(x.shape[0])
        if len(calls) == 1:
            raise error
        return x + 1

    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cuda"), cuda_graphs=True)
    x = torch.arange(8.0)
    assert torch.equal(runner(forward, [x]), x + 1)
    assert emptied == [True] and (runner.rows, runner.halvings) == (4, 1)
    assert calls == [8, 4, 4]  # never the failed shape again


def test_a_shape_run_by_one_model_is_new_to_the_next(monkeypatch):
    """One runner serves the SNP arm's replicate models, each its own CUDA graphs: a size that
    model 0 has run is still a first call for model 1."""
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    calls = []

    def second(x):
        calls.append(x.shape[0])
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x - 1

    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cuda"), cuda_graphs=True)
    x = torch.arange(8.0)
    runner.warm_up(lambda x: x + 1, [x], model=0)
    assert torch.equal(runner(second, [x], model=1), x - 1)
    assert calls == [8, 4, 4] and runner.halvings == 1


def test_an_out_of_memory_while_compiling_retries_the_same_size(monkeypatch):
    """torch.compile's error for a shortage in its compilation: no CUDA graph was made yet,
    so the same size may be tried again with the cache emptied."""
    from torch._dynamo.exc import BackendCompilerFailed

    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))

    def forward(x):
        if not emptied:
            inner = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 MiB")
            raise BackendCompilerFailed(lambda *_: None, inner, None)
        return x + 1

    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cuda"), cuda_graphs=True)
    x = torch.arange(8.0)
    assert torch.equal(runner(forward, [x]), x + 1)
    assert emptied == [True] and (runner.rows, runner.halvings) == (8, 0)


def test_the_gpu_busy_fraction_covers_a_run_shorter_than_one_sample(monkeypatch):
    """NVML is asked on a thread every interval; a run that ends first still gets a fraction,
    from one reading at its end (NVML's last sample period); without NVML there is none."""
    readings = iter([0.7, 0.2, 0.4])
    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: 100 * next(readings))
    monitor = gpu.GpuMonitor(torch.device("cuda"), interval=60.0)  # construction reads once: 0.7
    with monitor:
        monitor.restart()
    assert monitor.fraction == pytest.approx(0.2)

    def no_nvml(device=None):
        raise ModuleNotFoundError("pynvml does not seem to be installed")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    with gpu.GpuMonitor(torch.device("cuda"), interval=0.01) as without:
        pass
    assert without.fraction is None


def test_a_gpu_busy_fraction_nvml_stopped_giving_is_none_not_a_partial_mean(monkeypatch, caplog):
    readings = iter([0.5, 0.9, 0.9])

    def failing(device=None):
        value = next(readings, None)
        if value is None:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return 100 * value

    monkeypatch.setattr(torch.cuda, "utilization", failing)
    with gpu.GpuMonitor(torch.device("cuda"), interval=0.001) as monitor:
        deadline = time.monotonic() + 10
        while not monitor.failed and time.monotonic() < deadline:
            time.sleep(0.001)
    assert monitor.samples == [0.9, 0.9] and monitor.fraction is None
    assert "NVML sampling failed after 2 samples (NVML_ERROR_GPU_IS_LOST)" in caplog.text

    # nor from the one reading at the end of a run shorter than one sample
    readings = iter([0.5])
    with gpu.GpuMonitor(torch.device("cuda"), interval=60.0) as short:
        pass
    assert short.fraction is None
    assert "no NVML GPU busy fraction at the run's end (NVML_ERROR_GPU_IS_LOST)" in caplog.text


@pytest.mark.parametrize(("cuda_graphs", "calls"), [(False, 1), (True, 2)])
def test_the_warm_up_runs_a_cuda_graph_forward_twice(cuda_graphs, calls):
    """CUDA graph trees run a new graph's first call eagerly and record it on the second: both
    belong to the warm-up (both arms warm up through the runner), not to the first batch."""
    seen = []
    runner = feed.BatchRunner(4, job="j", device=torch.device("cpu"), cuda_graphs=cuda_graphs)
    runner.warm_up(lambda x: seen.append(x.shape[0]) or x, [torch.zeros(4)])
    assert seen == [4] * calls


def test_batch_runner_lets_other_runtime_errors_through():
    runner = feed.BatchRunner(8, job="job 3", device=torch.device("cpu"))

    def forward(x):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x3 and 4x2)")

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        runner(forward, [torch.zeros(8)])
    assert runner.rows == 8 and runner.halvings == 0


def test_a_batch_that_does_not_fit_on_the_device_ends_the_job_in_one_line():
    device = torch.device("cpu")
    with (
        pytest.raises(KennelError) as caught,
        feed.copying_to(device, "classify c.bam", "a batch of 4096 rows"),
    ):
        raise torch.OutOfMemoryError("CUDA out of memory")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("classify c.bam: out of cpu memory copying a batch of 4096 rows")
    with (
        pytest.raises(ValueError, match="not memory"),
        feed.copying_to(device, "c", "a batch of 1 rows"),
    ):
        raise ValueError("not memory")


def test_device_timer_sums_the_timed_sections_only():
    timer = gpu.DeviceTimer(torch.device("cpu"))
    for _ in range(2):
        with timer():
            time.sleep(0.05)
        time.sleep(0.25)  # outside: not counted
    assert 0.1 <= timer.seconds < 0.35  # counting the outside would make it at least 0.6
    before = timer.seconds
    with pytest.raises(ValueError), timer():
        raise ValueError("a failed section adds nothing")
    assert timer.seconds == before


def test_cuda_graph_state_is_seeded_on_a_thread_that_lacks_it():
    """torch before 2.13 asserted when a thread other than the importing one used CUDA graph
    trees (pytorch#123177): the device thread must hold that state before its first call."""
    from torch._inductor import cudagraph_trees

    seen = {}

    def on_a_new_thread():
        key = "tree_manager_containers"
        seen["before"] = hasattr(cudagraph_trees.local, key) or torch._C._is_key_in_tls(key)
        cuda_graphs.ready_cuda_graphs_thread()
        seen["after"] = torch._C._is_key_in_tls(key) and hasattr(cudagraph_trees.local, key)
        stashed = torch._C._get_obj_in_tls(key)
        seen["same"] = stashed is cudagraph_trees.local.tree_manager_containers
        cuda_graphs.ready_cuda_graphs_thread()  # a second call changes nothing
        seen["kept"] = torch._C._get_obj_in_tls(key) is stashed

    thread = threading.Thread(target=on_a_new_thread)
    thread.start()
    thread.join()
    assert seen == {"before": False, "after": True, "same": True, "kept": True}


_SEEDED_THREADS = """
import ctypes, gc, json, sys, threading
import torch
from kennel import cuda_graphs

store = torch._C._stash_obj_in_tls


def store_takes_a_reference():
    def probe():
        value = {}
        before = sys.getrefcount(value)
        store("kennel_probe", value)
        found.append(sys.getrefcount(value) > before)
        if not found[0]:  # the reference the store will release as the thread ends
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))

    found = []
    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return found[0]


def emulated_store(key, value):  # torch < 2.13's: it releases a reference it never took
    store(key, value)
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(value))


borrowing_store = emulated_store if store_takes_a_reference() else store


def references(stash, threads):
    torch._C._stash_obj_in_tls = stash
    seen, owners = [], []

    def seeded():
        cuda_graphs.ready_cuda_graphs_thread()
        from torch._inductor import cudagraph_trees

        local = cudagraph_trees.local
        local.baseline = {}  # held like the seeded dict: by this thread's local and one owner
        owners.append(local.baseline)
        counts = sys.getrefcount(local.tree_manager_containers), sys.getrefcount(local.baseline)
        seen.append(counts[0] - counts[1])

    for _ in range(threads):  # each thread releases its objects as it ends
        thread = threading.Thread(target=seeded)
        thread.start()
        thread.join()
    gc.collect()
    junk = [{"n": [n] * 3} for n in range(200_000)]  # reuse what a double release freed
    del junk
    return sorted(set(seen))


if sys.argv[1] == "first-import":  # the first thread's import of the graph trees seeds it
    assert "torch._inductor.cudagraph_trees" not in sys.modules
    print(json.dumps([references(borrowing_store, 1)]))
else:  # this thread imports them; the threads are seeded by kennel
    from torch._inductor import cudagraph_trees
    print(json.dumps([references(store, 50), references(borrowing_store, 50)]))
"""


def _seeded_threads(mode: str) -> list:
    """The store's references to each seeded thread's objects, less one, per store (in a
    child, so a double release cannot take pytest down)."""
    done = subprocess.run(
        [sys.executable, "-c", _SEEDED_THREADS, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_threads_seeded_for_cuda_graphs_end_cleanly_whatever_torchs_store():
    """Before torch 2.13 the thread-local store kept the seeded objects without a reference
    but released one when the thread ended, so device threads' objects were freed twice (torch
    2.11 crashed or hung in 6 runs of 6 with 20 threads). Emulated where torch's store takes its
    reference: with either store, the store must own a reference to the seeded objects, and
    the process must end normally."""
    real, borrowing = _seeded_threads("threads")
    assert real == borrowing == [0]


def test_a_device_thread_that_first_imports_cuda_graph_trees_ends_cleanly():
    """A classify job compiles on its main thread but calls the model first on its device
    thread, so cudagraph_trees may first be imported there: its import stashes that thread's
    objects in torch's store, which before 2.13 took no reference to them (emulated)."""
    assert _seeded_threads("first-import") == [[0]]


def test_a_batch_runner_with_cuda_graphs_seeds_the_thread_it_runs_on():
    from torch._inductor import cudagraph_trees  # imported here: that thread is seeded by it

    seen = {}

    def on_a_new_thread():
        key = "tree_manager_containers"
        seen["before"] = hasattr(cudagraph_trees.local, key) or torch._C._is_key_in_tls(key)
        runner = feed.BatchRunner(4, job="j", device=torch.device("cpu"), cuda_graphs=True)
        runner(lambda x: x * 2, [torch.ones(4)])
        seen["seeded"] = torch._C._is_key_in_tls("tree_manager_containers")

    thread = threading.Thread(target=on_a_new_thread)
    thread.start()
    thread.join()
    assert seen == {"before": False, "seeded": True}
