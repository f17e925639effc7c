"""Statistics against baskerville's formulas written out in numpy, strand transform included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hound_reference import hound_percentiles
from kennel.snp.stat_names import HOUND_STATS, STATS
from kennel.snp.stats import (
    compute_stats,
    quantile_grid,
    score_quantiles,
    strand_map,
    to_float16,
)


def rel_entr(x, y):
    """scipy.special.rel_entr, elementwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((x > 0) & (y > 0), x * np.log(x / y), np.inf)
    return np.where((x == 0) & (y >= 0), 0.0, out)


def numpy_stats(ref: np.ndarray, alt: np.ndarray) -> dict[str, np.ndarray]:
    """compute_scores' definitions on (shifts, length, tracks) arrays, float64, per track."""
    n_shifts = ref.shape[0]
    f = {"": lambda x: x, "log": lambda x: np.log2(x + 1), "sqrt": np.sqrt}
    out = {}
    for prefix, g in f.items():
        out[f"{prefix}SUM"] = (
            g(alt).sum(axis=(0, 1)) / n_shifts - g(ref).sum(axis=(0, 1)) / n_shifts
        )
        d = g(alt) - g(ref)
        out[f"{prefix}D1"] = np.abs(d).sum(axis=1).mean(axis=0)
        out[f"{prefix}D2"] = np.sqrt((d**2).sum(axis=1)).mean(axis=0)
    out["logSED"] = np.log2(alt.sum(axis=1) + 1).mean(axis=0) - np.log2(ref.sum(axis=1) + 1).mean(
        axis=0
    )
    d = alt - ref
    sax = []
    for s in range(n_shifts):
        at = np.abs(d[s]).argmax(axis=0)
        sax.append(d[s, at, np.arange(d.shape[2])])
    out["SAX"] = np.mean(sax, axis=0)
    js = []
    for s in range(n_shifts):  # per-shift pseudocount and normalisation over the length
        pseudo = np.percentile(ref[s], 25, axis=0)
        r = (ref[s] + pseudo) / (ref[s] + pseudo).sum(axis=0)
        a = (alt[s] + pseudo) / (alt[s] + pseudo).sum(axis=0)
        js.append((rel_entr(r, a).sum(axis=0) + rel_entr(a, r).sum(axis=0)) / 2)
    out["JS"] = np.mean(js, axis=0)
    ref_log, alt_log = np.log2(ref + 1), np.log2(alt + 1)
    pseudo = np.percentile(ref_log, 25, axis=0)  # over shifts, as baskerville's logJS
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (ref_log + pseudo) / (ref_log + pseudo).sum(axis=0)
        a = (alt_log + pseudo) / (alt_log + pseudo).sum(axis=0)
    out["logJS"] = np.mean(
        [
            (rel_entr(r[s], a[s]).sum(axis=0) + rel_entr(a[s], r[s]).sum(axis=0)) / 2
            for s in range(n_shifts)
        ],
        axis=0,
    )
    out["REF"], out["ALT"] = ref, alt
    return out


def strand_matrix(n_tracks, rows, partners):
    """baskerville's strand transform: track x collapsed track, 1 where a track adds in."""
    matrix = np.zeros((n_tracks, len(rows)))
    for column, (row, partner) in enumerate(zip(rows, partners, strict=True)):
        matrix[row, column] = matrix[partner, column] = 1
    return matrix


def random_pair(rng, shifts=2, length=16, tracks=5):
    ref = rng.gamma(0.6, 3.0, size=(shifts, length, tracks))
    alt = ref * rng.uniform(0.3, 2.0, size=ref.shape) + rng.uniform(0, 1, size=ref.shape)
    return ref, alt


@pytest.mark.parametrize("shifts", [1, 2, 3])
@pytest.mark.parametrize("stranded", [False, True])
def test_every_hound_stat_equals_its_formula(shifts, stranded):
    rng = np.random.default_rng(shifts)
    # tracks: 0/1 a pair, 2 unstranded, 3/4 a pair whose '+' is track 4
    rows, partners = np.array([0, 2, 4]), np.array([1, 2, 3])
    for _ in range(10):
        ref, alt = random_pair(rng, shifts=shifts)
        expected = numpy_stats(ref, alt)
        if stranded:
            to = strand_map(rows, partners, 5)
            actual = compute_stats(torch.tensor(ref), torch.tensor(alt), HOUND_STATS, to, 3)
            matrix = strand_matrix(5, rows, partners)
            for stat in expected:
                if stat in ("D2", "logD2", "sqrtD2"):  # sqrt of summed squares of the means
                    expected[stat] = np.sqrt(expected[stat] ** 2 @ matrix)
                else:
                    expected[stat] = expected[stat] @ matrix
        else:
            actual = compute_stats(torch.tensor(ref), torch.tensor(alt), HOUND_STATS)
        assert list(actual) == list(HOUND_STATS)
        for stat in HOUND_STATS:
            np.testing.assert_allclose(
                actual[stat].numpy(), expected[stat], rtol=1e-10, atol=1e-12, err_msg=stat
            )


