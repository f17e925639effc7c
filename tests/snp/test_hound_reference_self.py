"""Checks of the hound_snp reference itself (tests/snp/hound_reference.py), on its own.

The reference is what kennel's scorer is compared with, so it must be right on its own terms:
its statistics against direct array formulas, its sequence edits on hand-made cases, its
windows' 1-based midpoint, and a small run through a toy model whose outputs are known.
"""

from __future__ import annotations

import hound_reference
import numpy as np
import pysam
import pytest
import torch
from hound_reference import (
    TRACK_STATS,
    alt_one_hot,
    group_records,
    hound_scores,
    one_hot,
    predict,
    read_records,
    read_target_table,
    score_stats,
    shift_one_hot,
    stitch,
    untransform_prediction,
    window_start,
    window_text,
)

# --- (a) statistics against direct formulas -----------------------------------------------------

PAIRS = [(0, 1), (2,), (3, 4)]  # two strand pairs and an unstranded track, in table order


def collapse_matrix(groups, n_tracks):
    matrix = np.zeros((n_tracks, len(groups)))
    for column, members in enumerate(groups):
        matrix[list(members), column] = 1.0
    return matrix


def kl(p, q):
    return (p * np.log(p / q)).sum(axis=1)


def direct(stat, ref, alt):
    """Each statistic as one array expression over (shifts, length, tracks)."""
    lr, la = np.log2(ref + 1), np.log2(alt + 1)
    sr, sa = np.sqrt(ref), np.sqrt(alt)
    diff = alt - ref
    if stat == "SUM":
        return alt.sum(1).mean(0) - ref.sum(1).mean(0)
    if stat == "logSUM":
        return la.sum(1).mean(0) - lr.sum(1).mean(0)
    if stat == "sqrtSUM":
        return sa.sum(1).mean(0) - sr.sum(1).mean(0)
    if stat == "logSED":
        return np.log2(alt.sum(1) + 1).mean(0) - np.log2(ref.sum(1) + 1).mean(0)
    if stat == "SAX":
        at = np.abs(diff).argmax(axis=1)[:, None, :]
        return np.take_along_axis(diff, at, axis=1)[:, 0].mean(0)
    if stat in ("D1", "logD1", "sqrtD1", "D2", "logD2", "sqrtD2"):
        d = {"": diff, "log": la - lr, "sqrt": sa - sr}[stat[:-2]]
        if stat.endswith("1"):
            return np.abs(d).sum(1).mean(0)
        return np.sqrt((d**2).sum(1)).mean(0)
    if stat == "JS":  # per shift: pseudocount and normalisation over length
        pc = np.percentile(ref, 25, axis=1, keepdims=True)
        rn = (ref + pc) / (ref + pc).sum(1, keepdims=True)
        an = (alt + pc) / (alt + pc).sum(1, keepdims=True)
        return ((kl(rn, an) + kl(an, rn)) / 2).mean(0)
    if stat == "logJS":  # as baskerville: pseudocount and normalisation over the shift axis
        pc = np.percentile(lr, 25, axis=0)
        rn = (lr + pc) / (lr + pc).sum(0)
        an = (la + pc) / (la + pc).sum(0)
        return ((kl(rn, an) + kl(an, rn)) / 2).mean(0)
    raise AssertionError(stat)


def random_predictions(rng, n_shifts, length=20, n_tracks=5):
    ref = rng.gamma(0.8, 2.0, size=(n_shifts, length, n_tracks)) + 0.01
    alt = ref * rng.lognormal(0.0, 0.5, size=ref.shape)
    return ref, alt


@pytest.fixture
def unrounded(monkeypatch):
    """The reference's statistics before float16 clipping and conversion."""
    monkeypatch.setattr(hound_reference, "_half", lambda values: np.asarray(values, np.float64))


@pytest.mark.parametrize("n_shifts", [1, 3])
@pytest.mark.parametrize("stranded", [False, True])
def test_statistics_equal_direct_formulas(unrounded, n_shifts, stranded):
    rng = np.random.default_rng(n_shifts + 10 * stranded)
    collapse = collapse_matrix(PAIRS, 5) if stranded else None
    for _ in range(5):
        ref, alt = random_predictions(rng, n_shifts)
        got = score_stats(ref, alt, TRACK_STATS, collapse)
        for stat in TRACK_STATS:
            expected = direct(stat, ref, alt)
            if stranded and stat in ("D2", "logD2", "sqrtD2"):
                expected = np.sqrt(expected**2 @ collapse)
            elif stranded:
                expected = expected @ collapse
            np.testing.assert_allclose(got[stat], expected, rtol=1e-10, atol=1e-12, err_msg=stat)


