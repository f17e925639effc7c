"""The Snakemake layer from a fresh clone: plans, lints, and fails fast on bad config."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, write_run_directory


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


def _first_words(result) -> str:
    """The first line of the run's stderr that is not Snakemake's note of the profile it uses
    (printed before the workflow is read, so nothing of the workflow's can precede it)."""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("Using ")]
    return lines[0] if lines else ""


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
    # the message leads, with no Snakemake error header or traceback around it
    assert _first_words(result).startswith(message), result.stderr
    assert "Traceback" not in result.stderr and "WorkflowError" not in result.stderr


def test_nested_config_overrides_from_the_command_line(workflow_copy):
    """`--config` hands nested values over as strings: a number that converts is taken..."""
    planned = snakemake(
        workflow_copy, "-n", "-p", "--cores", "2", "--config",
        'trna={"classify": {"min_confidence": 100, "raw_tags": true}}',
    ).stdout  # fmt: skip
    assert "--min-confidence 100" in planned and "--raw-tags" in planned
    # ... and what does not convert is refused with the same one line as from a config file
    bad = snakemake(
        workflow_copy, "-n", "--config", 'trna={"classify": {"min_confidence": high}}',
        check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    expected = "config: trna.classify.min_confidence: 'high' is not of type 'integer'"
    assert _first_words(bad) == expected and _error_lines(bad) == [expected], bad.stderr


def test_missing_sample_input_is_named(workflow_copy):
    sheet = workflow_copy / "config/samples.tsv"
    sheet.write_text(sheet.read_text().replace("resources/demo/trna/demo_a.bam", "data/a.bam"))
    result = snakemake(workflow_copy, "-n", check=False)
    assert result.returncode != 0
    expected = "config/samples.tsv: sample demo_a: file not found: data/a.bam"
    assert _error_lines(result) == [expected]


def test_a_run_directory_of_more_pod5_files_than_one_command_line_holds(
    workflow_copy, trna_sim, sharded
):
    """A sequencing run leaves tens of thousands of POD5 files below its pod5_pass/; their
    paths together pass ARG_MAX (2 MiB here), so the shard job must be handed the directory,
    not the files. The run's reads, spread over three files among ~26,000 empty ones, shard
    as the single file they came from does."""
    import pod5

    run = write_run_directory(trna_sim["s1.pod5"], workflow_copy / "run")
    with pod5.Writer(workflow_copy / "empty.pod5"):
        pass
    folder = run / "barcode02"  # files that hold no reads, as a flowcell's tail can
    folder.mkdir()
    # enough for their paths to pass ARG_MAX (a quarter of the stack limit: 2 MiB by default)
    name = f"{folder}/PAQ00000_pass_barcode02_000000.pod5"
    for index in range(os.sysconf("SC_ARG_MAX") // len(name) * 3 // 2):
        os.link(workflow_copy / "empty.pod5", folder / f"PAQ00000_pass_barcode02_{index:06d}.pod5")
    (workflow_copy / "big.tsv").write_text(
        f"id\tarm\tpod5\tbam\ns1\ttrna\t{run}\t{trna_sim['s1.bam']}\n"
    )
    config = ["samples=big.tsv", f"trna={{reference: {trna_sim['reference']}, shards: 3}}"]
    target = "results/trna/s1/shard_counts.tsv"
    # the job is told how many files the plan took as its input, and checks the directory
    plan = snakemake(workflow_copy, "-n", "-p", target, "--config", *config).stdout
    assert f"--pod5-files {3 + len(os.listdir(folder))} " in plan
    snakemake(workflow_copy, "--cores", "1", target, "--config", *config)
    shards = workflow_copy / "results/trna/s1"
    assert (shards / "shard_counts.tsv").read_text() == sharded.counts.read_text()
    for index, expected in enumerate(sharded.pod5s):
        assert _read_ids(shards / f"shards/{index:03d}.pod5") == _read_ids(expected)


def test_the_shard_job_asks_for_memory_in_proportion_to_the_sample(workflow_copy, trna_sim):
    """The shard job holds ~318 bytes per read of the sample (bench/bench_shard.py, two shards),
    and real POD5s hold ~4.4 kB a read (../shared/leech's reads; the simulator's likewise). A
    30M-read sample (a sparse 132 GB POD5 here) must get what it needs, a small one the floor."""

    def asked(pod5_bytes, shards=2):
        pod5 = workflow_copy / f"run{pod5_bytes}.pod5"
        with open(pod5, "wb") as handle:
            handle.truncate(pod5_bytes)
        sheet = f"id\tarm\tpod5\tbam\ns1\ttrna\t{pod5}\t{trna_sim['s1.bam']}\n"
        (workflow_copy / "big.tsv").write_text(sheet)
        trna = f"trna={{reference: {trna_sim['reference']}, shards: {shards}}}"
        target = "results/trna/s1/shard_counts.tsv"
        plan = snakemake(workflow_copy, "-n", target, "--config", "samples=big.tsv", trna).stdout
        shard = plan[plan.index("rule shard:") :]
        return int(re.search(r"mem_mb=(\d+)", shard).group(1))

    reads = 30_000_000
    needed_mb = 1000 + 318 * reads / 1e6  # the fixed part (imports, libraries) under 1 GB
    assert asked(round(4400 * reads)) >= needed_mb
    # one shard writes every read through one POD5 writer, which holds ~600 bytes a read
    assert asked(round(4400 * reads), shards=1) >= 1000 + (318 + 300) * reads / 1e6
    assert asked(10_000_000) == 4000


def _read_ids(path):
    import pod5

    with pod5.Reader(path) as reader:
        return sorted(str(read.read_id) for read in reader.reads())


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


# every setting a user can change, each away from its default, so none can pass by default
CHANGED = {
    "trna": {
        "features": {
            "upstream": 10,
            "downstream": 14,
            "chunk_length": 384,
            "justify": "start",
            "motif": "CCAGGCTTCA",
            "motif_anchor": 3,
            "refine": "always",
            "dwell_weight": 0.25,
            "dwell_target": 4.0,
        },
        "extract": {"threads": 3},
        "shard": {"threads": 4},
        "classify": {
            "threads": 5,
            "batch_size": 256,
            "device": "cpu",
            "compile": "off",
            "compile_threshold": 7,
            "inductor_cache": "a cache dir",
            "in_flight": 2,
            "min_confidence": 10,
            "min_margin": 20,
            "raw_tags": True,
        },
    },
    "snp": {
        "score": {
            "seq_len": 4096,
            "rc": False,
            "shifts": [-1, 0, 1],
            "cluster_pct": 0.2,
            "stats": ["SUM", "logD2"],
            "untransform": False,
            "unscale": True,
            "untransform_old": True,
            "indel_stitch": True,
            "alts": "first",
            "ref_mismatch": "flip",
            "per_model": True,
            "batch_size": 4,
            "mix_dtype": "bfloat16",
            "compile": "on",
            "compile_threshold": 9,
            "device": "cpu",
            "inductor_cache": "another cache",
            "threads": 6,
        },
    },
}


TAG_SETTINGS = ("min_confidence", "min_margin", "raw_tags")


def _planned_commands(workflow_copy, override):
    """Each `kennel <verb>` command line of a dry run, parsed by kennel's own parser."""
    from kennel.cli import build_parser

    (workflow_copy / "override.yaml").write_text(yaml.safe_dump(override))
    result = snakemake(workflow_copy, "-n", "-p", "--cores", "64", "--configfile", "override.yaml")
    parser = build_parser()
    commands = {}
    for line in result.stdout.splitlines():
        line = line.removeprefix("Shell command: ")  # how snakemake 9 prints -p
        if line.startswith("kennel "):
            words = shlex.split(line)
            args = parser.parse_args(words[1 : words.index(">")])
            commands.setdefault(args.verb, []).append(vars(args))
    return commands


def _assert_reaches(section, parsed, where):
    for key, value in section.items():
        got = parsed[key]
        got = list(got) if isinstance(got, tuple) else got
        assert got == value or (value is None and got == ""), f"{where}.{key}: {got!r}"


def test_the_changed_settings_cover_every_setting_a_command_reads():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    for arm, sections in CHANGED.items():
        for name, changed in sections.items():
            keys = schema["properties"][arm]["properties"][name]["properties"].keys()
            assert changed.keys() == keys - {"mem_mb"}, f"{arm}.{name}"  # mem_mb: a resource


@pytest.mark.parametrize("fused", [False, True])
def test_every_config_setting_reaches_the_command_that_uses_it(workflow_copy, fused):
    override = copy.deepcopy(CHANGED)
    override["trna"]["fused"] = fused
    commands = _planned_commands(workflow_copy, override)
    trna, score = override["trna"], override["snp"]["score"]
    verbs = ("extract", "classify", "tag", "score-snps", "slice-vcf")
    assert all(commands.get(verb) for verb in verbs)
    for parsed in commands["shard"]:
        _assert_reaches(trna["shard"], parsed, "trna.shard")
    for parsed in commands["extract"] + (commands["classify"] if fused else []):
        _assert_reaches(trna["features"], parsed, "trna.features")
    for parsed in commands["extract"]:
        _assert_reaches(trna["extract"], parsed, "trna.extract")
    tagging = {key: trna["classify"].pop(key) for key in TAG_SETTINGS}
    for parsed in commands["classify"]:
        _assert_reaches(trna["classify"], parsed, "trna.classify")
        assert (parsed["features"] is None) == fused
    for parsed in commands["tag"]:  # the thresholds decide the tags, not the model's outputs
        _assert_reaches(tagging, parsed, "trna.classify")
    for parsed in commands["score-snps"]:
        _assert_reaches(score, parsed, "snp.score")
    for parsed in commands["slice-vcf"]:
        clustering = {key: score[key] for key in ("seq_len", "cluster_pct")}
        _assert_reaches(clustering, parsed, "snp.score")


def test_several_models_in_the_sheet_are_replicates_of_one_scoring_job(workflow_copy):
    """A comma-separated model cell reaches slice-vcf and every score-snps job as one list."""
    sheet = workflow_copy / "config/samples.tsv"
    replicate = workflow_copy / "models/replicate2.pt"
    replicate.parent.mkdir()
    replicate.write_bytes(b"")  # a dry run only needs it to exist
    sheet.write_text(
        sheet.read_text().replace(
            "resources/demo/snp/model.pt", "resources/demo/snp/model.pt,models/replicate2.pt"
        )
    )
    commands = _planned_commands(workflow_copy, {})
    expected = [Path("resources/demo/snp/model.pt"), Path("models/replicate2.pt")]
    assert commands["score-snps"] and commands["slice-vcf"]
    for parsed in commands["score-snps"] + commands["slice-vcf"]:
        assert parsed["model"] == expected


def test_conda_env_installs_this_checkout_from_where_conda_runs_pip(
    workflow_copy, tmp_path_factory
):
    """`snakemake --sdm conda`: Snakemake copies envs/kennel.yaml into .snakemake/conda/ and
    conda runs pip on its pip section from there, so kennel's own line must find the checkout
    from that directory (a path relative to envs/ did not). conda is imitated (fake_conda.py):
    no conda channel is reachable here or in CI. The checkout's path holds a space."""
    tmp_path = tmp_path_factory.mktemp("conda")
    checkout = tmp_path / "a checkout"
    shutil.copytree(workflow_copy, checkout, symlinks=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "conda"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {REPO / "tests" / "fake_conda.py"} "$@"\n')
    fake.chmod(0o755)
    report = tmp_path / "pip-report.json"
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_CONDA_ROOT": str(tmp_path / "conda"),
        "FAKE_CONDA_REPORT": str(report),
    }
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--sdm", "conda", "--conda-create-envs-only",
         "--cores", "1"],
        cwd=checkout, env=environment, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    installs = json.loads(report.read_text())["install"]
    assert [item["metadata"]["name"] for item in installs] == ["kennel"]
    source = installs[0]["download_info"]
    assert source["url"] == checkout.resolve().as_uri()
    assert source["dir_info"] == {"editable": True}
