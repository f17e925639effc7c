"""`snakemake --profile slurm`, typed in the repository root, finds profiles/slurm and plans a
quarter node per GPU job and the CPU partition for the rest (a dry run: no SLURM needed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def planned_resources(plan: str) -> dict[str, dict[str, str]]:
    """rule -> its `resources:` line from a dry run, as a mapping (one job per rule suffices)."""
    resources = {}
    for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", plan, flags=re.M | re.S):
        found = re.search(r"^\s+resources: (.*)$", body, flags=re.M)
        if found:
            resources[rule] = dict(item.split("=", 1) for item in found.group(1).split(", "))
    return resources


def test_profile_slurm_resolves_and_packs_four_gpu_jobs_per_node(workflow_copy):
    link = REPO / "slurm"
    assert link.is_symlink() and os.readlink(link) == "profiles/slurm"
    copied = workflow_copy / "slurm"  # the fixture recreates links, as a clone does
    assert copied.is_symlink() and copied.resolve() == (workflow_copy / "profiles/slurm").resolve()
    environment = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "--dry-run"],
        cwd=workflow_copy,
        env=environment,
        capture_output=True,
        text=True,
    )
    plan = result.stdout + result.stderr
    assert result.returncode == 0, plan[-3000:]
    assert "Using profiles slurm and workflow specific profile" in plan
    resources = planned_resources(plan)
    for rule in ("classify", "score_snps"):
        assert resources[rule]["slurm_partition"] == "EDIT_gpu_partition"
        assert resources[rule]["gpu"] == "1"
        assert resources[rule]["cpus_per_task"] == "16"
        assert resources[rule]["mem_mb"] == str(256_000 // 4)
        assert resources[rule]["runtime"] == "240"
    for rule in ("shard", "extract", "merge_bam", "summarize", "slice_vcf", "merge_scores"):
        assert resources[rule]["slurm_partition"] == "EDIT_cpu_partition", rule
        assert "gpu" not in resources[rule] and "cpus_per_task" not in resources[rule], rule
    assert {settings["slurm_account"] for settings in resources.values()} == {"EDIT_account"}
    # a dry run with the placeholders warns once, naming them, and still plans
    warnings = [line for line in plan.splitlines() if "EDIT_ placeholders" in line]
    assert len(warnings) == 1 and "slurm_account (default-resources)" in warnings[0], plan[-3000:]


def test_profile_placeholders_stop_a_real_run_before_any_job_is_submitted(workflow_copy, tmp_path):
    """With the profile as shipped, `snakemake --profile slurm` must not reach sbatch: a fake
    sbatch (and squeue/sinfo) on PATH records any call."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "squeue", "sacct", "sinfo", "scontrol", "srun"):
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\necho "Submitted batch job 1"\n')
        fake.chmod(0o755)
    environment = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}
    environment["PATH"] = f"{bin_dir}{os.pathsep}{environment['PATH']}"
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm"],
        cwd=workflow_copy,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("profiles/slurm")]
    assert len(lines) == 1, result.stdout[-2000:] + result.stderr[-2000:]
    for name in ("slurm_partition (default-resources)", "slurm_account (default-resources)",
                 "slurm_partition (set-resources classify)"):  # fmt: skip
        assert name in lines[0]
    assert not calls.exists() or "sbatch" not in calls.read_text()
    assert not (workflow_copy / "results").exists()