def test_js_of_several_shifts_is_the_mean_of_each_shift_alone(unrounded):
    ref, alt = random_predictions(np.random.default_rng(3), 3)
    together = score_stats(ref, alt, ["JS"])["JS"]
    alone = [score_stats(ref[s : s + 1], alt[s : s + 1], ["JS"])["JS"] for s in range(3)]
    np.testing.assert_allclose(together, np.mean(alone, axis=0), rtol=1e-12)


def test_log_js_of_one_shift_is_zero(unrounded):
    ref, alt = random_predictions(np.random.default_rng(4), 1)
    assert np.all(score_stats(ref, alt, ["logJS"])["logJS"] == 0)


def test_identical_predictions_score_zero_and_sax_keeps_its_sign(unrounded):
    ref, _ = random_predictions(np.random.default_rng(5), 2)
    same = score_stats(ref, ref.copy(), TRACK_STATS)
    for stat in TRACK_STATS:
        assert np.all(same[stat] == 0), stat
    alt = ref.copy()
    alt[:, 7, 1] -= 5.0  # the largest change of track 1, a decrease
    alt[:, 3, 1] += 1.0
    np.testing.assert_allclose(score_stats(ref, alt, ["SAX"])["SAX"][1], -5.0)


def test_scores_are_clipped_to_float16():
    ref = np.full((1, 4, 2), 1.0)
    alt = ref.copy()
    alt[0, :, 0] = 1e6
    alt[0, :, 1] = 0.0
    scores = score_stats(ref, alt, ["SUM", "D1", "REF", "ALT"])
    assert scores["SUM"].dtype == np.float16
    assert scores["SUM"][0] == np.finfo(np.float16).max
    assert scores["SUM"][1] == -4
    assert scores["ALT"].shape == (1, 4, 2) and scores["ALT"][0, 0, 0] == np.finfo(np.float16).max


def test_ref_alt_sum_the_two_strands_per_bin():
    ref, alt = random_predictions(np.random.default_rng(6), 2)
    scores = score_stats(ref, alt, ["REF", "ALT"], collapse_matrix(PAIRS, 5))
    assert scores["REF"].shape == (2, 20, 3)
    np.testing.assert_allclose(scores["REF"][..., 0], ref[..., 0] + ref[..., 1], rtol=1e-3)
    np.testing.assert_allclose(scores["ALT"][..., 1], alt[..., 2], rtol=1e-3)
    np.testing.assert_allclose(scores["ALT"][..., 2], alt[..., 3] + alt[..., 4], rtol=1e-3)


def test_stitch_takes_the_plain_run_before_the_bin_and_the_compensated_from_it():
    runs = [np.full((6, 1), float(i)) for i in range(4)]  # shift 0: runs 0, 1; shift 1: 2, 3
    stitched = stitch(runs, 2, 4)
    assert stitched[0][:, 0].tolist() == [0, 0, 0, 0, 1, 1]
    assert stitched[1][:, 0].tolist() == [2, 2, 2, 2, 3, 3]


# --- (b) one-hot, alternate sequences, shifts ---------------------------------------------------


def as_text(code: np.ndarray) -> str:
    letters = []
    for row in code:
        hot = np.flatnonzero(row)
        assert len(hot) <= 1
        letters.append("ACGT"[hot[0]] if len(hot) else "N")
    return "".join(letters)


REF_TEXT = "ACGTACGTAC"


def test_one_hot_columns_and_unknown_bases():
    code = one_hot("ACGTNacgtx")
    assert code.dtype == bool and code.shape == (10, 4)
    assert as_text(code) == "ACGTNACGTN"
    assert code[0].tolist() == [True, False, False, False]
    assert code[3].tolist() == [False, False, False, True]


@pytest.mark.parametrize(
    ("offset", "ref", "alt", "expected"),
    [
        (3, "T", "G", "ACGGACGTAC"),  # a SNP sets its row
        (3, "TA", "GC", "ACGNACGTAC"),  # a two-base substitution only clears the first row
        (2, "G", "GTT", "ACGTTTACGT"),  # insertion after the shared base, the end falls off
        (2, "GT", "GCAA", "ACGCAATACG"),  # the REF's later bases stay after the inserted ones
        (2, "GTA", "G", "ACGCGTACNN"),  # deletion: the rest moves left, N-padded
        (2, "GTA", "GC", "ACGACGTACN"),  # the ALT's later bases are not used
        (2, "GTA", "T", REF_TEXT),  # indels whose first bases differ change nothing
        (2, "G", "TTT", REF_TEXT),
    ],
)
def test_alternate_sequences(offset, ref, alt, expected):
    ref_code = one_hot(REF_TEXT)
    assert REF_TEXT[offset : offset + len(ref)] == ref
    assert as_text(alt_one_hot(ref_code, offset, ref, alt)) == expected
    assert as_text(ref_code) == REF_TEXT  # the reference is not edited in place


