"""The demo end to end through Snakemake, as a user runs it: calls match the simulator's truth,
config changes rerun only what they affect, identity across shard count / fused / batch size,
and a run killed mid-classify resumes to the same outputs."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pysam
import pytest
import yaml

from tests.conftest import require_tool

pytestmark = pytest.mark.integration


def snakemake(cwd, *arguments, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if check and result.returncode != 0:
        logs = "".join(
            f"\n--- {p}\n{p.read_text()[-2000:]}" for p in sorted((cwd / "logs").rglob("*.log"))
        )
        raise AssertionError(
            f"snakemake failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}{logs}"
        )
    return result


def _write_config(directory, **trna):
    config = yaml.safe_load((directory / "config/config.yaml").read_text())
    config["demo"]["trna_reads"] = 500
    for key, value in trna.items():
        if isinstance(value, dict):
            config["trna"].setdefault(key, {}).update(value)
        else:
            config["trna"][key] = value
    (directory / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def _records(path):
    with pysam.AlignmentFile(str(path)) as bam:
        return [record.to_string() for record in bam.fetch(until_eof=True)]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, request):
    """One complete demo run in a fresh copy of the workflow."""
    directory = tmp_path_factory.mktemp("demo")
    copy = request.getfixturevalue("workflow_copy_module")
    shutil.copytree(copy, directory, dirs_exist_ok=True)
    _write_config(directory)
    snakemake(directory)
    return directory


@pytest.fixture(scope="module")
def workflow_copy_module(tmp_path_factory):
    from tests.conftest import REPO

    target = tmp_path_factory.mktemp("clone")
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(target)], check=True)
    # the working tree, not only what is committed (tests run before a commit too)
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for relative in listed:
        if (REPO / relative).is_file():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / relative, target / relative)
    return target


def test_calls_match_the_simulated_truth(demo_run):
    for sample in ("demo_a", "demo_b"):
        with open(demo_run / f"resources/demo/trna/{sample}.truth.tsv") as handle:
            truth = {row["read_id"]: row for row in csv.DictReader(handle, delimiter="\t")}
        merged = demo_run / f"results/trna/{sample}/{sample}.classified.bam"
        calls = {}
        n_records = 0
        with pysam.AlignmentFile(str(merged)) as bam:
            for record in bam.fetch(until_eof=True):
                n_records += 1
                if record.has_tag("aa"):
                    calls[record.query_name] = record.get_tag("aa")
        original = demo_run / f"resources/demo/trna/{sample}.bam"
        assert n_records == len(_records(original))
        correct = sum(truth[read_id]["label"] == label for read_id, label in calls.items())
        assert len(calls) > 400
        assert correct / len(calls) >= 0.95, f"{sample}: {correct}/{len(calls)}"


def test_report_outputs_and_logs_exist(demo_run):
    for plot in ("class_composition", "fates", "confidence", "charging"):
        assert (demo_run / f"results/trna/plots/{plot}.png").read_bytes()[:4] == b"\x89PNG"
    counts = (demo_run / "results/trna/demo_a/summary/counts.tsv").read_text()
    assert "passthrough\tunmapped" in counts and "classified" in counts
    for rule in ("shard", "extract", "classify", "tag", "merge_bam", "summarize"):
        assert list((demo_run / "logs" / rule).glob("*.log")), rule
        assert list((demo_run / "benchmarks" / rule).glob("*.tsv")), rule


def test_samtools_accepts_the_merged_bams(demo_run):
    samtools = require_tool("samtools")
    for sample in ("demo_a", "demo_b"):
        merged = demo_run / f"results/trna/{sample}/{sample}.classified.bam"
        subprocess.run([samtools, "quickcheck", str(merged)], check=True)
        count = subprocess.run([samtools, "view", "-c", str(merged)], capture_output=True,
                               text=True, check=True)  # fmt: skip
        original = demo_run / f"resources/demo/trna/{sample}.bam"
        assert int(count.stdout) == len(_records(original))


@pytest.mark.parametrize("form", ["configfile", "config"])
def test_threshold_change_reruns_only_tagging_onwards(demo_run, tmp_path, form):
    """The everyday rerun, in both ways a user types it: a config file of overrides, or a
    nested `--config` value (which Snakemake hands over as strings). Thresholds decide the
    tags, not the model's outputs: the GPU jobs (classify) are not rerun."""
    override = {"trna": {"classify": {"min_confidence": 200}}}
    if form == "configfile":
        (tmp_path / "thresholds.yaml").write_text(yaml.safe_dump(override))
        arguments = ["--configfile", str(tmp_path / "thresholds.yaml")]
    else:
        arguments = ["--config", 'trna={"classify": {"min_confidence": 200}}']
    plan = snakemake(demo_run, "-n", *arguments).stdout
    planned = set(re.findall(r"^(?:local)?rule (\w+):$", plan, flags=re.M))
    assert planned == {"tag", "merge_bam", "summarize", "trna_report", "all"}, plan[-3000:]


