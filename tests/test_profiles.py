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
        assert resources[rule]["slurm_partition"] == "gpu"
        assert resources[rule]["gpu"] == "1"
        assert resources[rule]["cpus_per_task"] == "16"
        assert resources[rule]["mem_mb"] == str(256_000 // 4)
        assert resources[rule]["runtime"] == "240"
    for rule in ("shard", "extract", "merge_bam", "summarize", "slice_vcf", "merge_scores"):
        assert resources[rule]["slurm_partition"] == "cpu", rule
        assert "gpu" not in resources[rule] and "cpus_per_task" not in resources[rule], rule
    assert {settings["slurm_account"] for settings in resources.values()} == {"my_account"}