def test_shifts_pad_with_zeros():
    code = one_hot(REF_TEXT)
    assert as_text(shift_one_hot(code, 2)) == "NNACGTACGT"
    assert as_text(shift_one_hot(code, -2)) == "GTACGTACNN"
    assert as_text(shift_one_hot(code, 0)) == REF_TEXT
    assert not shift_one_hot(code, 2)[:2].any()


# --- (c) windows --------------------------------------------------------------------------------


@pytest.fixture
def genome(tmp_path):
    rng = np.random.default_rng(7)
    sequences = {name: "".join(rng.choice(list("ACGT"), size=300)) for name in ("chr1", "chr2")}
    path = tmp_path / "genome.fa"
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in sequences.items()))
    pysam.faidx(str(path))
    return path, sequences


@pytest.mark.parametrize("pos", [1, 2, 40, 150, 300])
@pytest.mark.parametrize("seq_len", [64, 65])
def test_a_lone_variant_sits_at_the_window_middle_minus_one(genome, pos, seq_len):
    path, sequences = genome
    start = window_start([pos], seq_len)
    assert start == pos - seq_len // 2
    assert pos - 1 - start == seq_len // 2 - 1
    with pysam.FastaFile(str(path)) as fasta:
        text = window_text(fasta, "chr1", start, seq_len)
    assert len(text) == seq_len
    assert text[pos - 1 - start] == sequences["chr1"][pos - 1]
    for i, base in enumerate(text):
        genome_index = start + i
        inside = 0 <= genome_index < 300
        assert base == (sequences["chr1"][genome_index] if inside else "N")


def test_a_group_window_centres_on_the_floored_midpoint():
    assert window_start([100, 151], 64) == 125 - 32
    assert window_start([151, 100, 120], 64) == 125 - 32


def test_groups_follow_the_first_record_and_the_chromosome(genome, tmp_path):
    vcf = tmp_path / "group.vcf"
    rows = [("1", 10), ("chr1", 50), ("chr1", 109), ("chr1", 110), ("chr1", 150), ("2", 151)]
    vcf.write_text(
        "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
        + "".join(f"{c}\t{p}\t.\tA\tC\t.\t.\t.\n" for c, p in rows)
    )
    records = read_records(vcf)
    assert [r.rsid for r in records][:2] == ["chr1:10", "chr1:50"]  # baskerville adds 'chr'
    assert [r.chrom for r in records] == ["chr1"] * 5 + ["chr2"]
    assert group_records(records, 1000, 0.1) == [[0, 1, 2], [3, 4], [5]]
    assert group_records(records, 1000, 0.0) == [[i] for i in range(6)]


# --- targets and untransform --------------------------------------------------------------------


