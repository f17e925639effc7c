"""The Snakemake layer from a fresh clone: plans, lints, and fails fast on bad config."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO


def snakemake(cwd, *arguments, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(arguments)} failed:\n{result.stderr[-3000:]}")
    return result


def test_dry_run_plans_the_demo_from_a_fresh_clone(workflow_copy):
    result = snakemake(workflow_copy, "-n", "--cores", "2")
    for rule in ("simulate_trna_demo", "simulate_snp_demo", "all"):
        # a job block and a job-stats row each, not the name anywhere (paths hold "all" too)
        assert re.search(rf"^(local)?rule {rule}:$", result.stdout, flags=re.M), rule
        assert re.search(rf"^{rule} +1$", result.stdout, flags=re.M), rule


def test_default_profile_holds_nothing_that_leaks_into_cluster_runs():
    profile = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    leaky = {"cores", "jobs", "resources", "default-resources", "set-resources", "executor"}
    assert leaky.isdisjoint(profile)


def _error_lines(result):
    output = result.stdout + result.stderr  # snakemake logs errors to stdout or stderr by version
    return [line for line in output.splitlines() if line.startswith(("config:", "config/"))]


@pytest.mark.parametrize(
    "override, message",
    [
        ({"trna": {"shards": 0}}, "config: trna.shards: 0 is less than the minimum of 1"),
        ({"trna": {"sharts": 2}}, "config: trna: Additional properties are not allowed"),
        ({"trna": {"reference": "/no/such/ref.fa"}}, "config: trna.reference: file not found"),
    ],
)
def test_bad_config_fails_fast_with_one_line(workflow_copy, override, message):
    override_file = workflow_copy / "override.yaml"
    override_file.write_text(yaml.safe_dump(override))
    result = snakemake(workflow_copy, "-n", "--configfile", "override.yaml", check=False)
    assert result.returncode != 0
    lines = _error_lines(result)
    assert len(lines) == 1 and lines[0].startswith(message), result.stdout + result.stderr


def test_missing_sample_input_is_named(workflow_copy):
    sheet = workflow_copy / "config/samples.tsv"
    sheet.write_text(sheet.read_text().replace("resources/demo/trna/demo_a.bam", "data/a.bam"))
    result = snakemake(workflow_copy, "-n", check=False)
    assert result.returncode != 0
    expected = "config/samples.tsv: sample demo_a: file not found: data/a.bam"
    assert _error_lines(result) == [expected]


@pytest.mark.slow
def test_lint_clean(workflow_copy):
    """ruff, snakefmt and `snakemake --lint` are part of the test command, so CI runs them."""
    ruff = shutil.which("ruff") or pytest.fail("ruff is a test dependency: pip install -e .[test]")
    snakefmt = shutil.which("snakefmt") or pytest.fail("snakefmt is a test dependency")
    for command in (
        [ruff, "check", "."],
        [ruff, "format", "--check", "."],
        [snakefmt, "--check", "Snakefile", "workflow/rules"],
    ):
        result = subprocess.run(command, cwd=workflow_copy, capture_output=True, text=True)
        assert result.returncode == 0, f"{command[1:]}:\n{result.stdout}{result.stderr}"
    result = snakemake(workflow_copy, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr
