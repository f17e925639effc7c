"""The thread budget reaches what it sizes: torch's intra-op threads in the forward, the
extraction pool's workers and their rayon setting, and the BAM writer's BGZF threads, in every
kind of job (score-snps: tests/snp/test_score_snps_cli.py); the split is logged at job start."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import sys

import pytest
import torch
from kennel.cli import main
from kennel.models.trna_classifier import TrnaTcn
from kennel.trna.threads import plan_job, plan_threads


@pytest.fixture
def seen(monkeypatch):
    """torch's thread count inside every classifier forward, and each process pool's size and
    worker setup, as the job really ran them."""
    record = {"torch": set(), "pools": []}
    forward = TrnaTcn.forward

    def recording(self, *args):
        record["torch"].add(torch.get_num_threads())
        return forward(self, *args)

    class Pool(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, max_workers=None, *args, initargs=(), **kwargs):
            record["pools"].append({"workers": max_workers, "rayon": initargs[0]})
            super().__init__(max_workers, *args, initargs=initargs, **kwargs)

    monkeypatch.setattr(TrnaTcn, "forward", recording)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    yield record
    torch.set_num_threads(threads)


def _classify_arguments(sharded, bundle, out, threads):
    return [
        "classify",
        "--bam", str(sharded.bams[1]),
        "--bundle", str(bundle),
        "--output", str(out / "c.bam"),
        "--predictions", str(out / "c.tsv"),
        "--stats", str(out / "c.json"),
        "--device", "cpu",
        "--threads", str(threads),
    ]  # fmt: skip


def test_decoupled_classify(sharded, features, bundle, tmp_path, seen, caplog):
    arguments = [*_classify_arguments(sharded, bundle, tmp_path, 4), "--features", str(features[1])]
    with caplog.at_level(logging.INFO, logger="kennel.trna.threads"):
        assert main(arguments) == 0
    # on the CPU the forward is the job: torch gets all 4 CPUs, BGZF the feed's one
    assert seen["torch"] == {4} and seen["pools"] == []
    stats = json.loads((tmp_path / "c.json").read_text())
    assert stats["settings"]["bam_threads"] == 1
    assert "classify: 4 CPUs: 0 extraction workers x 0 rayon, 4 torch, 1 BGZF" in caplog.text


def test_classify_on_a_gpu_keeps_the_feed_reservation():
    plan = plan_job("classify", 4)
    assert (plan.torch_threads, plan.bam_threads, plan.extraction_workers) == (3, 1, 0)
    assert plan_job("classify", 16).torch_threads == 12
    assert plan_job("classify", 16, on_cpu=True).torch_threads == 16


def test_fused_classify(trna_sim, sharded, bundle, tmp_path, seen, caplog):
    arguments = [
        *_classify_arguments(sharded, bundle, tmp_path, 4),
        "--pod5", str(sharded.pod5s[1]),
        "--reference", str(trna_sim["reference"]),
        "--kmer-table", str(trna_sim["kmer_table"]),
    ]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="kennel.trna.threads"):
        assert main(arguments) == 0
    # 4 CPUs: 1 kept for the feed (and BAM compression), 3 extraction workers; the forward on
    # the CPU is most of the job, so torch shares all 4 with them (on a GPU it keeps 1)
    assert seen["pools"] == [{"workers": 3, "rayon": 1}]
    assert seen["torch"] == {4}
    assert json.loads((tmp_path / "c.json").read_text())["settings"]["bam_threads"] == 1
    assert "classify-fused: 4 CPUs: 3 extraction workers x 1 rayon, 4 torch, 1 BGZF" in caplog.text
    on_a_gpu = plan_job("classify-fused", 4)  # torch only launches kernels there
    assert (on_a_gpu.extraction_workers, on_a_gpu.torch_threads, on_a_gpu.bam_threads) == (3, 1, 1)


def test_extract(trna_sim, sharded, tmp_path, seen, caplog):
    arguments = [
        "extract",
        "--bam", str(sharded.bams[1]),
        "--pod5", str(sharded.pod5s[1]),
        "--reference", str(trna_sim["reference"]),
        "--kmer-table", str(trna_sim["kmer_table"]),
        "--output", str(tmp_path / "f.h5"),
        "--threads", "2",
    ]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="kennel.trna.threads"):
        assert main(arguments) == 0
    # 2 workers: this process and a pool of one
    assert seen["pools"] == [{"workers": 1, "rayon": 1}]
    assert torch.get_num_threads() == 1  # extraction does not run torch: nothing to oversubscribe
    assert "extract: 2 CPUs: 2 extraction workers x 1 rayon" in caplog.text


@pytest.mark.parametrize("fused", [False, True])
def test_ordered_map_keeps_order_and_works_here_only_in_extract_jobs(fused):
    from kennel.trna.threads import ordered_map

    from tests.trna import ordered_tasks

    plan = plan_threads(4 if fused else 2, fused=fused)
    assert plan.extraction_workers == (3 if fused else 2)
    results = list(
        ordered_map(((i,) for i in range(60)), ordered_tasks.pid_of, plan, ordered_tasks.setup, ())
    )
    assert [index for index, _ in results] == list(range(60))
    here = {pid for _, pid in results} & {os.getpid()}
    # an extract job's own process takes tasks while its one worker is busy; a fused job's
    # process feeds the device and only hands tasks out
    assert bool(here) != fused
    assert len({pid for _, pid in results} - {os.getpid()}) >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_pool_pipes_have_room_for_a_whole_result(monkeypatch):
    """The pool's task and result pipes are widened before the first task, where the kernel
    allows it, and results larger than the pipe still arrive whole and in order."""
    import fcntl

    from kennel.trna import threads
    from kennel.trna.threads import PIPE_BYTES, ordered_map

    from tests.trna import ordered_tasks

    sizes = []

    class Pool(concurrent.futures.ProcessPoolExecutor):
        def submit(self, *args, **kwargs):
            if not sizes:
                sizes.extend(
                    fcntl.fcntl(queue._reader.fileno(), fcntl.F_GETPIPE_SZ)
                    for queue in (self._call_queue, self._result_queue)
                )
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(threads.concurrent.futures, "ProcessPoolExecutor", Pool)
    with open("/proc/sys/fs/pipe-max-size") as limit:
        allowed = int(limit.read()) >= PIPE_BYTES
    plan = plan_threads(3, fused=False)  # this process and two workers
    results = list(
        ordered_map(
            ((i,) for i in range(12)), ordered_tasks.payload_of, plan, ordered_tasks.setup, ()
        )
    )
    assert [index for index, _ in results] == list(range(12))
    assert all(payload == bytes([index]) * 1_500_000 for index, payload in results)
    assert len(sizes) == 2
    if allowed:  # Linux's default limit; a kernel set lower keeps its pipes, only slower
        assert sizes == [PIPE_BYTES] * 2


@pytest.mark.parametrize("producer_pause", [0.0, 0.2])
def test_a_worker_process_that_dies_ends_the_job_in_one_line(producer_pause):
    """A worker killed mid-task (out of memory, a crash in native code) leaves no exception to
    pass on: the pool breaks, and the job must stop with one line, not a traceback. The break
    shows either in a task's result or, when the producer is slow to hand over the next task
    (the pause after the fatal one), in the submission of that task: both end in one line."""
    import time

    from kennel.errors import KennelError
    from kennel.trna.threads import ordered_map

    from tests.trna import ordered_tasks

    def tasks():
        for i in range(20):
            if i > 5:
                time.sleep(producer_pause)  # the pool has seen its worker die by now
            yield i, os.getpid()

    plan = plan_threads(4, fused=True)  # every task goes to the pool's processes
    with pytest.raises(KennelError, match="extraction worker process died"):
        list(ordered_map(tasks(), ordered_tasks.dies_in_a_worker, plan, ordered_tasks.setup, ()))
