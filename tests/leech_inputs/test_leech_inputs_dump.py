"""kennel's leech inputs against the tensors leech 0.16.0 itself fed the tcndwell model."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from kennel.errors import KennelError
from kennel.trna.leech_chunks import expand_sequence
from kennel.trna.leech_inputs import extract_leech_chunks
from kennel.trna.leech_levels import LevelTable, encode_bases
from kennel.trna.leech_reads import motif_hits
from kennel.trna.leech_spec import LeechInputSpec

FEATURE_TOLERANCE = 1e-5


def test_same_chunks_in_leech_order(leech_chunks, leech_dump):
    np.testing.assert_array_equal(leech_chunks.read_id, leech_dump["read_id"])
    np.testing.assert_array_equal(leech_chunks.base_idx, leech_dump["base_idx"])
    np.testing.assert_array_equal(leech_chunks.junction_indel, leech_dump["junction_indel"])
    np.testing.assert_array_equal(leech_chunks.junction_mapped, leech_dump["junction_mapped"])


def test_signal_bit_for_bit(leech_chunks, leech_dump):
    assert leech_chunks.signal.dtype == np.float32
    assert leech_chunks.signal.shape == leech_dump["signal"].shape
    assert np.array_equal(leech_chunks.signal, leech_dump["signal"])


def test_expanded_sequence_bit_for_bit(leech_chunks, leech_dump):
    assert leech_chunks.sequence.shape == (len(leech_chunks), 400)
    onehot = leech_chunks.sequence_onehot()
    assert onehot.dtype == np.uint8
    assert np.array_equal(onehot, leech_dump["sequence"])
    # batches of rows expand like the whole
    assert np.array_equal(leech_chunks.sequence_onehot(slice(3, 9)), leech_dump["sequence"][3:9])


def test_features_within_tolerance(leech_chunks, leech_dump):
    assert leech_chunks.features.shape == leech_dump["features"].shape
    difference = np.abs(leech_chunks.features - leech_dump["features"])
    assert difference.max() <= FEATURE_TOLERANCE, difference.max(axis=(0, 2))


def test_a_wide_feature_window_holds_leechs_features_in_its_middle(
    leech_config, leech_reads, leech_signals, level_table, leech_dump
):
    """A TCN trained on bases -7..+7 reads them all: each chunk's middle 11 columns are the
    features leech computed for the fixture's -5..+5 model, its outer ones the neighbours'."""
    spec = LeechInputSpec.from_config(
        {**leech_config, "feature_start": -7, "feature_end": 7}, level_table.sha256
    )
    wide = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    assert wide.features.shape[2] == 15
    difference = np.abs(wide.features[:, :, 2:13] - leech_dump["features"])
    assert difference.max() <= FEATURE_TOLERANCE
    assert np.abs(wide.features[:, :, [0, 1, 13, 14]]).max() > 0  # not padding alone


def test_reads_without_chunks_are_those_missing_from_the_pod5(
    leech_reads, leech_signals, leech_chunks
):
    reads, _ = leech_reads
    missing = [read.read_id for read in reads if read.read_id not in leech_signals]
    assert len(missing) == 6  # the simulator's no_signal fate
    assert leech_chunks.skipped_read_id == missing
    assert set(leech_chunks.skipped_reason) == {"no_signal"}
    assert len(leech_chunks) + len(missing) == len(reads)


def test_extract_jobs_driver_gives_the_same_chunks(leech_dir, leech_spec, leech_chunks):
    """kennel extract's own path (batches of reads through the ordered worker pool, signals
    fetched per task) gives the chunks of one plain call over every read, in the same order."""
    from kennel.trna.leech_extract import extract_leech_batches
    from kennel.trna.threads import ThreadPlan

    from tests.leech_inputs.conftest import KMER_TABLE

    data = leech_dir / "data"
    parts = list(
        extract_leech_batches(
            data / "fx.bam", [data / "fx.pod5"], data / "reference.fa", KMER_TABLE, leech_spec,
            ThreadPlan(extraction_workers=1, rayon_threads=1, feed_reserve=0),
        )
    )  # fmt: skip
    assert len(parts) > 1  # several tasks, so their order is what is tested
    for name in ("read_id", "signal", "sequence", "features"):
        joined = np.concatenate([getattr(part, name) for part in parts])
        assert np.array_equal(joined, getattr(leech_chunks, name)), name
    skipped = [read_id for part in parts for read_id in part.skipped_read_id]
    assert skipped == leech_chunks.skipped_read_id


def test_one_signal_channel_is_the_normalised_signal(
    leech_reads, leech_signals, leech_spec, level_table, leech_dump
):
    reads = leech_reads[0][:30]
    spec = dataclasses.replace(leech_spec, signal_channels=1)
    chunks = extract_leech_chunks(reads, leech_signals, spec, level_table)
    rows = np.isin(leech_dump["read_id"], chunks.read_id)
    assert chunks.signal.shape == (rows.sum(), 1, 400)
    assert np.array_equal(chunks.signal[:, 0], leech_dump["signal"][rows, 0])


def test_base_onehot_is_the_reference_window_around_the_focus(
    leech_config, leech_reads, leech_signals, level_table
):
    spec = LeechInputSpec.from_config({**leech_config, "seq_encoding": "base_onehot"})
    reads = leech_reads[0][:30]
    chunks = extract_leech_chunks(reads, leech_signals, spec, level_table)
    by_id = {read.read_id: read for read in reads}
    onehot = chunks.sequence_onehot()
    assert onehot.shape == (len(chunks), 4, 11)
    for row, (read_id, focus) in enumerate(zip(chunks.read_id, chunks.base_idx, strict=True)):
        reference = by_id[read_id].reference
        for column, position in enumerate(range(focus - 5, focus + 6)):
            base = reference[position] if 0 <= position < len(reference) else "N"
            expected = [float(base == b) for b in "ACGT"]
            assert onehot[row, :, column].tolist() == expected


def test_kmer_codes_expand_like_a_plain_loop():
    rng = np.random.default_rng(3)
    kmers = rng.integers(0, 5, size=(7, 9))  # 4 = no base
    codes = (kmers @ 5 ** np.arange(8, -1, -1)).astype(np.int32)
    codes = np.concatenate([codes, [-1]])[None, :]  # one chunk, 8 samples
    onehot = expand_sequence(codes, "signal_kmer")
    assert onehot.shape == (1, 36, 8)
    for sample in range(8):
        for position in range(9):
            for base in range(4):
                hit = sample < 7 and kmers[sample, position] == base
                assert onehot[0, 4 * position + base, sample] == hit


def test_expected_levels_like_a_dictionary_lookup(leech_reads, kmer_levels, level_table):
    sequence = leech_reads[0][0].reference[:40] + "NACGTACGTACG"
    expected = np.zeros(len(sequence), np.float32)
    for start in range(len(sequence) - 8):
        level = kmer_levels.levels.get(sequence[start : start + 9])
        if level is not None:
            expected[start + 4] = level
    assert np.array_equal(level_table.expected(encode_bases(sequence), 4), expected)


def test_a_table_other_than_the_models_is_refused(leech_reads, leech_signals, leech_spec):
    other = LevelTable(k=9, levels=np.zeros(4**9, np.float32), sha256="0" * 64)
    with pytest.raises(KennelError, match="kmer_table_sha256") as error:
        extract_leech_chunks(leech_reads[0][:1], leech_signals, leech_spec, other)
    assert "\n" not in str(error.value)


def test_inputs_travel_to_worker_processes(leech_reads, leech_spec, leech_chunks):
    read = leech_reads[0][0]
    again = pickle.loads(pickle.dumps(read))
    assert again.read_id == read.read_id and np.array_equal(again.cigar, read.cigar)
    assert pickle.loads(pickle.dumps(leech_spec)) == leech_spec
    chunks = pickle.loads(pickle.dumps(leech_chunks))
    assert np.array_equal(chunks.sequence, leech_chunks.sequence)


def test_every_hit_in_the_dump_is_the_first_motif_hit(leech_reads, leech_spec, leech_dump):
    by_id = {read.read_id: read for read in leech_reads[0]}
    for read_id, focus in zip(leech_dump["read_id"], leech_dump["base_idx"], strict=True):
        hits = motif_hits(by_id[read_id], leech_spec)
        assert hits[0].base_idx == focus


def test_signals_at_odds_with_their_tags_are_skipped(
    leech_reads, leech_signals, leech_spec, level_table
):
    read = next(read for read in leech_reads[0] if read.read_id in leech_signals)
    signal = leech_signals[read.read_id]
    broken = {
        "short_signal": dataclasses.replace(read, num_samples=len(signal) + 1),
        "no_mapped_signal": dataclasses.replace(read, moves=np.zeros_like(read.moves)),
    }
    for reason, bad in broken.items():
        chunks = extract_leech_chunks([bad], leech_signals, leech_spec, level_table)
        assert len(chunks) == 0 and chunks.skipped_reason == [reason]
    picoamps = {read.read_id: signal.astype(np.float32)}
    with pytest.raises(KennelError, match="int16"):
        extract_leech_chunks([read], picoamps, leech_spec, level_table)


@pytest.mark.parametrize(
    ("encoding", "high", "width"), [("signal_kmer", 5**9, 400), ("base_onehot", 5, 11)]
)
def test_classify_expands_codes_on_the_device_as_the_host_does(encoding, high, width):
    """classify expands the compact codes inside its module (on the GPU, where it runs); it must
    give the host expansion that reproduced leech's one-hot bit for bit."""
    import torch
    from kennel.trna.leech_classify import SequenceExpansion

    rng = np.random.default_rng(5)
    codes = rng.integers(0, high, size=(6, width)).astype(np.int32 if high > 5 else np.uint8)
    if encoding == "signal_kmer":
        codes[:, -3:] = -1  # samples no base covers
    with torch.inference_mode():
        device = SequenceExpansion(encoding)(torch.from_numpy(codes)).numpy()
    host = expand_sequence(codes, encoding)
    assert device.dtype == np.float32 and np.array_equal(device, host.astype(np.float32))
