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


def test_per_model_scores_and_profiles_merge_along_the_variant_axis(
    snp_sim, small_vcf, tmp_path, monkeypatch
):
    """Slices scored with two replicate models (per-model scores kept) and a REF/ALT profile
    stat merge into the same arrays as one slice of all their variants, copied a variant at a
    time (per-model scores: along their second axis)."""
    import dataclasses

    from kennel.snp import merge
    from kennel.snp.scoring import score_snps

    monkeypatch.setattr(merge, "_BLOCK_VALUES", 1)
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
    the top variants read blocks of variants (here two, the last block shorter). The file and
    table equal those of a merge reading each slice whole, the drawn bars matplotlib's own
    ``hist`` of every value, and the table a plain sort of the whole stat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from kennel.snp import merge

    with h5py.File(four_slices["scores"][0], "r") as handle:
        tracks = handle["target_ids"].shape[0]
    blocks_read = []
    whole_blocks = merge.variant_blocks

    def counted(dataset, axis=0):
        for rows, block in whole_blocks(dataset, axis):
            blocks_read.append(rows.stop - rows.start)
            yield rows, block

    outputs = {}
    for name, block in (("whole", 1 << 40), ("blocks", 2 * tracks)):
        monkeypatch.setattr(merge, "_BLOCK_VALUES", block)
        monkeypatch.setattr(merge, "variant_blocks", counted)
        blocks_read.clear()
        out = tmp_path / name
        out.mkdir()
        merge_scores(four_slices["scores"], out / "m.h5", out / "p.png", out / "t.html")
        outputs[name] = (out, max(blocks_read))
    assert outputs["whole"][1] > 2 and outputs["blocks"][1] == 2
    whole, blocks = (read_scores(outputs[n][0] / "m.h5")["data"] for n in ("whole", "blocks"))
    assert whole.keys() == blocks.keys()
    for name in whole:
        nan_equal = whole[name].dtype.kind == "f"  # strings have no NaN to compare
        assert np.array_equal(whole[name], blocks[name], equal_nan=nan_equal), name
    page = (outputs["blocks"][0] / "t.html").read_text()
    assert (outputs["whole"][0] / "t.html").read_text() == page
    with h5py.File(outputs["blocks"][0] / "m.h5", "r") as handle:
        stats = ("SUM", "logSUM", "D1", "D2", "logD1", "logD2")
        for stat in stats:
            values = handle[stat][:].astype(np.float32).ravel()
            figure, (drawn, reference) = plt.subplots(2)
            merge.draw_histogram(drawn, handle[stat])
            reference.hist(values[np.isfinite(values)], bins=merge.HISTOGRAM_BINS)
            bars = [[(p.get_x(), p.get_width(), p.get_height()) for p in axis.patches]
                    for axis in (drawn, reference)]  # fmt: skip
            plt.close(figure)
            assert bars[0] == bars[1], stat
        # every cell of the table, from the whole stats: largest |logSUM| over tracks first
        magnitude = np.abs(handle["logSUM"][:].astype(np.float32))
        order = np.argsort(-magnitude.max(axis=1), kind="stable")[:20]
        data = {name: handle[name][:] for name in ("snp", "chr", "pos", "ref_allele", "alt_allele",
                                                   "target_ids", *stats)}  # fmt: skip
    expected = []
    for i in order:
        track = int(magnitude[i].argmax())
        text = [data[n][i].decode() for n in ("snp", "chr")] + [str(data["pos"][i])]
        text += [data[n][i].decode() for n in ("ref_allele", "alt_allele")]
        text += [data["target_ids"][track].decode()]
        expected.append(text + [f"{float(data[stat][i, track]):.4g}" for stat in stats])
    cells = [
        [cell.split("</td>")[0] for cell in row.split("<td>")[1:]]
        for row in page.split("<tr>")[2:]  # the first <tr> holds the header
    ]
    assert cells == expected
