"""A leech bundle through the whole workflow, as a lab switching from `leech predict` runs it:
`snakemake --cores 2` with `trna.bundle` at each fixture bundle and leech's fixture reads as the
sample. Every record `leech predict` wrote carries exactly leech's tags in kennel's merged BAM
(same read, flag and position); kennel's extra records (the ones leech drops) are there too,
untagged. Option sets are changed as a user changes them (config overrides), which reruns only
tagging onwards (not the GPU job); shard counts and fused extraction do not change the output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pysam
import pytest
import torch
import yaml
from kennel.trna.leech_tags import pairwise_call, pairwise_votes
from leech_reference import (
    LEECH_SHARED,
    PAIR_BUNDLE,
    TCN_BUNDLE,
    TCN_CHECKPOINT,
    assert_table_equals_leech,
    assert_tags_equal_leech,
    one_output_multiclass_bundle,
    one_vs_all_bundle,
    require_leech_shared,
)

from tests.conftest import REPO, SHARED_DATA, write_in_read_order, write_run_directory

pytestmark = pytest.mark.integration

KMER_TABLE = SHARED_DATA / "rna004_9mer_levels_v1.txt.gz"
LEECH_MADE = Path(__file__).parent / "leech_made"


def _snakemake(directory: Path, *arguments: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "leech.yaml",
         *arguments],
        cwd=directory, capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        logs = "".join(
            f"\n--- {p}\n{p.read_text()[-1500:]}"
            for p in sorted((directory / "logs").rglob("*.log"))
        )
        raise AssertionError(f"snakemake failed:\n{result.stderr[-3000:]}{logs}")
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def workflow(tmp_path_factory) -> Path:
    """The workflow (as a clone has it) with leech's fixture reads as its one sample."""
    require_leech_shared()
    directory = tmp_path_factory.mktemp("leech_workflow")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for relative in listed:
        source = REPO / relative
        if source.is_file() and not source.is_symlink():
            (directory / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, directory / relative)
    data = LEECH_SHARED / "data"
    (directory / "leech_samples.tsv").write_text(
        f"id\tarm\tpod5\tbam\nfx\ttrna\t{data / 'fx.pod5'}\t{data / 'fx.bam'}\n"
    )
    return directory


def _configure(directory: Path, bundle: Path, shards: int, fused: bool = False, **leech) -> None:
    config = {
        "samples": "leech_samples.tsv",
        "trna": {
            "reference": str(LEECH_SHARED / "data" / "reference.fa"),
            "kmer_table": str(KMER_TABLE),
            "bundle": str(bundle),
            "shards": shards,
            "fused": fused,
            "classify": {"batch_size": 100},  # several batches, a ragged last one
            "leech": leech,
        },
    }
    (directory / "leech.yaml").write_text(yaml.safe_dump(config))


def assert_equals_leech(directory: Path, expected: str | Path, raw: bool = False) -> None:
    """The workflow's merged BAM against `leech predict`'s ``expected``, record by record."""
    assert_tags_equal_leech(directory / "results/trna/fx/fx.classified.bam", expected, raw)


def _planned_rules(output: str) -> set[str]:
    return set(re.findall(r"^(?:local)?rule (\w+):$", output, flags=re.M))


def test_multiclass_bundle_and_every_option_set(workflow):
    _configure(workflow, TCN_BUNDLE, shards=1)
    _snakemake(workflow)
    assert_equals_leech(workflow, "fx.tcndwell.default.bam")
    # the bundle defines its inputs: kennel's feature spec goes unused and reruns nothing
    features = {"upstream": 10, "chunk_length": 384, "refine": "always", "dwell_weight": 0.5}
    plan = _snakemake(workflow, "-n", "--config", f"trna={json.dumps({'features': features})}")
    assert "Nothing to be done" in plan, plan[-3000:]
    # --aggregation decides a whole pairwise bundle's votes only: for this one it reruns nothing
    weighted = {"leech": {"aggregation": "weighted"}}
    plan = _snakemake(workflow, "-n", "--config", f"trna={json.dumps(weighted)}")
    assert "Nothing to be done" in plan and "aggregation weighted is ignored" in plan
    options = [
        (["--config", 'trna={"classify": {"min_confidence": 150, "min_margin": 60}}'],
         "fx.tcndwell.minconf150_minmargin60.bam", False),
        (["--config", 'trna={"classify": {"min_margin": 60}, '
                      '"leech": {"abstain_on_junction_indel": true}}'],
         "fx.tcndwell.minmargin60_abstain_junction.bam", False),
        (["--config", 'trna={"classify": {"raw_tags": true}}'], "fx.tcndwell.raw.bam", True),
    ]  # fmt: skip
    for arguments, expected, raw in options:
        output = _snakemake(workflow, *arguments)
        # thresholds and tag options change tagging onwards, never the model's outputs
        assert _planned_rules(output) & {"shard", "extract", "classify"} == set(), expected
        assert "tag" in _planned_rules(output), expected
        assert_equals_leech(workflow, expected, raw=raw)


