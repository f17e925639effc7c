"""Targets tables: parsing, strand pairs, subsets, bad tables, and the untransform formulas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from kennel.errors import KennelError
from kennel.snp.targets import read_targets, untransform

COLUMNS = ["identifier", "file", "clip", "clip_soft", "scale", "sum_stat", "strand_pair"]


def write_table(path, rows, columns=(*COLUMNS, "description")):
    lines = ["\t".join(["", *columns])]
    lines += ["\t".join(str(cell) for cell in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def row(index, identifier, pair, clip_soft=384, scale=1.0, sum_stat="sum"):
    return [index, identifier, "f", 768, clip_soft, scale, sum_stat, pair, f"desc {identifier}"]


def test_the_simulated_table(snp_sim):
    targets = read_targets(snp_sim["targets"], require_untransform=True)
    assert targets.identifier == ("motif0+", "motif0-", "motif1+", "motif1-")
    assert targets.index.tolist() == [0, 1, 2, 3]
    assert targets.strand_pair.tolist() == [1, 0, 3, 2]
    assert targets.collapsed_rows.tolist() == [0, 2]
    assert targets.collapsed_partners.tolist() == [1, 3]


def test_a_subset_maps_strand_pairs_to_rows_and_keeps_the_plus_strand(tmp_path):
    path = write_table(
        tmp_path / "t.tsv",
        [row(7, "b-", 9), row(9, "b+", 7), row(12, "u", 12), row(20, "c+", 21), row(21, "c-", 20)],
    )
    targets = read_targets(path)
    assert targets.index.tolist() == [7, 9, 12, 20, 21]
    assert targets.strand_pair.tolist() == [1, 0, 2, 4, 3]
    assert targets.collapsed_rows.tolist() == [1, 2, 3]  # b+ stands for b-, u for itself
    assert targets.collapsed_partners.tolist() == [0, 2, 4]


@pytest.mark.parametrize(
    ("rows", "columns", "expected"),
    [
        ([row(0, "a", 0)], COLUMNS, r"missing column\(s\) description"),
        ([row(0, "a+", 1), row(1, "a-", 5)], None, r"row 2 \(a-\): strand_pair 5 is out of range"),
        (
            [row(0, "a+", 1), row(1, "a-", 1)],
            None,
            r"row 1 \(a\+\): strand_pair 1 does not point back",
        ),
        ([row(0, "a+", "x")], None, r"row 1 \(a\+\): strand_pair 'x' is not an integer"),
        ([row(0, "a", 0), row(0, "b", 0)], None, r"row 2: track index 0 appears twice"),
        ([row(0, "a", 0, clip_soft="big")], None, r"row 1 \(a\): clip_soft 'big' is not a number"),
        ([row(0, "a", 0, scale=0)], None, r"row 1: scale must be positive"),
    ],
)
def test_bad_tables_are_one_line_naming_file_and_row(tmp_path, rows, columns, expected):
    if columns is not None:
        rows = [r[: len(columns)] for r in rows]
    path = write_table(tmp_path / "bad.tsv", rows, columns or (*COLUMNS, "description"))
    with pytest.raises(KennelError, match=expected) as raised:
        read_targets(path, require_untransform=True)
    assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)


def test_without_strand_pair_every_track_is_unstranded(tmp_path):
    """hound_snp reads such a table too: no strand swap in the rc ensemble, no strand sum."""
    columns = [c for c in COLUMNS if c != "strand_pair"] + ["description"]
    rows = [r[:7] + r[8:] for r in (row(4, "a+", 5), row(5, "a-", 4), row(6, "u", 6))]
    targets = read_targets(write_table(tmp_path / "t.tsv", rows, columns))
    assert targets.strand_pair.tolist() == [0, 1, 2]
    assert targets.collapsed_rows.tolist() == [0, 1, 2]


def test_untransform_columns_are_needed_only_for_untransforming(tmp_path):
    path = tmp_path / "lean.tsv"
    path.write_text("\tidentifier\tstrand_pair\tdescription\n0\ta\t0\tA\n")
    assert not read_targets(path).has_untransform
    with pytest.raises(KennelError, match="missing column.*clip_soft, scale, sum_stat"):
        read_targets(path, require_untransform=True)


def test_untransform_matches_the_formulas(tmp_path):
    path = write_table(
        tmp_path / "t.tsv",
        [
            row(0, "a", 0, 10, 0.5, "sum"),
            row(1, "b", 1, 20, 2.0, "sum_sqrt"),
            row(2, "c", 2, 5, 1.0, "mean"),
        ],
    )
    targets = read_targets(path, require_untransform=True)
    rng = np.random.default_rng(0)
    predictions = rng.uniform(0, 40, size=(2, 50, 3))
    table = pd.read_csv(path, sep="\t", index_col=0)
    expected = predictions.copy()
    clip_soft = table["clip_soft"].to_numpy()
    expected = np.where(
        expected > clip_soft, clip_soft - 1 + (expected - clip_soft + 1) ** 2, expected
    )
    sqrt = np.array(["_sqrt" in s for s in table["sum_stat"]])
    expected[..., sqrt] = (expected[..., sqrt] + 1) ** 2 - 1
    # baskerville's untransform_preds defaults (what hound_snp calls) leave the scale in
    actual = untransform(torch.tensor(predictions), targets).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-12)
    unscaled = untransform(torch.tensor(predictions), targets, unscale=True).numpy()
    np.testing.assert_allclose(unscaled, expected / table["scale"].to_numpy(), rtol=1e-12)
