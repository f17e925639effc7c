"""Merging slices: checks, quantiles over the full set, and the report files."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pandas as pd
import pytest
from hound_reference import hound_percentiles
from kennel.cli import main
from kennel.errors import KennelError
from kennel.snp.merge import merge_scores
from snp_helpers import read_scores, row_ids


def test_quantiles_are_recomputed_over_all_variants(four_slices):
    merged = read_scores(four_slices["merged"])["data"]
    first = read_scores(four_slices["scores"][0])["data"]
    for stat in ("SUM", "logSUM", "D2"):
        grid, expected = hound_percentiles(merged[stat])  # over every slice's variants
        assert np.array_equal(merged["percentiles"], grid)
        assert np.array_equal(merged[f"{stat}_pct"], expected)
        assert expected.shape == (merged["target_ids"].shape[0], len(grid))
    assert not np.array_equal(merged["logSUM_pct"], first["logSUM_pct"])
    rows = sum(read_scores(path)["data"]["snp"].shape[0] for path in four_slices["scores"])
    assert merged["snp"].shape[0] == rows
    with h5py.File(four_slices["merged"], "r") as handle:
        assert handle.attrs["slices"] == 4 and handle.attrs["status"] == "complete"


def test_report_plot_and_top_variants(snp_sim, one_slice):
    directory = one_slice["merged"].parent
    assert (directory / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (directory / "top.html").read_text()
    truth = pd.read_csv(snp_sim["truth"], sep="\t")
    rows = [
        [cell.split("</td>")[0] for cell in row.split("<td>")[1:]]
        for row in page.split("<tr>")[2:]  # the first <tr> holds the header
    ]
    assert len(rows) == 20
    keys = zip(row_ids(truth["id"]), truth["alt"], strict=True)
    effects = dict(zip(keys, truth["effect"], strict=True))
    assert all(effects[(row[0], row[4])] != "neutral" for row in rows)


def copy_of(path, tmp_path, name):
    target = tmp_path / name
    shutil.copy(path, target)
    return target


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda h: h["target_ids"].__setitem__(0, b"other"), "target_ids differ from those of"),
        (lambda h: h.attrs.__setitem__("status", "partial"), "scoring did not finish"),
        (lambda h: h.attrs.__setitem__("options", '{"rc": false}'), "scored with options"),
    ],
)
def test_inconsistent_slices_are_refused(four_slices, tmp_path, damage, expected):
    good = copy_of(four_slices["scores"][0], tmp_path, "a.h5")
    bad = copy_of(four_slices["scores"][1], tmp_path, "b.h5")
    with h5py.File(bad, "r+") as handle:
        damage(handle)
    out = tmp_path / "merged.h5"
    with pytest.raises(KennelError, match=expected) as raised:
        merge_scores([good, bad], out)
    assert str(raised.value).startswith(f"{bad}: ")
    assert not out.exists()


def test_cli(four_slices, tmp_path, capsys):
    out = tmp_path / "m.h5"
    slices = [str(path) for path in four_slices["scores"]]
    assert main(["merge-scores", *slices, "--out", str(out)]) == 0 and out.exists()
    assert main(["merge-scores", str(tmp_path / "absent.h5"), "--out", str(tmp_path / "n.h5")]) == 2
    assert "absent.h5: scores file not found" in capsys.readouterr().err


def test_per_model_scores_and_profiles_merge_along_the_variant_axis(snp_sim, small_vcf, tmp_path):
    """Slices scored with two replicate models (per-model scores kept) and a REF/ALT profile
    stat merge into the same arrays as one slice of all their variants."""
    import dataclasses

    from kennel.snp.scoring import score_snps
    from kennel.snp.slices import slice_vcf
    from snp_helpers import OPTIONS, SEQ_LEN

    models = [snp_sim["model"], snp_sim["model"]]
    genome, targets = snp_sim["genome"], snp_sim["targets"]
    options = dataclasses.replace(OPTIONS, per_model=True, stats=("SUM", "logD2"))
    whole = tmp_path / "whole.h5"
    score_snps(small_vcf, genome, models, targets, whole, options)
    pieces = [tmp_path / f"{i}.vcf.gz" for i in range(2)]
    slice_vcf(small_vcf, pieces, SEQ_LEN, options.cluster_pct)
    scored = [tmp_path / f"{i}.h5" for i in range(2)]
    for vcf, out in zip(pieces, scored, strict=True):
        score_snps(vcf, genome, models, targets, out, options)
    merged = tmp_path / "merged.h5"
    merge_scores(scored, merged)
    names = ("snp", "allele", "flipped", "SUM", "logD2", "per_model/SUM", "per_model/logD2")
    with h5py.File(whole, "r") as first, h5py.File(merged, "r") as second:
        a = {name: first[name][:] for name in names}
        b = {name: second[name][:] for name in names}
    for name in names:
        assert np.array_equal(a[name], b[name]), name
    assert a["per_model/SUM"].shape[:2] == (2, len(a["snp"]))

    profiles = dataclasses.replace(OPTIONS, stats=("SUM", "ALT"))
    for vcf, out in zip(pieces, scored, strict=True):
        score_snps(vcf, genome, snp_sim["model"], targets, out, profiles)
    merge_scores(scored, merged, tmp_path / "plot.png", tmp_path / "top.html")
    with h5py.File(merged, "r") as handle:
        assert handle["ALT"].shape[:2] == (len(a["snp"]), 1) and "ALT_pct" not in handle


def test_a_merge_read_a_few_variants_at_a_time_writes_what_one_read_writes(
    four_slices, tmp_path, monkeypatch
):
    """A job's scores can be many GB against the merge job's few: copying, the histograms and
    the top variants read blocks of variants. Blocks of one or two variants give the file and
    the table of a merge that reads each slice whole, and the histograms of matplotlib's own
    ``hist`` over every value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from kennel.snp import merge

    outputs = {}
    for name, block in (("whole", 1 << 40), ("blocks", 7)):
        monkeypatch.setattr(merge, "_BLOCK_VALUES", block)
        out = tmp_path / name
        out.mkdir()
        merge_scores(four_slices["scores"], out / "m.h5", out / "p.png", out / "t.html")
        outputs[name] = out
    whole, blocks = (read_scores(outputs[n] / "m.h5")["data"] for n in ("whole", "blocks"))
    assert whole.keys() == blocks.keys()
    for name in whole:
        nan_equal = whole[name].dtype.kind == "f"  # strings have no NaN to compare
        assert np.array_equal(whole[name], blocks[name], equal_nan=nan_equal), name
    assert (outputs["whole"] / "t.html").read_text() == (outputs["blocks"] / "t.html").read_text()
    with h5py.File(outputs["blocks"] / "m.h5", "r") as handle:
        assert handle["logSUM"].shape[0] > 7  # blocks of one variant (tracks >= 4)
        for stat in ("SUM", "logSUM", "D2"):
            values = handle[stat][:].astype(np.float32).ravel()
            counts, edges, _ = plt.hist(values[np.isfinite(values)], bins=merge.HISTOGRAM_BINS)
            plt.close("all")
            streamed_counts, streamed_edges = merge.score_histogram(handle[stat])
            assert np.array_equal(streamed_counts, counts), stat
            assert np.array_equal(streamed_edges, edges), stat
        # the table's rows and tracks: largest |logSUM| over tracks, a plain sort of all of it
        magnitude = np.abs(handle["logSUM"][:].astype(np.float32))
        order = np.argsort(-magnitude.max(axis=1), kind="stable")[:20]
        tracks = [value.decode() for value in handle["target_ids"][:]]
        expected = [(handle["snp"][i].decode(), tracks[int(magnitude[i].argmax())]) for i in order]
    page = (outputs["blocks"] / "t.html").read_text()
    cells = [
        [cell.split("</td>")[0] for cell in row.split("<td>")[1:]]
        for row in page.split("<tr>")[2:]  # the first <tr> holds the header
    ]
    assert [(row[0], row[5]) for row in cells] == expected