@pytest.mark.parametrize(("shards", "fused"), [(3, False), (1, True), (3, True)])
def test_shard_count_and_fused_extraction_do_not_change_the_tags(workflow, shards, fused):
    _configure(workflow, TCN_BUNDLE, shards=shards, fused=fused, tsv=True)
    _snakemake(workflow)
    assert_equals_leech(workflow, "fx.tcndwell.default.bam")
    # leech predict -o calls.tsv: the same rows, in order, whatever the shards
    table = workflow / "results/trna/fx/fx.leech.tsv.gz"
    assert_table_equals_leech(table, LEECH_MADE / "fx.tcndwell.default.tsv")


@pytest.mark.parametrize(
    ("make", "leech", "why"),
    [
        (lambda path: PAIR_BUNDLE, {}, "a pairwise bundle"),
        (lambda path: PAIR_BUNDLE, {"pair": "Gly_Phe"}, "run as one pair"),
        (lambda path: TCN_CHECKPOINT, {}, "a checkpoint directory"),
        (one_output_multiclass_bundle, {}, "a one-output (binary) model"),
    ],
    ids=["pairwise", "one_pair", "checkpoint_dir", "one_output"],
)
def test_the_table_is_refused_before_anything_runs_where_leech_refuses_it(
    workflow, tmp_path, make, leech, why
):
    """leech predict writes its table for a multiclass bundle run whole (--bundle --all)."""
    bundle = make(tmp_path / "bundle.pt")
    _configure(workflow, bundle, shards=1, tsv=True, **leech)
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "2", "--configfile", "leech.yaml"],
        cwd=workflow, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    # one line, after snakemake's own note of the profile it read
    line = result.stderr.strip().splitlines()[-1]
    assert "multiclass bundles only" in line and "Traceback" not in result.stderr, result.stderr
    assert str(bundle) in line and why in line


@pytest.mark.parametrize(
    ("bundle", "expected", "leech"),
    [
        (TCN_CHECKPOINT, "fx.tcndwell_checkpoint.default.bam", {}),
        # leech predict --all runs a pairwise bundle without abstain_on_junction_indel: the
        # flag changes nothing there (it is an error for one pair, a binary model)
        (PAIR_BUNDLE, "fx.gly_phe_pair.all.bam", {"abstain_on_junction_indel": True}),
        (PAIR_BUNDLE, "fx.gly_phe_pair.default.bam", {"pair": "Gly_Phe"}),
        # (the ConvLSTMDwell, bundles made from the fixture's, and every bundle leech trained
        # itself run through the jobs in test_leech_made)
    ],
    ids=["checkpoint_dir", "pairwise_all_abstain_ignored", "pairwise_pair"],
)
def test_every_fixture_bundle(workflow, bundle, expected, leech):
    _configure(workflow, bundle, shards=2, **leech)
    _snakemake(workflow)
    assert_equals_leech(workflow, expected)
    counts = (workflow / "results/trna/fx/summary/counts.tsv").read_text()
    # leech's selection, by reason: 392 scored, the 6 without signal, and what leech drops
    for reason, n in (("unmapped", 12), ("secondary", 14), ("supplementary", 10),
                      ("no_moves", 2), ("no_signal", 6)):  # fmt: skip
        assert f"fx\tpassthrough\t{reason}\t{n}\n" in counts, reason


