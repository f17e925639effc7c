"""Seq-to-signal maps and the level fit: each batch form equals its per-read definition, and
the features written through either are the same."""

from __future__ import annotations

import kennel.io.kmers as kmers_module
import kennel.trna.extract as extract_module
import numpy as np
import pytest
from kennel.trna import signal_maps
from kennel.trna.extract import spec_for
from kennel.trna.signal_maps import (
    ReadInput,
    _map_cost,
    expected_levels,
    fit_levels,
    fit_levels_per_read,
    map_costs,
    move_table_map_per_read,
    move_table_maps,
    row_medians,
)

from tests.conftest import extract_shards


@pytest.mark.parametrize("k", [3, 5, 9])
def test_a_batch_s_expected_levels_are_each_read_s_k_mer_lookups(tmp_path, k):
    """Looked up for a whole batch at once, each base's level is its own read's k-mer's, never
    one spanning two reads; the ends take the nearest full k-mer's (the reference: the
    simulator's read-by-read dictionary lookup of the table's text, kennel.io.kmers)."""
    import itertools

    import escapepod

    rng = np.random.default_rng(k)
    kmers = ["".join(bases) for bases in itertools.product("ACGT", repeat=k)]
    levels = dict(zip(kmers, rng.normal(100, 20, len(kmers)).astype(np.float32), strict=True))
    path = tmp_path / "levels.tsv"
    path.write_text("".join(f"{kmer}\t{level}\n" for kmer, level in levels.items()))
    table = escapepod.KmerTable.from_file(str(path))
    sequences = ["".join(rng.choice(list("ACGT"), length)) for length in (k, k + 1, 30, 77, 31)]

    batch = expected_levels(table, sequences, k)
    with pytest.raises(ValueError, match="shorter than the k-mer"):
        expected_levels(table, [*sequences, sequences[0][: k - 1]], k)

    reference = kmers_module.read_kmer_levels(path)
    assert len(batch) == len(sequences)
    for sequence, got in zip(sequences, batch, strict=True):
        want = np.asarray(kmers_module.expected_levels(sequence, reference), np.float32)
        np.testing.assert_array_equal(got, want)


def test_batched_level_fit_equals_the_per_read_fit():

    rng = np.random.default_rng(5)
    n, n_bases = 300, 120
    lengths = rng.integers(5, n_bases + 1, n)  # some reads too short to fit at all
    expected = rng.normal(size=(n, n_bases))
    means = (expected - rng.normal(0.2, 0.1, (n, 1))) / rng.uniform(0.5, 2, (n, 1))
    means += rng.normal(0, 0.05, means.shape)
    outliers = rng.random(means.shape) < 0.05
    means[outliers] += rng.normal(0, 3, outliers.sum())
    means[rng.random(means.shape) < 0.02] = np.nan  # unresolved spans
    first = rng.integers(0, n_bases, n)
    last = first + rng.integers(1, 30, n)
    for i in range(n):
        means[i, lengths[i] :] = np.nan
    scale, shift = fit_levels(means, expected, lengths, first, last)
    for i in range(n):
        expected_scale, expected_shift = fit_levels_per_read(
            means[i, : lengths[i]], expected[i, : lengths[i]], slice(first[i], last[i])
        )
        np.testing.assert_allclose(
            [scale[i], shift[i]], [expected_scale, expected_shift], rtol=1e-9, atol=1e-12
        )
    assert (lengths < 10).any() and ((scale == 1) & (shift == 0)).any()


def test_features_equal_those_of_the_per_read_fit(
    trna_sim, sharded, features, tmp_path, monkeypatch
):
    """The whole extraction with the batched fit against the same with the per-read one."""
    from kennel.trna.features import FeatureFile

    monkeypatch.setattr(extract_module, "fit_levels", signal_maps.fit_levels_read_by_read)
    reference, _ = extract_shards(sharded, trna_sim, tmp_path / "per_read")
    for batched_path, reference_path in zip(features, reference, strict=True):
        with FeatureFile(batched_path) as batched, FeatureFile(reference_path) as per_read_file:
            a, b = next(batched.batches(len(batched))), next(per_read_file.batches(len(batched)))
        for name in ("signal", "bases"):
            ours, theirs = getattr(a, name).astype(np.float32), getattr(b, name).astype(np.float32)
            ulp = np.spacing(np.abs(theirs).astype(np.float16)).astype(np.float32)
            assert (np.abs(ours - theirs) <= ulp).all(), name  # float16 rounding at most
        np.testing.assert_allclose(a.scale, b.scale, rtol=1e-5)
        np.testing.assert_allclose(a.shift, b.shift, rtol=1e-5, atol=1e-6)