def test_log_fc_is_kennels_own_with_strands_summed_inside_the_log():
    rng = np.random.default_rng(2)
    ref, alt = random_pair(rng, shifts=2, tracks=2)
    to = strand_map([0], [1], 2)
    actual = compute_stats(torch.tensor(ref), torch.tensor(alt), ("logFC",), to, 1)["logFC"]
    expected = np.log2(alt.sum(axis=(1, 2)).mean() + 1) - np.log2(ref.sum(axis=(1, 2)).mean() + 1)
    np.testing.assert_allclose(actual.numpy(), [expected], rtol=1e-12)


def test_identical_predictions_score_exactly_zero_wherever_they_sit():
    """A neutral variant: the alternate equals the reference bit for bit, placed anywhere in a
    stack of others and computed with any number of threads; every difference stat is +0."""
    rng = np.random.default_rng(9)
    ref = torch.tensor(rng.gamma(0.6, 3.0, size=(2, 999, 7)), dtype=torch.float32)
    others = [torch.tensor(random_pair(rng, 2, 999, 7)[1], dtype=torch.float32) for _ in range(6)]
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            for place in (0, 3, 6):
                alts = torch.stack([*others[:place], ref, *others[place:]])
                scores = compute_stats(
                    ref, alts, tuple(s for s in STATS if s not in ("REF", "ALT"))
                )
                for stat, value in scores.items():
                    stored = to_float16(value[place])
                    if stat == "logJS":  # normalised across shifts: 0 where defined
                        stored = stored[np.isfinite(stored)]
                    assert stored.view(np.uint16).tolist() == [0] * stored.size, stat
    finally:
        torch.set_num_threads(threads)


def test_swapping_ref_and_alt_negates_the_signed_stats_exactly():
    rng = np.random.default_rng(3)
    ref, alt = (torch.tensor(a, dtype=torch.float32) for a in random_pair(rng, shifts=2))
    forward = compute_stats(ref, alt, STATS)
    backward = compute_stats(alt, ref, STATS)
    for stat in ("SUM", "logSUM", "sqrtSUM", "logSED", "SAX", "logFC"):
        assert torch.equal(forward[stat], -backward[stat]), stat
    for stat in ("D1", "D2", "logD1", "logD2", "sqrtD1", "sqrtD2", "JS"):
        if stat != "JS":  # JS's pseudocount comes from the reference: not symmetric
            assert torch.equal(forward[stat], backward[stat]), stat


def test_a_stack_of_alternates_equals_scoring_each_alone():
    rng = np.random.default_rng(5)
    ref = torch.tensor(random_pair(rng)[0])
    alts = torch.stack([torch.tensor(random_pair(rng)[1]) for _ in range(4)])
    chosen = ("logSUM", "D2", "SAX", "JS", "logJS", "ALT")
    stacked = compute_stats(ref, alts, chosen)
    for i in range(4):
        alone = compute_stats(ref, alts[i], chosen)
        for stat in chosen:
            torch.testing.assert_close(stacked[stat][i], alone[stat])


def test_profile_step_keeps_the_plain_shift_rows():
    rng = np.random.default_rng(4)
    ref, alt = random_pair(rng, shifts=4)
    scores = compute_stats(torch.tensor(ref), torch.tensor(alt), ("REF", "ALT"), profile_step=2)
    assert np.array_equal(scores["REF"].numpy(), ref[::2])
    assert np.array_equal(scores["ALT"].numpy(), alt[::2])


def test_scores_clip_to_the_float16_range_and_zero_has_one_sign():
    big = np.array([1e6, -1e6, 3.5, np.float32(65504.0) * 2, -0.0, -1e-12])
    assert to_float16(big).tolist() == [65504.0, -65504.0, 3.5, 65504.0, 0.0, 0.0]
    assert to_float16(big)[4:].view(np.uint16).tolist() == [0, 0]  # +0, not -0
    assert to_float16(torch.tensor(big)).dtype == np.float16
    assert np.isfinite(to_float16(big)).all()


def test_quantile_grid_and_quantiles():
    grid = quantile_grid()
    assert len(grid) == 99 + 80 + 100
    np.testing.assert_allclose(grid[:3], [0.001, 0.002, 0.003])
    np.testing.assert_allclose(grid[98:101], [0.099, 0.10, 0.11])
    np.testing.assert_allclose(grid[178:181], [0.89, 0.900, 0.901])
    assert grid[-1] == pytest.approx(0.999) and np.all(np.diff(grid) > 0)
    scores = np.random.default_rng(1).normal(size=(5000, 40)).astype(np.float16)
    hound_grid, expected = hound_percentiles(scores)
    assert np.array_equal(grid, hound_grid)  # to the last bit, as hound_snp writes it
    assert np.array_equal(score_quantiles(scores, chunk_bytes=4 * 5000 * 3), expected)
    assert np.isnan(score_quantiles(np.zeros((0, 3), np.float16))).all()