def test_an_older_config_runs_with_leech_predicts_input_options(workflow):
    """`leech model train` without --motif records motif null; leech predict then takes --motif
    (and --motif-offset, --base-justify, --anchor where the config has no key). With a
    basecall-anchored bundle's values given as trna.leech options, the tags are leech's (read
    reference-anchored, they are not); without them, one line says what to set."""
    bundle = torch.load(LEECH_MADE / "fx_basecall.pt", map_location="cpu", weights_only=True)
    keys = ("motif_offset", "base_justify", "anchor")
    recorded = {key: bundle["config"].pop(key) for key in keys}
    recorded["motif"], bundle["config"]["motif"] = bundle["config"]["motif"], None
    assert recorded["anchor"] == "basecall"
    older = workflow / "older_config.pt"
    torch.save(bundle, older)
    _configure(workflow, older, shards=2)
    with pytest.raises(AssertionError, match=r"'motif': None: not recorded; .*trna.leech.motif"):
        _snakemake(workflow)
    _configure(workflow, older, shards=2, **recorded)
    _snakemake(workflow)
    assert_equals_leech(workflow, LEECH_MADE / "fx.basecall.default.bam")


def test_how_the_leech_run_extracted_reaches_extract_and_classify(workflow):
    """trna.leech.backend and leech_core (how the leech run to reproduce extracted) reach the
    extract and classify jobs; classify checks the features were extracted the same way."""
    _configure(workflow, TCN_BUNDLE, shards=2, backend="python", leech_core=False)
    plan = _snakemake(workflow, "-n", "-p", "--forceall")
    for job in ("extract", "classify"):
        commands = re.findall(rf"^Shell command: (kennel {job} .*)$", plan, re.M)
        assert len(commands) == 2, plan[-3000:]
        assert all("--leech-backend python --leech-without-core" in c for c in commands)
    _configure(workflow, TCN_BUNDLE, shards=2)
    plan = _snakemake(workflow, "-n", "-p", "--forceall")
    assert "--leech-backend" not in plan and "--leech-without-core" not in plan


def _six_class_bundle(path: Path) -> Path:
    """A pairwise bundle over 6 classes (15 pairs): the fixture's Gly_Phe network with each
    pair's output layer rescaled and shifted, so the pairs disagree as real ones do (with these
    draws, a third of the reads get another call from a tournament than from plain votes, and
    a fifth from weighted votes; with 5 classes or fewer the tournament never differed)."""
    bundle = torch.load(PAIR_BUNDLE, map_location="cpu", weights_only=True)
    network = bundle["models"].pop("Gly_Phe")["state_dict"]
    generator = torch.Generator().manual_seed(2)
    classes = ["Ala", "Arg", "Gly", "Leu", "Phe", "Ser"]
    pairs = [f"{a}_{b}" for i, a in enumerate(classes) for b in classes[i + 1 :]]
    for pair in pairs:
        state = dict(network)
        scale, shift = torch.randn(2, generator=generator) * torch.tensor([2.0, 1.5])
        state["classifier.9.weight"] = network["classifier.9.weight"] * scale
        state["classifier.9.bias"] = network["classifier.9.bias"] + shift
        bundle["models"][pair] = {"state_dict": state}
    bundle["metadata"].update(pairs=pairs, num_models=len(pairs))
    torch.save(bundle, path)
    return path


def test_pairwise_aggregation_reaches_the_tags(workflow, tmp_path):
    """`trna.leech.aggregation` decides each read's call as leech's --aggregation would: `aa`
    and `ac` equal the chosen method's votes over the read's own pair sigmoids (`pp`, raw), a
    method checked against leech's functions in test_leech_tags; changing it reruns tagging
    onwards only. The bundle's methods disagree on many reads, so an ignored option fails."""
    _configure(workflow, _six_class_bundle(tmp_path / "six.pt"), shards=2)
    raw = {"classify": {"raw_tags": True}}
    for aggregation in ("tournament", "weighted"):
        override = {**raw, "leech": {"aggregation": aggregation}}
        output = _snakemake(workflow, "--config", f"trna={json.dumps(override)}")
        if aggregation == "weighted":  # the second run
            assert _planned_rules(output) & {"shard", "extract", "classify"} == set()
        merged = workflow / "results/trna/fx/fx.classified.bam"
        called = differ = 0
        with pysam.AlignmentFile(str(merged)) as bam:
            for record in bam.fetch(until_eof=True):
                if not record.has_tag("aa"):
                    continue
                sides = [tuple(pair.split("_")) for pair in record.get_tag("pn").split(",")]
                sigmoids = list(record.get_tag("pp"))
                call, confidence = pairwise_call(sides, sigmoids, aggregation)
                assert record.get_tag("aa") == call, record.query_name
                assert record.get_tag("ac") == pytest.approx(confidence, rel=1e-6)
                naive = pairwise_votes(sides, sigmoids)
                called += 1
                differ += max(naive, key=naive.__getitem__) != call
        assert called == 392 and differ >= 20, (aggregation, called, differ)