def test_speed_settings_rerun_nothing(demo_run):
    """Batch size, device, compilation and queue depth change how fast a GPU job runs, never
    its output (the batch-size tests here and in tests/snp compare outputs), so changing them
    after a run must not recompute finished shards and slices; a threshold beside them does."""
    speed = {"batch_size": 7, "device": "cpu", "compile": "off", "compile_threshold": 5}
    speed_settings = {
        "trna": {"classify": {**speed, "in_flight": 1, "inductor_cache": "cache"}},
        "snp": {"score": {**speed, "inductor_cache": "cache"}},
    }
    arguments = [f"{arm}={json.dumps(value)}" for arm, value in speed_settings.items()]
    plan = snakemake(demo_run, "-n", "--config", *arguments)
    assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-3000:]
    speed_settings["trna"]["classify"]["min_margin"] = 9
    arguments = [f"{arm}={json.dumps(value)}" for arm, value in speed_settings.items()]
    plan = snakemake(demo_run, "-n", "-p", "--config", *arguments).stdout
    planned = set(re.findall(r"^(?:local)?rule (\w+):$", plan, flags=re.M))
    assert planned == {"tag", "merge_bam", "summarize", "trna_report", "all"}, plan[-3000:]
    # a classify job that does run (here forced) runs with the new speed settings
    plan = snakemake(demo_run, "-n", "-p", "--forcerun", "classify", "--config", *arguments)
    plan = plan.stdout
    assert "--batch-size 7 --device cpu --compile off --compile-threshold 5" in plan
    assert "--inductor-cache cache --in-flight 1" in plan


def test_fewer_snp_slices_rerun_the_slicing(demo_run):
    """Slice 000 of a 2-slice run holds half the variants: with one slice, merging the old
    000 alone would drop the rest, so the slicing and the scoring must run again."""
    plan = snakemake(demo_run, "-n", "--config", 'snp={"slices": 1}').stdout
    planned = set(re.findall(r"^(?:local)?rule (\w+):$", plan, flags=re.M))
    assert {"slice_vcf", "score_snps", "merge_scores"} <= planned, plan[-3000:]
    assert not planned & {"shard", "extract", "classify"}, plan[-3000:]


def test_report_html_from_the_demo(demo_run, tmp_path):
    """`snakemake --report report.html` after the demo, as the README says."""
    report = tmp_path / "report.html"
    snakemake(demo_run, "--report", str(report))
    html = report.read_text()
    assert report.stat().st_size > 50_000
    for plot in ("class_composition.png", "fates.png", "confidence.png", "charging.png"):
        assert plot in html, plot


def test_shards_fused_and_batch_size_do_not_change_the_merged_bams(demo_run, tmp_path):
    reference = {
        s: _records(demo_run / f"results/trna/{s}/{s}.classified.bam") for s in ("demo_a", "demo_b")
    }
    variant = tmp_path / "variant"
    shutil.copytree(demo_run, variant, ignore=shutil.ignore_patterns("results", ".snakemake"))
    _write_config(variant, shards=3, fused=True, classify={"batch_size": 64})
    snakemake(variant)
    for sample, records in reference.items():
        assert _records(variant / f"results/trna/{sample}/{sample}.classified.bam") == records


def _final_outputs(directory):
    """What a user keeps: merged BAM records and every dataset of the merged scores."""
    import h5py

    outputs = {
        s: _records(directory / f"results/trna/{s}/{s}.classified.bam")
        for s in ("demo_a", "demo_b")
    }
    with h5py.File(directory / "results/snp/demo_snp/scores.h5") as scores:
        for name, dataset in scores.items():
            if isinstance(dataset, h5py.Dataset):
                outputs[f"scores/{name}"] = dataset[()].tobytes()
    return outputs


KILLED_RULES = ("extract", "classify", "score_snps", "merge_bam")


@pytest.mark.parametrize("rule", KILLED_RULES)
def test_kill_minus_9_mid_rule_then_rerun_gives_identical_outputs(demo_run, rule):
    before = _final_outputs(demo_run)
    for log in (demo_run / "logs" / rule).glob("*.log"):
        log.unlink()
    # --forcerun reruns the rule's jobs and everything downstream of them
    process = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--forcerun", rule],
        cwd=demo_run,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    started = False
    try:
        deadline = time.time() + 300
        while time.time() < deadline and process.poll() is None:
            if any((demo_run / "logs" / rule).glob("*.log")):  # the job has started
                started = True
                time.sleep(1.0)
                break
            time.sleep(0.1)
        # without these, the kill below could land before or after the rule, not mid-rule
        assert started, f"{rule} never started (snakemake exit code {process.poll()})"
        assert process.poll() is None, f"snakemake ended before {rule} could be killed"
    finally:  # the kill itself, and cleanup when an assertion above fails
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    # what a user does after a kill -9: release Snakemake's lock, then run again; the workflow
    # profile sets rerun-incomplete, so the killed jobs' outputs are rebuilt
    snakemake(demo_run, "--unlock")
    snakemake(demo_run)
    assert _final_outputs(demo_run) == before
    assert not list((demo_run / "results").rglob(".tmp-*"))
    assert not list((demo_run / "results").rglob("*.partial"))
