"""Config values never reach a shell unquoted: paths with spaces and metacharacters work."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.integration

NASTY = "res ources/de'mo; touch PWNED $(touch PWNED2) `touch PWNED3`"


def test_paths_with_spaces_and_shell_metacharacters(workflow_copy):
    config_path = workflow_copy / "config/config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["demo"].update(dir=NASTY, trna_reads=60, trna_samples=["demo_a"])
    config["trna"]["reference"] = f"{NASTY}/trna/reference.fa"
    config["trna"]["kmer_table"] = f"{NASTY}/trna/kmer_levels.tsv"
    config["trna"]["bundle"] = f"{NASTY}/trna/bundle.pt"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    sheet = workflow_copy / "config/samples.tsv"
    lines = [line for line in sheet.read_text().splitlines() if "demo_b" not in line]
    sheet.write_text("\n".join(lines).replace("resources/demo", NASTY) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2",
         "results/trna/demo_a/features/000.features.h5"],
        cwd=workflow_copy, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (workflow_copy / NASTY / "trna/demo_a.bam").is_file()
    assert (workflow_copy / "results/trna/demo_a/features/000.features.h5").is_file()
    assert not list(workflow_copy.rglob("PWNED*"))
