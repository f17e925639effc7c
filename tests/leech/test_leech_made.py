"""leech bundles that differ from one another only in their network or their file's layout,
through kennel's jobs, against the tags `leech predict` wrote with each: every bundle leech
0.16.0 trained on the fixture reads (leech_made/make.sh: its twenty-seven architectures, a
TCNDwell on a wide feature window, three with masked sequences, one with a base-defined
signal window, one with dwell templates, one on basecall-anchored chunks and one without
signal-map refinement), the fixture's ConvLSTMDwell, and two bundles made
from the fixture's as leech would write them. Two of the architectures, ConvLSTMRemoraBase and
SignalCNN, leech predict cannot load (its loader builds them at the class defaults): their tags
are leech predict's with that loader building them from the config (make_config_built.py).

The jobs are the workflow's own commands, as its dry run prints them for the fixture reads
(shard, extract, classify and merge-bam), run in this process with each bundle in place of the
one planned (the fixture's TCNDwell: the plan depends on a bundle's kind, and every bundle here
is multiclass): one snakemake run per bundle would pay for the same plumbing two dozen times.
test_leech_workflow runs the bundles whose kind or options change what the workflow plans
through `snakemake`.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pysam
import pytest
import torch
import yaml
from kennel.cli import main
from leech_reference import (
    LEECH_SHARED,
    LEGACY_WINDOWS,
    LSTM_BUNDLE,
    OTHER_NORMALISATIONS,
    TCN_BUNDLE,
    assert_table_equals_leech,
    assert_tags_equal_leech,
    charging_head_bundle,
    legacy_window_bundle,
    one_output_multiclass_bundle,
    wide_window_bundle,
)

from tests.conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.slow

LEECH_MADE = Path(__file__).parent / "leech_made"
BUNDLES = sorted(path.name[len("fx_") : -len(".pt")] for path in LEECH_MADE.glob("fx_*.pt"))
JOBS = ("shard", "extract", "classify", "tag", "merge-bam")
PLANNED = str(TCN_BUNDLE.resolve())


@pytest.fixture(scope="module")
def commands(leech_shared, tmp_path_factory) -> list[list[str]]:
    """The workflow's commands for the fixture reads in 2 shards, in the dry run's order, each
    as its argument list (output redirection dropped); paths under results/ are relative."""
    directory = tmp_path_factory.mktemp("plan")
    data = (LEECH_SHARED / "data").resolve()
    sheet = directory / "samples.tsv"
    sheet.write_text(f"id\tarm\tpod5\tbam\nfx\ttrna\t{data / 'fx.pod5'}\t{data / 'fx.bam'}\n")
    trna = {
        "reference": str(data / "reference.fa"),
        "kmer_table": str(SHARED_DATA / "rna004_9mer_levels_v1.txt.gz"),
        "bundle": PLANNED,
        "shards": 2,
        "classify": {"batch_size": 100},  # several batches, a ragged last one
    }
    config = directory / "config.yaml"
    config.write_text(yaml.safe_dump({"samples": str(sheet), "trna": trna}))
    plan = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", REPO / "Snakefile", "-d", directory, "-n", "-p",
         "--forceall", "--cores", "2", "--configfile", config],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = []
    for line in re.findall(r"^Shell command: (kennel .*)$", plan.stdout + plan.stderr, re.M):
        arguments = shlex.split(line)[1:]
        if arguments[0] in JOBS:
            planned.append(arguments[: arguments.index(">")] if ">" in arguments else arguments)
    verbs = [arguments[0] for arguments in planned]
    # snakemake may order independent jobs either way: each shard's tag after its classify
    assert sorted(verbs) == sorted(["shard", *["extract"] * 2, *["classify"] * 2, *["tag"] * 2,
                                    "merge-bam"]), planned  # fmt: skip
    assert verbs[0] == "shard" and verbs[-1] == "merge-bam", planned
    for verb, arguments in zip(verbs, planned, strict=True):
        if verb == "tag":
            scored = arguments[arguments.index("--outputs") + 1]
            assert any(
                other[0] == "classify" and other[other.index("--outputs") + 1] == scored
                for other in planned[: planned.index(arguments)]
            ), planned
    return planned


def run_jobs(
    commands: list[list[str]],
    directory: Path,
    bundle: Path,
    monkeypatch,
    bam: Path | None = None,
    leech_options: tuple[str, ...] = (),
    tag_options: tuple[str, ...] = (),
) -> Path:
    """The planned jobs with ``bundle`` in place of the planned one (and ``bam`` in place of
    the fixture reads' BAM, ``leech_options`` added to extract and classify, as the workflow
    adds trna.leech's, ``tag_options`` to tag), in ``directory``: the merged BAM."""
    monkeypatch.chdir(directory)
    replace = {PLANNED: str(bundle)}
    if bam is not None:
        replace[str((LEECH_SHARED / "data" / "fx.bam").resolve())] = str(bam)
    for arguments in commands:
        for argument in arguments:
            if argument.startswith("results/"):  # snakemake makes the outputs' folders
                Path(argument).parent.mkdir(parents=True, exist_ok=True)
        arguments = [replace.get(a, a) for a in arguments]
        if arguments[0] in ("extract", "classify"):
            arguments += leech_options
        if arguments[0] == "tag":
            arguments += tag_options
        assert main(arguments) == 0, arguments
    return directory / "results/trna/fx/fx.classified.bam"


def test_leech_made_holds_every_architecture_and_its_tags():
    # a bundle whose tags were lost (or the reverse) would drop out of the test unnoticed
    assert len(BUNDLES) == 35
    assert all((LEECH_MADE / f"fx.{name}.default.bam").is_file() for name in BUNDLES)


@pytest.mark.parametrize("name", BUNDLES)
def test_every_bundle_leech_trained_gets_leechs_tags(commands, tmp_path, monkeypatch, name):
    merged = run_jobs(commands, tmp_path, LEECH_MADE / f"fx_{name}.pt", monkeypatch)
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.{name}.default.bam")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda path: LSTM_BUNDLE, "fx.convlstmdwell.default.bam"),
        # leech model bundle --comparison-type multiclass of a binary model: leech predict
        # --all runs it as --pair runs the pair (run_inference, binary for num_out 1)
        (one_output_multiclass_bundle, "fx.gly_phe_pair.default.bam"),
        # a ConvLSTMDwell trained on bases -7..+7: leech predict cuts its features to the 11
        # bases from -5 (dwell_offset 0), the fixture model's own window
        (lambda path: wide_window_bundle(LSTM_BUNDLE, path), "fx.convlstmdwell.default.bam"),
    ],
    ids=["convlstmdwell", "multiclass_of_one_output", "convlstmdwell_wide_window"],
)
def test_bundles_of_the_fixtures_networks_get_leechs_tags(
    commands, tmp_path, monkeypatch, make, expected
):
    merged = run_jobs(commands, tmp_path, make(tmp_path / "bundle.pt"), monkeypatch)
    assert_tags_equal_leech(merged, expected)


