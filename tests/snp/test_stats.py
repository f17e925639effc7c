"""Statistics against direct numpy formulas, strand collapse, symmetry and float16 clipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kennel.snp.stats import STATS, compute_stats, quantile_grid, score_quantiles, to_float16


def numpy_stats(ref: np.ndarray, alt: np.ndarray) -> dict[str, np.ndarray]:
    """The issue's definitions on (shifts, length, tracks) arrays, in float64."""
    log_ref, log_alt = np.log2(ref + 1), np.log2(alt + 1)
    return {
        "SUM": alt.sum(axis=1).mean(axis=0) - ref.sum(axis=1).mean(axis=0),
        "logSUM": log_alt.sum(axis=1).mean(axis=0) - log_ref.sum(axis=1).mean(axis=0),
        "logFC": np.log2(alt.sum(axis=1).mean(axis=0) + 1)
        - np.log2(ref.sum(axis=1).mean(axis=0) + 1),
        "D1": np.abs(alt - ref).sum(axis=1).mean(axis=0),
        "D2": np.sqrt(((alt - ref) ** 2).sum(axis=1)).mean(axis=0),
        "logD1": np.abs(log_alt - log_ref).sum(axis=1).mean(axis=0),
        "logD2": np.sqrt(((log_alt - log_ref) ** 2).sum(axis=1)).mean(axis=0),
    }


def random_pair(rng, shifts=2, length=16, tracks=5):
    ref = rng.gamma(0.6, 3.0, size=(shifts, length, tracks))
    alt = ref * rng.uniform(0.3, 2.0, size=ref.shape) + rng.uniform(0, 1, size=ref.shape)
    return ref, alt


@pytest.mark.parametrize("shifts", [1, 2, 3])
def test_stats_equal_numpy_formulas(shifts):
    rng = np.random.default_rng(shifts)
    for _ in range(20):
        ref, alt = random_pair(rng, shifts=shifts)
        expected = numpy_stats(ref, alt)
        actual = compute_stats(torch.tensor(ref), torch.tensor(alt))
        assert list(actual) == list(STATS)
        for stat in STATS:
            np.testing.assert_allclose(actual[stat].numpy(), expected[stat], rtol=1e-10, atol=1e-10)


def test_strand_pairs_collapse_into_one_track_of_both_strands():
    rng = np.random.default_rng(7)
    ref, alt = random_pair(rng, shifts=2, tracks=5)
    # tracks: 0/1 a pair, 2 unstranded, 3/4 a pair whose '+' is track 4
    rows, partners = np.array([0, 2, 4]), np.array([1, 2, 3])
    actual = compute_stats(torch.tensor(ref), torch.tensor(alt), STATS, rows, partners)
    for column, (row, partner) in enumerate(zip(rows, partners, strict=True)):
        tracks = [row] if row == partner else [row, partner]
        # one track whose length is both strands' lengths together
        joined_ref = np.concatenate([ref[:, :, [t]] for t in tracks], axis=1)
        joined_alt = np.concatenate([alt[:, :, [t]] for t in tracks], axis=1)
        expected = numpy_stats(joined_ref, joined_alt)
        for stat in STATS:
            np.testing.assert_allclose(actual[stat][column].numpy(), expected[stat][0], rtol=1e-10)
    # sums and L1 norms add; L2 norms combine as the root of summed squares (one shift)
    one = compute_stats(torch.tensor(ref[:1]), torch.tensor(alt[:1]))
    paired = compute_stats(torch.tensor(ref[:1]), torch.tensor(alt[:1]), STATS, rows, partners)
    for stat in ("SUM", "logSUM", "D1", "logD1"):
        np.testing.assert_allclose(paired[stat][0], one[stat][0] + one[stat][1], rtol=1e-10)
    for stat in ("D2", "logD2"):
        np.testing.assert_allclose(
            paired[stat][0], np.hypot(one[stat][0].item(), one[stat][1].item()), rtol=1e-10
        )


def test_swapping_ref_and_alt_negates_the_signed_stats_exactly():
    rng = np.random.default_rng(3)
    ref, alt = (torch.tensor(a, dtype=torch.float32) for a in random_pair(rng, shifts=2))
    forward = compute_stats(ref, alt)
    backward = compute_stats(alt, ref)
    for stat in ("SUM", "logSUM", "logFC"):
        assert torch.equal(forward[stat], -backward[stat])
    for stat in ("D1", "D2", "logD1", "logD2"):
        assert torch.equal(forward[stat], backward[stat])


def test_a_stack_of_alternates_equals_scoring_each_alone():
    rng = np.random.default_rng(5)
    ref = torch.tensor(random_pair(rng)[0])
    alts = torch.stack([torch.tensor(random_pair(rng)[1]) for _ in range(4)])
    stacked = compute_stats(ref, alts, ("logSUM", "D2"))
    for i in range(4):
        alone = compute_stats(ref, alts[i], ("logSUM", "D2"))
        for stat in ("logSUM", "D2"):
            torch.testing.assert_close(stacked[stat][i], alone[stat])


def test_scores_clip_to_the_float16_range():
    big = np.array([1e6, -1e6, 3.5, np.float32(65504.0) * 2])
    assert to_float16(big).tolist() == [65504.0, -65504.0, 3.5, 65504.0]
    assert to_float16(torch.tensor(big)).dtype == np.float16
    assert np.isfinite(to_float16(big)).all()


def test_quantile_grid_and_quantiles():
    grid = quantile_grid()
    assert len(grid) == 99 + 80 + 100
    np.testing.assert_allclose(grid[:3], [0.001, 0.002, 0.003])
    np.testing.assert_allclose(grid[98:101], [0.099, 0.10, 0.11])
    np.testing.assert_allclose(grid[178:181], [0.89, 0.900, 0.901])
    assert grid[-1] == 0.999 and np.all(np.diff(grid) > 0)
    scores = np.random.default_rng(1).normal(size=(500, 7)).astype(np.float16)
    expected = np.percentile(scores.astype(np.float32), 100 * grid, axis=0).T.astype(np.float16)
    assert np.array_equal(score_quantiles(scores, chunk_bytes=4 * 500 * 3), expected)
    assert np.isnan(score_quantiles(np.zeros((0, 3), np.float16))).all()