def test_batched_move_table_maps_equal_the_per_read_ones(trna_sim, sharded):
    """A shard's reads and synthetic ones (strides, no moves, a count that misses SEQ's, a
    trim): each read's boundaries from the batch equal its own, None where they were None."""
    from kennel.trna.extract import read_inputs

    rng = np.random.default_rng(11)
    synthetic = []
    for index in range(40):
        bases = int(rng.integers(0, 30))
        blocks = rng.random(bases * 3 + 5) < 0.4
        blocks[0] = index % 5 != 0  # some tables start without a move
        stride = int(rng.choice([5, 6, 10]))
        n_moves = int(blocks.sum())
        sequence = "A" * (n_moves if index % 7 else n_moves + 1)  # a seventh do not match
        trimmed = int(rng.integers(0, 50))
        n_samples = trimmed + stride * len(blocks) + int(rng.integers(0, 9))
        moves = np.concatenate([[stride], blocks]).astype(np.int8)
        synthetic.append(ReadInput(f"r{index}", sequence, moves, trimmed, n_samples, 0))
    # a table with no moves, one with a stride and no blocks, and an empty mv tag, among others
    stride_only = np.array([5], np.int8)
    no_moves = np.array([5, 0, 0, 0], np.int8)
    synthetic[3:3] = [
        ReadInput("no_moves", "", no_moves, 0, 20, 0),
        ReadInput("no_moves_seq", "A", no_moves, 0, 20, 0),
        ReadInput("stride_only", "", stride_only, 2, 9, 0),
    ]
    spec = spec_for(trna_sim["kmer_table"])
    shard = [
        read
        for batch, _ in read_inputs(sharded.bams[0], trna_sim["reference"], spec)
        for read in batch
    ]
    for reads in (synthetic, shard, synthetic[:1], []):
        batched = move_table_maps(reads)
        assert len(batched) == len(reads)
        for read, ours in zip(reads, batched, strict=True):
            theirs = move_table_map_per_read(read, read.n_samples - read.trimmed)
            assert (ours is None) == (theirs is None), read.read_id
            if theirs is not None:
                assert ours.dtype == theirs.dtype
                np.testing.assert_array_equal(ours, theirs, err_msg=read.read_id)
    assert any(m is None for m in move_table_maps(synthetic))
    no_stride = ReadInput("r", "ACGT", np.zeros(0, np.int8), 0, 10, 0)  # an empty mv tag
    assert move_table_maps([synthetic[1], no_stride])[1] is None
    assert all(m is not None for m in move_table_maps(shard))


def test_features_equal_those_of_the_per_read_move_table_maps(
    trna_sim, sharded, features, tmp_path, monkeypatch
):
    """The whole extraction with the batched move-table maps against the per-read ones."""
    from kennel.trna.features import FeatureFile

    def per_read(reads):
        return [move_table_map_per_read(read, read.n_samples - read.trimmed) for read in reads]

    monkeypatch.setattr(extract_module, "move_table_maps", per_read)
    reference, _ = extract_shards(sharded, trna_sim, tmp_path / "per_read")
    for batched_path, reference_path in zip(features, reference, strict=True):
        with FeatureFile(batched_path) as batched, FeatureFile(reference_path) as per_read_file:
            a, b = next(batched.batches(len(batched))), next(per_read_file.batches(len(batched)))
            assert batched.counts == per_read_file.counts
        assert len(a) == len(b) > 0
        for name in ("read_id", "signal", "bases", "boundaries", "chunk_start", "scale", "shift"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_batched_map_costs_equal_the_per_read_cost():

    rng = np.random.default_rng(11)
    segments, maps, levels = [], [], []
    for i in range(200):
        n_bases = int(rng.integers(1, 60))
        dwell = rng.integers(1, 25, n_bases)
        if i % 17 == 0:
            dwell[rng.integers(n_bases)] = 0  # an emptied base: infinite cost
        boundaries = np.concatenate([[0], np.cumsum(dwell)])
        signal = rng.normal(size=int(boundaries[-1])).astype(np.float32) * (i % 5 + 1)
        if i % 23 == 0:
            signal[:] = 1.5  # every base's mean the same: a degenerate fit
        segments.append(signal)
        maps.append(boundaries)
        levels.append(rng.normal(size=n_bases))
    expected = np.array(
        [_map_cost(s, m, e) for s, m, e in zip(segments, maps, levels, strict=True)]
    )
    ours = map_costs(segments, maps, levels)
    assert np.isinf(expected).sum() > 5
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(ours[finite], expected[finite], rtol=1e-9, atol=1e-9)


def test_checked_features_equal_those_of_the_per_read_choice(
    trna_sim, sharded, tmp_path, monkeypatch
):
    """refine checked, whole extraction: batched map costs against the per-read ones."""
    from dataclasses import replace

    from kennel.trna.features import FeatureFile

    spec = replace(spec_for(trna_sim["kmer_table"]), refine="checked")
    batched, batched_counts = extract_shards(sharded, trna_sim, tmp_path / "batched", spec=spec)
    monkeypatch.setattr(extract_module, "choose_maps", signal_maps.choose_maps_per_read)
    per_read, per_read_counts = extract_shards(sharded, trna_sim, tmp_path / "per_read", spec=spec)
    assert batched_counts == per_read_counts
    assert sum(c["refine_accepted"] + c["refine_rejected"] for c in batched_counts) > 100
    for ours_path, reference_path in zip(batched, per_read, strict=True):
        with FeatureFile(ours_path) as ours_file, FeatureFile(reference_path) as reference_file:
            a = next(ours_file.batches(len(ours_file)))
            b = next(reference_file.batches(len(ours_file)))
        for name in ("signal", "bases", "boundaries", "chunk_start", "scale", "shift"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_row_medians_equal_numpy_nanmedian():
    import warnings

    rng = np.random.default_rng(5)
    for trial in range(100):
        shape = (int(rng.integers(1, 60)), int(rng.integers(1, 90)))
        values = rng.normal(size=shape) * rng.uniform(0.1, 100)
        if trial % 3 == 0:
            values = np.round(values)  # ties
        use = rng.uniform(size=shape) < rng.uniform(0, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows
            expected = np.nanmedian(np.where(use, values, np.nan), axis=1)
        np.testing.assert_array_equal(row_medians(values, use), expected)