def test_a_featureless_model_takes_a_window_leech_refuses_a_feature_model(
    commands, tmp_path, monkeypatch
):
    """A network without a feature branch is fed no features, so leech predict never cuts its
    feature window: fx_ConvLSTMBase.pt with its 11-base window moved past the recorded -7..+7
    (dwell_offset 3; refused for a feature model) runs in leech 0.16.0 (--backend python) and
    gets its recorded window's tags on all 398 records, as it does with a 5-base window
    (-2..+2); kennel runs it too, with leech's tags."""
    bundle = torch.load(LEECH_MADE / "fx_ConvLSTMBase.pt", weights_only=True)
    bundle["config"]["dwell_offset"] = 3
    torch.save(bundle, tmp_path / "moved.pt")
    merged = run_jobs(commands, tmp_path, tmp_path / "moved.pt", monkeypatch)
    assert_tags_equal_leech(merged, LEECH_MADE / "fx.ConvLSTMBase.default.bam")


@pytest.mark.parametrize(
    ("name", "options"),
    [("abstain", ("--min-margin", "60", "--abstain-on-junction-indel")),
     ("charging_copy_tags", ("--copy-tags", "qs,ns,XX"))],
)  # fmt: skip
def test_the_table_is_leech_predicts_tsv(commands, tmp_path, monkeypatch, name, options):
    """leech predict -o calls.tsv (make_tsv.py): with abstain_on_junction_indel on reads with
    indels at the motif (its one option that changes the table: 52 reads become unc), and with
    a charging-level head and copied tags; the shards' tables joined (kennel leech-table)."""
    bundle, bam = TCN_BUNDLE, None
    if name == "charging_copy_tags":
        bundle = charging_head_bundle(TCN_BUNDLE, tmp_path / "charging.pt")
    else:
        bam = LEECH_MADE / "fx_motif_indels.bam"
    merged = run_jobs(commands, tmp_path, bundle, monkeypatch, bam=bam, tag_options=options)
    tables = sorted((tmp_path / "results/trna/fx/classified").glob("*.predictions.tsv"))
    output = tmp_path / "fx.leech.tsv.gz"
    arguments = ["--tables", *map(str, tables), "--bam", str(merged), "--output", str(output)]
    assert main(["leech-table", *arguments]) == 0
    assert_table_equals_leech(output, LEECH_MADE / f"fx.tcndwell.{name}.tsv")