def test_aggregation_reaches_tagging_for_a_whole_pairwise_bundle_only(workflow, tmp_path):
    """The workflow decides from the bundle's metadata, when it is parsed, whether
    `trna.leech.aggregation` reaches the tag job: for a whole pairwise bundle it does; one pair
    of it (a binary model) and a one-vs-all bundle ignore it, as leech predict does, with the
    warning, so the option is not in tag's command and changing it reruns nothing."""
    one_vs_all = one_vs_all_bundle(tmp_path / "one_vs_all.pt")
    weighted = json.dumps({"leech": {"aggregation": "weighted"}})
    for path, pair, reaches in [
        (PAIR_BUNDLE, None, True),
        (PAIR_BUNDLE, "Gly_Phe", False),
        (one_vs_all, None, False),
    ]:
        _configure(workflow, path, shards=1, pair=pair)
        plan = _snakemake(workflow, "-n", "-p", "--forceall", "--config", f"trna={weighted}")
        commands = [line for line in plan.splitlines() if "kennel tag" in line]
        assert commands, plan[-3000:]
        assert all(("--aggregation weighted" in line) == reaches for line in commands), commands
        assert ("aggregation weighted is ignored" in plan) != reaches, (path, pair)


def test_a_run_as_dorado_and_minknow_leave_it_gets_leechs_tags(workflow, tmp_path):
    """A raw run: dorado writes aligned BAMs in read order (`SO:unknown`, no index), MinKNOW a
    `pod5_pass/` directory with barcode folders; leech predict reads both so. The workflow
    sorts such a BAM first (a temporary copy) and reads every POD5 below the directory, and
    the merged BAM holds every record, with leech's tags on each record leech wrote."""
    data = LEECH_SHARED / "data"
    unsorted = write_in_read_order(data / "fx.bam", tmp_path / "fx.unsorted.bam")
    run = write_run_directory(data / "fx.pod5", tmp_path / "run")
    sheet = f"id\tarm\tpod5\tbam\nfx\ttrna\t{run}\t{unsorted}\n"
    (workflow / "run_samples.tsv").write_text(sheet)
    _configure(workflow, TCN_BUNDLE, shards=2)
    config = yaml.safe_load((workflow / "leech.yaml").read_text())
    (workflow / "leech.yaml").write_text(yaml.safe_dump({**config, "samples": "run_samples.tsv"}))
    output = _snakemake(workflow)
    assert "sort_bam" in _planned_rules(output)
    assert_equals_leech(workflow, "fx.tcndwell.default.bam")
    assert not (workflow / "results/trna/fx/sorted.bam").exists()  # temporary
    # its deletion reruns nothing while the sheet's BAM is unchanged
    assert "Nothing to be done" in _snakemake(workflow, "-n")
    # a POD5 file added to the run directory is a new input: the sample is sharded again
    (run / "barcode02").mkdir()
    shutil.copyfile(run / "run_0.pod5", run / "barcode02" / "run_3.pod5")
    assert "shard" in _planned_rules(_snakemake(workflow, "-n"))


def test_a_tag_option_the_model_cannot_take_stops_before_any_job(workflow):
    """abstain_on_junction_indel with one pair (a binary model) is refused, as leech predict
    refuses it, when the workflow is parsed: the tag jobs that apply it come after the GPU
    jobs, which must not run for nothing. The whole pairwise bundle takes it (ignored)."""
    _configure(workflow, PAIR_BUNDLE, shards=1, pair="Gly_Phe", abstain_on_junction_indel=True)
    with pytest.raises(AssertionError, match="snakemake failed") as failed:
        _snakemake(workflow, "-n")
    # the failure's stderr, before the logs of the module's earlier runs
    stderr = str(failed.value).split("snakemake failed:\n", 1)[1].split("\n--- ")[0]
    stderr = stderr.strip().splitlines()
    # Snakemake's own line about the profile, then kennel's one line
    ours = [line for line in stderr if not line.startswith("Using workflow specific profile")]
    assert len(ours) == 1, stderr
    assert ours[0].startswith("config: trna.leech.abstain_on_junction_indel: "), stderr
    assert "applies to multiclass models only" in ours[0]
    _configure(workflow, PAIR_BUNDLE, shards=1, abstain_on_junction_indel=True)
    assert "Job stats" in _snakemake(workflow, "-n")
