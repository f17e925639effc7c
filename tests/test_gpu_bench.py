"""The prepared GPU benchmark still runs: its CPU smoke mode, end to end, in a subprocess.

Nothing else runs ``bench/gpu_bench.py`` before a lent GPU machine does, and a lease is short:
a benchmark broken by a change elsewhere in kennel would spend it on a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_benchmark_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    command = [
        sys.executable, str(ROOT / "bench" / "gpu_bench.py"), "--device", "cpu",
        "--reads", "150", "--threads", "1", "--repeats", "1", "--snp-variants", "60",
        "--borzoi-seq-len", "0", "--out", str(out), "--work", str(tmp_path / "work"),
    ]  # fmt: skip
    environment = {**os.environ, "OUT": str(out)}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "gpu_bench.json").read_text())
    # every part measured, none failed (a failed part or run is written down, exit status 1)
    for part in ("trna_forward", "trna_runs", "snp"):
        assert part in report and "error" not in report[part], report.get(part)
    runs = report["trna_runs"]
    for name in ("decoupled_eager", "decoupled_compiled", "fused_eager"):
        assert "error" not in runs[name], runs[name]
        assert runs[name]["reads_per_s"] > 0
    assert runs["fused_eager"]["includes_extraction"] is True
    assert report["trna_forward"]["compiled_chunks_per_s"] > 0
    assert report["trna_forward"]["eager_cudnn_benchmark_chunks_per_s"] > 0
    assert float(report["snp"]["float16 Pearson r (logSUM)"]) > 0.99
    text = (out / "gpu_bench.md").read_text()
    for row in (
        "| compiled / eager |",
        "cudnn.benchmark on",
        "| decoupled_eager |",
        "| fused_eager |",
        "float32 SNPs/s",
    ):
        assert row in text, text