@pytest.mark.parametrize("name", LEGACY_WINDOWS)
def test_a_window_in_legacy_keys_gets_leechs_tags(commands, tmp_path, monkeypatch, name):
    """fx_tcndwell_wide.pt with its feature window recorded in leech's legacy keys, shifted so
    that their reading matters (make_legacy_windows.py): the tags leech predict wrote."""
    bundle = legacy_window_bundle(LEECH_MADE / "fx_tcndwell_wide.pt", name, tmp_path / "b.pt")
    merged = run_jobs(commands, tmp_path, bundle, monkeypatch)
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.legacy_{name}.bam")


@pytest.mark.parametrize(
    ("name", "options"),
    [("backend_python", ("--leech-backend", "python")),
     ("without_core", ("--leech-without-core",))],
)  # fmt: skip
def test_leechs_python_extraction_gets_leechs_tags(
    commands, tmp_path, monkeypatch, capsys, name, options
):
    """The fixture's TCNDwell as leech predict --backend python and leech without leech-core
    tagged the reads (make_backends.py); the extract jobs' features are the ones leech fed the
    model that way (its tags are the same as with leech's default extraction on these reads,
    its features are not), and classify refuses them when told another way."""
    import hashlib

    import numpy as np
    from kennel.trna.features import FeatureFile

    merged = run_jobs(commands, tmp_path, TCN_BUNDLE, monkeypatch, leech_options=options)
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.tcndwell.{name}.bam")
    digests = []
    for path in sorted((tmp_path / "results/trna/fx/features").glob("*.features.h5")):
        with FeatureFile(path) as features:
            assert features.spec.leech_python_path
            for batch in features.batches(1000):
                rows = zip(batch.read_id, batch.base_idx, batch.features, strict=True)
                digests += [
                    (read_id.decode(), int(base), hashlib.sha256(row.tobytes()).hexdigest())
                    for read_id, base, row in rows
                ]
    with np.load(LEECH_MADE / "backend_inputs.npz") as leechs:
        expected = zip(leechs[f"{name}.read_id"].tolist(), leechs[f"{name}.base_idx"].tolist(),
                       leechs[f"{name}.features_sha256"].tolist(), strict=True)  # fmt: skip
        assert sorted(digests) == sorted(expected)
    classify = next(arguments for arguments in commands if arguments[0] == "classify")
    capsys.readouterr()
    assert main([str(TCN_BUNDLE) if a == PLANNED else a for a in classify]) != 0
    assert "takes other inputs than" in capsys.readouterr().err


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "skip_motif_indels"])
def test_motif_indels_are_kept_or_skipped_as_leech_does(commands, tmp_path, monkeypatch, strict):
    """The fixture reads with indels edited in and around the motif of 199 of them
    (leech_made/make_motif_indels.py): the fixture's TCNDwell as it is keeps the hits whose
    mapped length is within 3 of the motif's, and with its config's skip_motif_indels (leech
    data prepare --skip-motif-indels) drops those with any indel as leech counts them (one just
    before the motif's first base, not one just after its last). leech predict tagged 392
    records and 235."""
    bundle = TCN_BUNDLE
    if strict:
        bundle = tmp_path / "strict.pt"
        content = torch.load(TCN_BUNDLE, map_location="cpu", weights_only=True)
        content["config"]["skip_motif_indels"] = True
        torch.save(content, bundle)
    work = tmp_path / "run"
    work.mkdir()
    edited = LEECH_MADE / "fx_motif_indels.bam"
    merged = run_jobs(commands, work, bundle, monkeypatch, bam=edited)
    name = "strict" if strict else "lenient"
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.motif_indels.{name}.bam")
    # the reads dropped for their indels are counted apart, as many as leech left untagged
    skipped = Counter()
    for stats in (work / "results/trna/fx/classified").glob("*.stats.json"):
        skipped.update(json.loads(stats.read_text())["skipped"])

    def tagged(name: str) -> int:
        with pysam.AlignmentFile(str(LEECH_MADE / f"fx.motif_indels.{name}.bam")) as bam:
            return sum(record.has_tag("aa") for record in bam.fetch(until_eof=True))

    assert skipped["motif_indel"] == (tagged("lenient") - tagged("strict") if strict else 0)