def write_targets(path, rows, untransform=True):
    columns = ["identifier", "strand_pair", "description"]
    if untransform:
        columns += ["clip_soft", "scale", "sum_stat"]
    lines = ["\t".join(["", *columns])]
    for row in rows:
        lines.append("\t".join(str(v) for v in row[: len(columns) + 1]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_targets_pairs_by_row_and_strand_sums(tmp_path):
    rows = [
        (4, "a+", 5, "d", 1, 1, "sum"),
        (5, "a-", 4, "d", 1, 1, "sum"),
        (10, "u", 10, "d", 1, 1, "sum"),
        (7, "b-", 8, "d", 1, 1, "sum"),
        (8, "b+", 7, "d", 1, 1, "sum"),
    ]
    table = read_target_table(write_targets(tmp_path / "t.tsv", rows))
    assert table.model_tracks.tolist() == [4, 5, 10, 7, 8]
    assert table.pair_rows.tolist() == [1, 0, 2, 4, 3]
    assert table.collapsed_ids == ["a+", "u", "b+"]
    np.testing.assert_array_equal(table.collapse, collapse_matrix([(0, 1), (2,), (3, 4)], 5))


def test_untransform_by_hand(tmp_path):
    rows = [(0, "x", 0, "d", 2.0, 0.5, "sum_sqrt"), (1, "y", 1, "d", 2.0, 0.5, "sum")]
    table = read_target_table(write_targets(tmp_path / "t.tsv", rows)).table
    preds = np.array([[3.0, 3.0], [1.5, 1.5]], dtype=np.float32)
    out = untransform_prediction(preds, table)
    assert out.dtype == np.float64
    # 3 > clip_soft 2: 2 - 1 + (3 - 2 + 1)^2 = 5; sqrt track: (5 + 1)^2 - 1 = 35
    assert out.tolist() == [[35.0, 5.0], [(1.5 + 1) ** 2 - 1, 1.5]]
    assert untransform_prediction(preds, table, unscale=True).tolist()[0] == [70.0, 10.0]
    # -u: 3 / scale 0.5 = 6 > 2: 2 + (6 - 2)^2 = 18; sqrt track 18^(4/3); times 0.5 back
    old = untransform_prediction(preds, table, old=True)
    np.testing.assert_allclose(old[0], [18 ** (4 / 3) * 0.5, 9.0], rtol=1e-15)
    np.testing.assert_allclose(old[1], [3.0 ** (4 / 3) * 0.5, 1.5], rtol=1e-15)
    assert untransform_prediction(preds, table, unscale=True, old=True).tolist()[0][1] == 18.0


# --- a small run through a toy model ------------------------------------------------------------

SEQ_LEN, STRIDE, CROP = 64, 8, 8


class BaseCounts:
    """Per bin of the cropped window: the count of A (track 0) and of T (track 1)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        counts = x[0, CROP : SEQ_LEN - CROP][:, [0, 3]]
        return counts.reshape(-1, STRIDE, 2).sum(1)[None]


def test_rc_ensemble_reverses_and_swaps_partners():
    model = BaseCounts()
    code = one_hot("".join(np.random.default_rng(8).choice(list("ACGTN"), size=SEQ_LEN)))
    forward = predict(model, code, np.array([0, 1]), None, rc=False)
    paired = predict(model, code, np.array([0, 1]), np.array([1, 0]), rc=True)
    np.testing.assert_array_equal(paired, forward)  # A on + is T on -: an equivariant pair
    unpaired = predict(model, code, np.array([0, 1]), None, rc=True)
    np.testing.assert_array_equal(unpaired, (forward + forward[:, ::-1]) / 2)
    assert predict(model, code, np.array([1]), None, rc=False)[:, 0].tolist() == (
        forward[:, 1].tolist()
    )


def test_a_small_run(genome, tmp_path):
    path, sequences = genome
    seq = sequences["chr1"]
    p = 100  # 1-based
    base = seq[p - 1]
    other = next(b for b in "CG" if b != base)
    insertion_base = seq[199]
    records = [
        ("chr1", p, "s1", base, other),  # the genome's base first
        ("chr1", p, ".", other, base),  # the same variant written the other way round: flipped
        ("chr1", 200, "s3", insertion_base, insertion_base + "AAAA"),
        ("chr1", 250, "s4", seq[249:252], seq[249]),
    ]
    vcf = tmp_path / "small.vcf"
    vcf.write_text(
        "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
        + "".join(f"{c}\t{q}\t{i}\t{r}\t{a}\t.\t.\t.\n" for c, q, i, r, a in records)
    )
    targets = write_targets(
        tmp_path / "t.tsv", [(0, "A", 0, "a"), (1, "T", 1, "t")], untransform=False
    )
    geometry = {"seq_len": SEQ_LEN, "stride": STRIDE, "crop": CROP}
    stats = ["SUM", "D1", "REF", "ALT"]
    out = hound_scores(vcf, path, BaseCounts(), targets, stats=stats, untransform=False, **geometry)
    assert out["snp"].tolist() == ["s1", "chr1:100", "s3", "s4"]
    assert out["flipped"].tolist() == [False, True, False, False]
    assert out["ref_allele"][1] == other and out["alt_allele"][1] == base  # the VCF's own
    assert out["target_ids"].tolist() == ["A", "T"]
    assert out["SUM"].shape == (4, 2) and out["REF"].shape == (4, 1, 6, 2)

    expected = np.array([-(base == "A"), -(base == "T")], dtype=np.float16)
    np.testing.assert_array_equal(out["SUM"][0], expected)  # one base fewer of the REF's kind
    np.testing.assert_array_equal(out["SUM"][1], -out["SUM"][0])  # swapped back after the flip
    np.testing.assert_array_equal(out["REF"][1], out["ALT"][0])
    np.testing.assert_array_equal(out["D1"][1], out["D1"][0])

    # the insertion of AAAA is scored against the alternate shifted back by 4: the window's
    # bases outside the variant line up again, so only the four A's and the flanks move
    assert out["SUM"][2, 0] > 0
    shifted = hound_scores(
        vcf, path, BaseCounts(), targets, stats=stats, untransform=False, shifts=(0, 1), **geometry
    )
    assert shifted["REF"].shape == (4, 2, 6, 2)
    np.testing.assert_array_equal(shifted["REF"][3][0], out["REF"][3][0])
