"""A lab's baskerville model (params.json + Keras model.h5) in kennel gives hound_snp's own scores.

``hound_snp_run/`` was made by ``make_hound_snp_reference.py`` with TensorFlow and baskerville
themselves: a Borzoi-architecture model (scaled down, every weight random), its Keras
predictions, and ``hound_snp``'s ``scores.h5`` for four option sets. Nothing here is kennel's
own restatement: the model's outputs are TensorFlow's, the scores are baskerville's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from kennel.cli import main
from kennel.models.seqnn_file import load_seqnn
from kennel.snp.scoring import ScoreOptions, prepare, score_in_memory
from kennel.snp.slices import slice_vcf
from snp_helpers import one_torch_thread

RUN = Path(__file__).parent / "hound_snp_run"
# JS is scored only where hound_snp can (see make_hound_snp_reference.py's CASES)
TRACK_STATS = ("SUM", "logSUM", "logSED", "sqrtSUM", "SAX", "D1", "logD1", "sqrtD1", "D2",
               "logD2", "sqrtD2", "logJS")  # fmt: skip

# hound_snp's command line (as command.json records it) and the same options in kennel's terms
CASES = {
    "defaults": (
        ["targets.txt", "--stats", ",".join(TRACK_STATS)],
        dict(rc=False, shifts=(0,), cluster_pct=0.0),
    ),
    "rc_shifts_clusters": (
        ["targets.txt", "--stats", ",".join(TRACK_STATS), "--rc", "--shifts", "-1,0,1",
         "-c", "0.1"],
        dict(rc=True, shifts=(-1, 0, 1), cluster_pct=0.1),
    ),
    "stitch_untransform_old": (
        ["targets.txt", "--stats", ",".join((*TRACK_STATS, "JS")), "--rc", "--indel_stitch", "-u"],
        dict(rc=True, shifts=(0,), cluster_pct=0.0, indel_stitch=True, untransform_old=True,
             stats=(*TRACK_STATS, "JS")),
    ),
    "profiles_unstranded": (
        ["targets_unstranded.txt", "--stats", ",".join((*TRACK_STATS, "REF", "ALT")), "--rc",
         "--shifts", "0,1", "--indel_stitch"],
        dict(rc=True, shifts=(0, 1), cluster_pct=0.0, indel_stitch=True,
             stats=(*TRACK_STATS, "REF", "ALT")),
    ),
}  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def torch_threads():
    with one_torch_thread():
        yield


def hound(case: str) -> dict[str, np.ndarray]:
    with h5py.File(RUN / "scores" / case / "scores.h5") as handle:
        return {name: handle[name][()] for name in handle}


def assert_equals_hound(scores: dict, reference: dict, stats) -> None:
    """Equal as hound_snp stores them (float16): within two float16 steps of the value, and a
    thousandth of the stat's largest value for those that cancel to near zero (alt - ref of
    float32 predictions that TensorFlow and torch sum in other orders)."""
    # a variant hound_snp failed to score is a row of zeros (see the maker's CASES)
    assert (reference["SUM"] != 0).any(axis=1).all(), "hound_snp left a variant unscored"
    for stat in stats:
        mine = np.asarray(scores[stat], dtype=np.float16).astype(np.float64)
        theirs = reference[stat].astype(np.float64)
        assert mine.shape == theirs.shape, stat
        tolerance = 2 * np.spacing(np.abs(theirs).astype(np.float16)).astype(np.float64)
        tolerance += 1e-3 * np.abs(theirs).max()
        off = np.abs(mine - theirs) > tolerance
        assert not off.any(), (stat, np.argwhere(off)[:5], mine[off][:5], theirs[off][:5])


def test_the_model_computes_what_keras_computes():
    """TensorFlow's outputs for three sequences (one with a run of N) from kennel's network,
    as close as float32 allows; every weight is random, so a misplaced one shows."""
    model = load_seqnn(RUN / "params.json", RUN / "model.h5")
    saved = np.load(RUN / "predictions.npz")
    with torch.inference_mode():
        predictions = model(torch.from_numpy(saved["one_hot"])).numpy()
    expected = saved["predictions"]
    assert expected.std() > 1  # the sequence moves the output far more than the tolerance
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-5 * expected.max())
    assert (model.seq_len, model.bin_size, model.target_length) == (4096, 32, 96)


def test_the_other_block_options_compute_what_keras_computes():
    """A second model (variety.params.json) takes what the Borzoi model leaves out: layer norm,
    conv_block (dilated, residual, activation_end; separable before batch norm), two-conv
    res_tower repeats, attention without content-position bias or dense part and with the
    default position features, another training length, a U-net without upsampling dense,
    asymmetric cropping and a gelu head; saved second in its process (Keras's layer counters
    do not start at zero)."""
    model = load_seqnn(RUN / "variety.params.json", RUN / "variety.h5")
    saved = np.load(RUN / "variety_predictions.npz")
    with torch.inference_mode():
        predictions = model(torch.from_numpy(saved["one_hot"])).numpy()
    expected = saved["predictions"]
    assert expected.shape == (2, 2048 // 16 - 5, 3) and expected.std() > 0.1
    scale = np.abs(expected).max()
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("case", list(CASES))
def test_every_stat_equals_hound_snps_own_scores(case):
    command, settings = CASES[case]
    assert json.loads((RUN / "scores" / case / "command.json").read_text()) == command
    options = ScoreOptions(
        device="cpu", compile="off", alts="first", ref_mismatch="flip", batch_size=5,
        **{"stats": TRACK_STATS, **settings},
    )  # fmt: skip
    prepared = prepare(RUN / "variants.vcf", RUN / "genome.fa", RUN / "model.h5",
                       RUN / command[0], options, params=RUN / "params.json")  # fmt: skip
    reference = hound(case)
    assert [variant.row_id for variant in (prepared.variants[i] for i in prepared.rows)] == [
        name.decode() for name in reference["snp"]
    ]
    assert_equals_hound(score_in_memory(prepared), reference, options.stats)


def test_score_snps_takes_the_keras_model_and_its_params(tmp_path, capsys):
    """The command line, as the workflow calls it, with two replicates of the same model
    (hound_snp scores one: the average of two equal models is that model's scores)."""
    replicate = tmp_path / "model1.h5"
    shutil.copy(RUN / "model.h5", replicate)
    out = tmp_path / "scores.h5"
    status = main([
        "score-snps", "--vcf", str(RUN / "variants.vcf"), "--genome", str(RUN / "genome.fa"),
        "--model", str(RUN / "model.h5"), str(replicate), "--params", str(RUN / "params.json"),
        "--targets", str(RUN / "targets.txt"), "--out", str(out), "--device", "cpu",
        "--rc", "--shifts=-1,0,1", "--cluster-pct", "0.1", "--stats", ",".join(TRACK_STATS),
        "--alts", "first", "--ref-mismatch", "flip",
    ])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    with h5py.File(out) as handle:
        scores = {stat: handle[stat][()] for stat in TRACK_STATS}
        assert handle.attrs["params"] == str(RUN / "params.json")
    assert_equals_hound(scores, hound("rc_shifts_clusters"), TRACK_STATS)


def test_slice_vcf_cuts_at_the_keras_models_window(tmp_path, capsys):
    """slice-vcf clusters with the seq_len the params give (params.json's seq_length, 4096):
    its cuts are those of that window (a Borzoi-length window clusters these records into two
    slices and an empty one)."""
    seq_length = json.loads((RUN / "params.json").read_text())["model"]["seq_length"]
    slices = [tmp_path / f"{i}.vcf.gz" for i in range(3)]
    status = main(["slice-vcf", "--vcf", str(RUN / "variants.vcf"), "--model",
                   str(RUN / "model.h5"), "--params", str(RUN / "params.json"),
                   "--cluster-pct", "0.1", "--out", *map(str, slices)])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    expected = slice_vcf(RUN / "variants.vcf", [tmp_path / f"e{i}.vcf.gz" for i in range(3)],
                         seq_length, 0.1, "all")  # fmt: skip
    assert f"58 variants in 3 slices: {expected}" in capsys.readouterr().out
    assert expected != slice_vcf(RUN / "variants.vcf", [tmp_path / f"b{i}.vcf.gz" for i in
                                 range(3)], 524_288, 0.1, "all")  # fmt: skip


def _params(tmp_path: Path, edit) -> Path:
    params = json.loads((RUN / "params.json").read_text())
    edit(params["model"])
    path = tmp_path / "params.json"
    path.write_text(json.dumps(params))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["trunk"].insert(1, {"name": "dilated_residual", "filters": 8}),
         "trunk block 2 (dilated_residual): block 'dilated_residual' is not supported"),
        (lambda m: m["trunk"][2].update(repeat=3),
         "model.h5: holds 9 dense layers, "),
        (lambda m: m["trunk"][1].update(filters_end=48),
         "layer batch_normalization_5: weight gamma has shape (36,), params.json's model "
         "needs (40,)"),
        (lambda m: m["trunk"][0].update(pool_type="softmax"),
         "trunk block 1 (conv_dna): pool_type='softmax' is not supported"),
        (lambda m: m["trunk"][4].update(gated=True),
         "trunk block 5 (unet_conv): option 'gated' is not supported"),
        (lambda m: m["trunk"][1].pop("filters_init"),
         "trunk block 2 (res_tower): option 'filters_init': missing"),
    ],
    ids=["unknown_block", "other_architecture", "other_widths", "softmax_pool", "unknown_option",
         "missing_option"],
)  # fmt: skip
def test_params_that_do_not_describe_the_model_are_one_line(tmp_path, capsys, edit, message):
    params = _params(tmp_path, edit)
    status = main(["slice-vcf", "--vcf", str(RUN / "variants.vcf"), "--model",
                   str(RUN / "model.h5"), "--params", str(params), "--out",
                   str(tmp_path / "0.vcf.gz")])  # fmt: skip
    seq_len_only = status == 0  # slice-vcf needs the layout only: the weights are read later
    if seq_len_only:
        status = main(["score-snps", "--vcf", str(RUN / "variants.vcf"), "--genome",
                       str(RUN / "genome.fa"), "--model", str(RUN / "model.h5"), "--params",
                       str(params), "--targets", str(RUN / "targets.txt"), "--out",
                       str(tmp_path / "scores.h5"), "--device", "cpu"])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in lines if "error" in line]
    assert status == 2 and len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "scores.h5").exists()