def softclip_recovering_bundle(path: Path) -> Path:
    """The fixture's TCNDwell as if prepared with leech data prepare --recover-softclip-signal."""
    content = torch.load(TCN_BUNDLE, map_location="cpu", weights_only=True)
    content["config"]["recover_softclip_signal"] = True
    torch.save(content, path)
    return path


@pytest.mark.parametrize("recover", [False, True], ids=["zero_padded", "recover_softclip_signal"])
def test_windows_past_a_soft_clipped_end_are_padded_or_filled_as_leech_does(
    commands, tmp_path, monkeypatch, recover
):
    """The fixture reads with the alignment of 198 of them cut 4 to 24 bases past or before the
    motif, the rest soft-clipped (leech_made/make_softclips.py): windows running past the
    alignment are zero-padded, or with the config's recover_softclip_signal filled with the
    soft-clipped signal; leech predict's tags either way (45 records' tags differ between the
    two, 4 calls)."""
    bundle = softclip_recovering_bundle(tmp_path / "recover.pt") if recover else TCN_BUNDLE
    work = tmp_path / "run"
    work.mkdir()
    merged = run_jobs(commands, work, bundle, monkeypatch, bam=LEECH_MADE / "fx_softclipped.bam")
    name = "recovered" if recover else "plain"
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.softclipped.{name}.bam")


@pytest.mark.parametrize(
    "settings", OTHER_NORMALISATIONS, ids=lambda settings: settings["signal_norm"]
)
def test_other_normalisations_get_leechs_tags(commands, tmp_path, monkeypatch, settings):
    """The fixture's TCNDwell with its config naming another normalisation (leech data prepare
    --signal-norm; pa_scaling takes each read's calibration from the POD5), against leech
    predict's tags with it (leech_made/make_signal_norms.py)."""
    content = torch.load(TCN_BUNDLE, map_location="cpu", weights_only=True)
    content["config"].update(settings)
    bundle = tmp_path / "bundle.pt"
    torch.save(content, bundle)
    work = tmp_path / "run"
    work.mkdir()
    merged = run_jobs(commands, work, bundle, monkeypatch)
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.norm_{settings['signal_norm']}.bam")


@pytest.mark.parametrize("block", [1, 3])
def test_a_reads_chunks_tagged_across_blocks_get_leechs_tags(
    commands, tmp_path, monkeypatch, block
):
    """A binary model scores every chunk of a read and the tag job holds a read until the next
    read's first chunk, then writes it once with all of its MP/ML: replayed from the outputs
    file in blocks of 1 or 3 rows, that next chunk is often (with 1 row, always) in the next
    block, and the tags are still leech predict's."""
    import h5py

    monkeypatch.setattr("kennel.trna.tag.BLOCK_ROWS", block)
    bundle = one_output_multiclass_bundle(tmp_path / "bundle.pt")
    merged = run_jobs(commands, tmp_path, bundle, monkeypatch)
    assert_tags_equal_leech(merged, "fx.gly_phe_pair.default.bam")
    for path in (tmp_path / "results/trna/fx/scored").glob("*.h5"):
        with h5py.File(path) as outputs:
            rows, reads = outputs.attrs["rows"], outputs.attrs["reads"]
            assert rows >= reads > 2 * block  # one row per chunk: several blocks per shard