@pytest.mark.integration
def test_the_workflow_scores_a_keras_model_as_hound_snp(workflow_copy):
    """A sheet row as a hound_snp user writes it (model.h5, its params.json) through
    `snakemake --cores 2`, hound_snp's options set in the config: the merged scores.h5 of three
    slices is hound_snp's; a missing params cell is one line before any job."""

    def write_sheet(params: str) -> None:
        (workflow_copy / "keras.tsv").write_text(
            "id\tarm\tvcf\tgenome\tmodel\tparams\ttargets\n"
            f"keras\tsnp\t{RUN / 'variants.vcf'}\t{RUN / 'genome.fa'}\t{RUN / 'model.h5'}"
            f"\t{params}\t{RUN / 'targets.txt'}\n"
        )

    write_sheet(str(RUN / "params.json"))
    config = {
        "samples": "keras.tsv",
        "snp": {"slices": 3, "score": {"rc": True, "shifts": [-1, 0, 1], "cluster_pct": 0.1,
                                       "stats": list(TRACK_STATS), "alts": "first",
                                       "ref_mismatch": "flip", "threads": 1}},
    }  # fmt: skip
    (workflow_copy / "keras.yaml").write_text(json.dumps(config))
    run = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "keras.yaml"]
    result = subprocess.run(run, cwd=workflow_copy, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    with h5py.File(workflow_copy / "results/snp/keras/scores.h5") as handle:
        scores = {stat: handle[stat][()] for stat in TRACK_STATS}
    assert_equals_hound(scores, hound("rc_shifts_clusters"), TRACK_STATS)

    write_sheet("")
    result = subprocess.run([*run, "--forceall", "-n"], cwd=workflow_copy, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode != 0
    assert "keras.tsv: line 2: 'params' is a required property" in result.stderr, result.stderr
