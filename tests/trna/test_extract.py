"""Extraction: features agree with a plain-numpy recomputation, the anchor lands on the planted
motif, the class signal survives, thread splits, and bad inputs fail cleanly."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import h5py
import numpy as np
import pod5
import pysam
import pytest
from kennel.cli import main
from kennel.errors import KennelError
from kennel.io.pod5 import Pod5Set
from kennel.trna.extract import extract_shard, spec_for
from kennel.trna.features import (
    CHUNK_READS,
    READ_DATASETS,
    FeatureBatch,
    FeatureFile,
    write_features,
)
from kennel.trna.threads import feed_reserve, plan_threads

from tests.conftest import extract_shards, shard_outputs


def _truth(trna_sim, sample="s1"):
    with open(trna_sim[f"{sample}.truth.tsv"]) as handle:
        return {row["read_id"]: row for row in csv.DictReader(handle, delimiter="\t")}


def _all_features(paths):
    columns: dict[str, list] = {}
    for path in paths:
        with FeatureFile(path) as features:
            for batch in features.batches(10_000):
                for name in ("read_id", "bases", "sequence", "scale", "shift", "anchor"):
                    columns.setdefault(name, []).append(getattr(batch, name))
                for name in ("boundaries", "chunk_start", "signal"):
                    columns.setdefault(name, []).append(getattr(batch, name))
    return {name: np.concatenate(parts) for name, parts in columns.items()}


def test_every_shard_read_is_extracted_or_skipped_with_a_reason(sharded, features):
    for bam_path, path in zip(sharded.bams, features, strict=True):
        with pysam.AlignmentFile(str(bam_path)) as bam:
            expected = {r.query_name for r in bam.fetch(until_eof=True)}
        with FeatureFile(path) as f:
            extracted = {r.decode() for b in f.batches(1000) for r in b.read_id}
            skipped_ids, reasons = f.skipped()
            assert f.counts["extracted"] == len(extracted)
        assert extracted | {r.decode() for r in skipped_ids} == expected
        assert extracted.isdisjoint({r.decode() for r in skipped_ids})
        assert all(reason for reason in reasons)
        assert len(extracted) >= 0.9 * len(expected)


def test_feature_spec_is_recorded(trna_sim, features):
    with h5py.File(features[0]) as handle:
        assert handle["signal"].dtype == np.float16 and handle["bases"].dtype == np.float16
        assert handle["signal"].chunks[0] >= 64
    with FeatureFile(features[0]) as f:
        assert f.spec == spec_for(trna_sim["kmer_table"])
        assert f.spec.kmer_sha256 and f.spec.version == 1


def _plain_recomputation(read_id, record, picoamps, boundaries, scale, shift):
    """Dwell, mean and std of the window's bases with numpy only (median/MAD normalisation)."""
    trimmed = picoamps[record.get_tag("ts") : record.get_tag("ns")][::-1].astype(np.float64)
    median = np.median(trimmed)
    mad = 1.4826 * np.median(np.abs(trimmed - median))
    level_units = scale * (trimmed - median) / mad + shift
    dwell = np.diff(boundaries)
    means = np.array(
        [level_units[a:b].mean() for a, b in zip(boundaries[:-1], boundaries[1:], strict=True)]
    )
    stds = np.array(
        [level_units[a:b].std() for a, b in zip(boundaries[:-1], boundaries[1:], strict=True)]
    )
    return dwell, means, stds, level_units


def _move_table_map(record):
    moves = np.asarray(record.get_tag("mv"))
    stride, blocks = moves[0], moves[1:]
    n = record.get_tag("ns") - record.get_tag("ts")
    starts = stride * np.flatnonzero(blocks)  # time order, 3'→5'
    return n - np.append(starts, n)[::-1]  # reversed signal, 5'→3', one boundary per base + 1


def test_features_match_plain_numpy_for_a_handful_of_reads(trna_sim, sharded, features):
    spec = spec_for(trna_sim["kmer_table"])
    with pod5.Reader(sharded.pod5s[1]) as reader:
        picoamps = {str(r.read_id): r.signal_pa.copy() for r in reader.reads()}
    with pysam.AlignmentFile(str(sharded.bams[1])) as bam:
        records = {r.query_name: r for r in bam.fetch(until_eof=True)}
    with FeatureFile(features[1]) as f:
        refine_accepted = f.counts.get("refine_accepted", 0)
        batch = next(f.batches(8))
    for i, read_id in enumerate(r.decode() for r in batch.read_id):
        record = records[read_id]
        boundaries = batch.boundaries[i]
        if refine_accepted == 0:
            full_map = _move_table_map(record)
            anchor = batch.anchor[i]
            window = full_map[anchor - spec.upstream : anchor + spec.downstream + 2]
            np.testing.assert_array_equal(boundaries, window)
        dwell, means, stds, level_units = _plain_recomputation(
            read_id, record, picoamps[read_id], boundaries, batch.scale[i], batch.shift[i]
        )
        bases = batch.bases[i].astype(np.float64)
        np.testing.assert_array_equal(bases[:, 0], dwell)
        np.testing.assert_allclose(bases[:, 1], means, atol=0.02, rtol=0.01)
        np.testing.assert_allclose(bases[:, 2], stds, atol=0.02, rtol=0.02)
        np.testing.assert_allclose(bases[:, 4], bases[:, 1] - bases[:, 3], atol=0.02)
        start = batch.chunk_start[i]
        lo, hi = max(start, 0), min(start + spec.chunk_length, len(level_units))
        np.testing.assert_allclose(
            batch.signal[i, 0, lo - start : hi - start].astype(np.float64),
            level_units[lo:hi],
            atol=0.02,
            rtol=0.01,
        )


def test_anchor_lands_on_the_planted_motif(trna_sim, sharded, features):
    truth = _truth(trna_sim)
    records = {}
    for bam_path in sharded.bams:
        with pysam.AlignmentFile(str(bam_path)) as bam:
            records.update({r.query_name: r for r in bam.fetch(until_eof=True)})
    columns = _all_features(features)
    spec = spec_for(trna_sim["kmer_table"])
    for read_id, anchor, window in zip(
        columns["read_id"], columns["anchor"], columns["sequence"], strict=True
    ):
        read_id = read_id.decode()
        reference_anchor = int(truth[read_id]["anchor_reference_position"])
        pairs = dict(
            (ref, query) for query, ref in records[read_id].get_aligned_pairs(matches_only=True)
        )
        assert anchor == pairs[reference_anchor]
        assert window.decode()[spec.upstream - 2 : spec.upstream + 4] == "CCAGGC"


def test_class_signal_survives_in_level_and_dwell_features(trna_sim, features):
    """Per-class means at the anchor differ (levels and dwell), and far from it they do not."""
    truth = _truth(trna_sim)
    columns = _all_features(features)
    labels = np.array([truth[r.decode()]["label"] for r in columns["read_id"]])
    bases = columns["bases"].astype(np.float64)
    spec = spec_for(trna_sim["kmer_table"])
    near = slice(spec.upstream - 3, spec.upstream + 4)
    far = np.r_[0:4, spec.window - 4 : spec.window]

    def f_statistic(values):
        """One-way ANOVA F per window position: between-class over within-class variance."""
        groups = [values[labels == c] for c in np.unique(labels)]
        grand = values.mean(0)
        between = sum(len(g) * (g.mean(0) - grand) ** 2 for g in groups) / (len(groups) - 1)
        within = sum(((g - g.mean(0)) ** 2).sum(0) for g in groups) / (len(values) - len(groups))
        return between / within

    resid_f = f_statistic(bases[:, :, 4])
    dwell_f = f_statistic(np.log(bases[:, :, 0]))
    # F(3, ~280) exceeds 6 with p < 0.001 by chance; planted effects give far larger values
    assert resid_f[near].max() > 50 and resid_f[far].max() < 8
    assert dwell_f[near].max() > 8 and dwell_f[far].max() < 6, (dwell_f[near], dwell_f[far])


def _window_dwell_against_truth(trna_sim, paths):
    """Per extracted read: correlation and mean absolute difference (samples) between the
    window's dwell feature and the simulator's true dwell of the same bases."""
    truth = _truth(trna_sim)
    columns = _all_features(paths)
    spec = spec_for(trna_sim["kmer_table"])
    correlations, errors = [], []
    for read_id, anchor, bases in zip(
        columns["read_id"], columns["anchor"], columns["bases"], strict=True
    ):
        true_dwell = np.array(truth[read_id.decode()]["dwell"].split(","), dtype=np.float64)
        expected = true_dwell[anchor - spec.upstream : anchor + spec.downstream + 1]
        found = bases[:, 0].astype(np.float64)
        correlations.append(np.corrcoef(found, expected)[0, 1])
        errors.append(np.abs(found - expected).mean())
    return np.array(correlations), np.array(errors)


def test_dwell_features_follow_the_true_dwell(trna_sim, sharded, features, tmp_path, monkeypatch):
    """escapepod's refinement preset pulls boundaries toward the read's median dwell, which on
    RNA004-like reads (~30 samples a base) collapses bases. The window's dwell must still follow
    the truth with the default (refine off: the move table's boundaries) and with refine
    checked; the control shows that taking the preset's maps unchecked (always) destroys it."""
    correlations, errors = _window_dwell_against_truth(trna_sim, features)
    assert np.median(correlations) > 0.9 and np.median(errors) < 4, (correlations, errors)

    import kennel.trna.extract as extract_module

    def spec(mode):
        return spec_for(trna_sim["kmer_table"], refine=mode)

    checked, counts = extract_shards(sharded, trna_sim, tmp_path / "checked", spec=spec("checked"))
    correlations, errors = _window_dwell_against_truth(trna_sim, checked)
    assert np.median(correlations) > 0.9 and np.median(errors) < 4, (correlations, errors)
    assert sum(c["refine_accepted"] + c["refine_rejected"] for c in counts) > 0  # the DP ran

    unchecked, counts = extract_shards(sharded, trna_sim, tmp_path / "always", spec=spec("always"))
    correlations, errors = _window_dwell_against_truth(trna_sim, unchecked)
    assert np.median(correlations) < 0.5 and np.median(errors) > 8, (correlations, errors)

    # with refine off no DP runs at all
    def no_dp(*args, **kwargs):
        raise AssertionError("refine off ran the DP")

    monkeypatch.setattr(extract_module.escapepod, "refine_signal_map", no_dp)
    extract_shards(sharded, trna_sim, tmp_path / "off", spec=spec("off"))


def test_refine_off_equals_checked_where_checked_keeps_no_map(
    trna_sim, sharded, features, tmp_path
):
    """On the simulated reads checked refinement keeps (almost) no refined map, so its features
    equal refine off's read for read wherever the window's boundaries agree."""
    from kennel.trna.features import FeatureFile

    spec = spec_for(trna_sim["kmer_table"], refine="checked")
    checked, counts = extract_shards(sharded, trna_sim, tmp_path / "checked", spec=spec)
    for off_path, checked_path in zip(features, checked, strict=True):
        with FeatureFile(off_path) as off, FeatureFile(checked_path) as refined:
            a, b = next(off.batches(len(off))), next(refined.batches(len(refined)))
        same = (a.boundaries == b.boundaries).all(axis=1)
        assert same.mean() > 0.95
        for name in ("signal", "bases", "scale", "shift", "chunk_start"):
            assert np.array_equal(getattr(a, name)[same], getattr(b, name)[same]), name


@pytest.mark.parametrize(
    "threads, reserve, workers",
    [(1, 1, 1), (2, 1, 1), (4, 1, 3), (8, 2, 6), (16, 4, 12), (64, 4, 60)],
)
def test_thread_split(threads, reserve, workers):
    assert feed_reserve(threads) == reserve
    plan = plan_threads(threads, fused=True, environ={})
    assert (plan.extraction_workers, plan.feed_reserve, plan.rayon_threads) == (workers, reserve, 1)
    assert plan_threads(threads, fused=False, environ={}).extraction_workers == threads


def test_explicit_rayon_threads_win():
    assert plan_threads(16, fused=True, environ={"RAYON_NUM_THREADS": "3"}).rayon_threads == 3
    assert plan_threads(16, fused=True, environ={"RAYON_NUM_THREADS": "x"}).rayon_threads == 1


def test_skips_are_counted_not_fatal(trna_sim, sharded, tmp_path):
    """A read missing from the POD5 and reads whose contig has no motif are counted skips."""
    reference = tmp_path / "reference.fa"
    with pysam.FastaFile(str(trna_sim["reference"])) as fasta:
        names = list(fasta.references)
        with open(reference, "w") as out:
            for name in names:
                sequence = fasta.fetch(name)
                if name == names[0]:
                    sequence = sequence.replace("CCAGGCTTC", "CCAGTTTTC")  # motif gone
                out.write(f">{name}\n{sequence}\n")
    pysam.faidx(str(reference))
    other_pod5 = sharded.pod5s[1]  # holds none of shard 0's reads
    counts = extract_shard(
        sharded.bams[0], [other_pod5], reference, trna_sim["kmer_table"], tmp_path / "f.h5"
    )
    assert counts["extracted"] == 0 and counts["skipped:no_signal"] > 0
    counts = extract_shard(
        sharded.bams[0], [sharded.pod5s[0]], reference, trna_sim["kmer_table"], tmp_path / "g.h5"
    )
    assert counts["skipped:motif_not_found"] > 0 and counts["extracted"] > 0


def _extract_cli(trna_sim, sharded, output, **override):
    arguments = {
        "--bam": sharded.bams[0],
        "--pod5": sharded.pod5s[0],
        "--reference": trna_sim["reference"],
        "--kmer-table": trna_sim["kmer_table"],
        "--output": output,
        **override,
    }
    return main(["extract", *(str(x) for pair in arguments.items() for x in pair)])


@pytest.mark.parametrize(
    "table_text, message",
    [
        ("AAAAA\t0.1\nAAAAC\tnot-a-number\n", "line 2: level 'not-a-number' is not a finite"),
        ("AAAAA\t0.1\nAAAC\t0.2\n", "line 2: k-mer 'AAAC' is not 5 bases"),
        ("AAAAA\t0.1\n", "k-mer table has 1 k-mers, a full 5-mer table has 1024"),
        ("AAAAA 0.1\n", "line 1: expected 'kmer<TAB>level'"),
    ],
)
def test_malformed_kmer_table(trna_sim, sharded, tmp_path, capsys, table_text, message):
    table = tmp_path / "levels.tsv"
    table.write_text(table_text)
    output = tmp_path / "f.h5"
    assert _extract_cli(trna_sim, sharded, output, **{"--kmer-table": table}) == 2
    err = capsys.readouterr().err.strip()
    assert f"{table}: {message}" in err and len(err.splitlines()) == 1
    assert not output.exists() and not list(tmp_path.glob(".tmp-*"))


def test_corrupt_pod5_and_missing_contig_fail_cleanly(trna_sim, sharded, tmp_path, capfd):
    corrupt = tmp_path / "bad.pod5"
    corrupt.write_bytes(sharded.pod5s[0].read_bytes()[:3000])
    output = tmp_path / "f.h5"
    # capfd: a worker process's own output would show there too
    for threads in ("1", "2"):  # with workers too, the error is the main process's one line
        assert (
            _extract_cli(trna_sim, sharded, output, **{"--pod5": corrupt, "--threads": threads})
            == 2
        )
        err = capfd.readouterr().err
        assert f"{corrupt}: unreadable POD5" in err and len(err.splitlines()) == 1
    assert _extract_cli(trna_sim, sharded, output, **{"--motif-anchor": "20"}) == 2
    assert "motif anchor 20 lies outside motif" in capfd.readouterr().err
    reference = tmp_path / "other.fa"
    reference.write_text(">unrelated\nACGTACGTACGT\n")
    pysam.faidx(str(reference))
    for threads in ("1", "2"):  # found where the records are read: in a worker too
        arguments = {"--reference": reference, "--threads": threads}
        assert _extract_cli(trna_sim, sharded, output, **arguments) == 2
        err = capfd.readouterr().err
        assert "is not in the reference" in err and str(sharded.bams[0]) in err
        assert len(err.splitlines()) == 1
    assert not output.exists() and not list(tmp_path.glob(".tmp-*"))


def test_kmer_table_must_match_the_spec(trna_sim, sharded, tmp_path):
    spec = spec_for(trna_sim["kmer_table"])
    other = tmp_path / "other.tsv"
    lines = trna_sim["kmer_table"].read_text().splitlines(keepends=True)
    other.write_text("".join([lines[0].split("\t")[0] + "\t9.5\n", *lines[1:]]))
    with pytest.raises(KennelError, match="k-mer table differs from the feature spec"):
        extract_shard(
            sharded.bams[0], [sharded.pod5s[0]], trna_sim["reference"], other,
            tmp_path / "f.h5", spec=spec,
        )  # fmt: skip


@pytest.mark.slow
def test_real_reference_and_9mer_table(real_trna_sim, tmp_path):
    outputs = shard_outputs(tmp_path, 1)
    from kennel.trna.shard import shard_sample

    shard_sample(
        real_trna_sim["real.bam"], [real_trna_sim["real.pod5"]], real_trna_sim["reference"], outputs
    )
    counts = extract_shard(
        outputs.bams[0],
        [outputs.pod5s[0]],
        real_trna_sim["reference"],
        real_trna_sim["kmer_table"],
        tmp_path / "f.h5",
    )
    with FeatureFile(tmp_path / "f.h5") as f:
        assert f.spec.kmer_k == 9
        n_reads = sum(1 for _ in pysam.AlignmentFile(str(outputs.bams[0])).fetch(until_eof=True))
        assert counts["extracted"] >= 0.9 * n_reads
        batch = next(f.batches(64))
        # real 9-mer levels: the fit should map the signal onto them closely
        resid = batch.bases[:, :, 4].astype(np.float64)
        assert np.median(np.abs(resid)) < 0.5


def test_ragged_batches_are_written_whole_chunks_and_read_back_unchanged(features, tmp_path):
    """Batches of any size land in whole HDF5 chunks; the file reads back as written."""
    with FeatureFile(features[0]) as source:
        spec = source.spec
        whole = next(source.batches(len(source)))
        skipped_ids, reasons = source.skipped()
    sizes = [0, 5, CHUNK_READS + 44, 1, CHUNK_READS, 3 * CHUNK_READS]
    edges = np.cumsum([0, *sizes])
    rows = np.arange(edges[-1]) % len(whole)  # the fixture's reads, repeated to fill them
    whole = FeatureBatch(**{k: getattr(whole, k)[rows] for k in READ_DATASETS})
    pieces = []
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        piece = FeatureBatch(**{k: getattr(whole, k)[start:stop] for k in READ_DATASETS})
        piece.skipped_read_id = skipped_ids[start % 3 : start % 3 + 2]
        piece.skipped_reason = reasons[start % 3 : start % 3 + 2]
        pieces.append(piece)
    counts = write_features(tmp_path / "ragged.h5", iter(pieces), spec)

    assert counts["extracted"] == edges[-1]
    with FeatureFile(tmp_path / "ragged.h5") as written:
        back = next(written.batches(len(written)))
        for name in READ_DATASETS:
            np.testing.assert_array_equal(getattr(back, name), getattr(whole, name)[: edges[-1]])
        ids, why = written.skipped()
        np.testing.assert_array_equal(ids, np.concatenate([p.skipped_read_id for p in pieces]))
        np.testing.assert_array_equal(why, np.concatenate([p.skipped_reason for p in pieces]))
    with h5py.File(tmp_path / "ragged.h5") as handle:
        assert handle["signal"].chunks[0] == CHUNK_READS


def test_a_batch_of_another_row_shape_is_refused_not_reshaped(features, tmp_path):
    """Rows are appended through HDF5's own extent: rows of a different shape must fail the
    write, not reshape the rows already in the file."""
    with FeatureFile(features[0]) as source:
        spec = source.spec
        some = next(source.batches(3))
    narrow = FeatureBatch(**{k: getattr(some, k) for k in READ_DATASETS})
    narrow.signal = narrow.signal[:, :, : spec.chunk_length // 2]  # not the spec's chunk
    with pytest.raises(ValueError, match="signal: rows of"):
        write_features(tmp_path / "narrow.h5", iter([narrow]), spec)


def test_pod5_lookups_without_a_read_index_match_the_indexed_ones(sharded):
    """Extraction looks reads up in batches (no per-read index); answers must not change."""
    indexed = Pod5Set(sharded.pod5s)
    lazy = Pod5Set(sharded.pod5s, index_reads=False)
    assert lazy.reads is None
    wanted = list(indexed.reads)[::7]
    absent = ["not-a-uuid", "00000000-0000-4000-8000-000000000000"]
    found = lazy.signals([*absent[:1], *wanted, *absent[1:]], missing_ok=True)
    assert [read.read_id for read, _ in found] == wanted
    np.testing.assert_array_equal(lazy.sample_counts(wanted), indexed.sample_counts(wanted))
    for (read_a, signal_a), (read_b, signal_b) in zip(
        lazy.signals(wanted), indexed.signals(wanted), strict=True
    ):
        assert read_a.read_id == read_b.read_id
        assert read_a.run_info_index == read_b.run_info_index
        np.testing.assert_array_equal(signal_a, signal_b)
    with pytest.raises(KennelError, match=f"read {absent[1]}: not in the POD5"):
        lazy.signals([wanted[0], absent[1]])


def test_tasks_read_every_record_once_in_order_as_the_bam_has_it(trna_sim, sharded, monkeypatch):
    """A task is an offset and a count; the worker reads its own records from there. Together the
    tasks must read every record once, in file order, and each read's fields must be its
    record's (the anchor checked against pysam's own aligned pairs)."""
    from kennel.io.bam import CLASSIFIABLE, open_alignments, record_fate
    from kennel.trna import extract

    monkeypatch.setattr(extract, "RECORDS_PER_TASK", 7)  # many tasks, and a last short one
    spec = spec_for(trna_sim["kmer_table"])
    with pysam.AlignmentFile(str(sharded.bams[0])) as bam:
        records = list(bam.fetch(until_eof=True))
    assert len(records) % 7, "the shard should end with a short task"
    ranges = list(extract.task_ranges(sharded.bams[0]))
    assert [count for _, count in ranges] == [7] * (len(records) // 7) + [len(records) % 7]
    source = extract.RecordSource.of(sharded.bams[0], trna_sim["reference"], spec)
    anchors = source.anchors
    by_name = {record.query_name: record for record in records}
    seen, extracted = [], []
    with open_alignments(sharded.bams[0]) as bam:
        for start, count in reversed(ranges):  # each task seeks: any order works
            reads, skipped = extract.task_inputs(bam, start, count, source)
            for read in reads:
                record = by_name[read.read_id]
                assert read.sequence == record.query_sequence
                assert read.moves.dtype == np.int8
                np.testing.assert_array_equal(read.moves, np.asarray(record.get_tag("mv")))
                assert (read.trimmed, read.n_samples) == (
                    record.get_tag("ts"),
                    record.get_tag("ns"),
                )
                query_at = {r: q for q, r in record.get_aligned_pairs(matches_only=True)}
                assert read.anchor == query_at[anchors[record.reference_name]]
            seen += [read.read_id for read in reads] + [read_id for read_id, _ in skipped]
            extracted[:0] = [read.read_id for read in reads]
    assert len(seen) == len(set(seen))  # no record read twice
    assert sorted(seen) == sorted(r.query_name for r in records if record_fate(r) == CLASSIFIABLE)
    chosen = set(extracted)
    assert extracted == [r.query_name for r in records if r.query_name in chosen]
    assert extracted
    start, count = ranges[-1]  # as if the file had lost a record since it was walked
    with open_alignments(sharded.bams[0]) as bam, pytest.raises(KennelError, match="shorter"):
        extract.task_inputs(bam, start, count + 1, source)


def test_offset_tasks_through_workers_give_one_worker_s_file(
    trna_sim, sharded, tmp_path, monkeypatch
):
    """Many small tasks, some run by a worker process from their offsets and some by the job's
    own process: the features file is the one a single process writes, dataset for dataset."""
    from kennel.trna import extract

    monkeypatch.setattr(extract, "RECORDS_PER_TASK", 7)  # read where the tasks are cut
    paths = {}
    for threads in (1, 2):
        paths[threads] = tmp_path / f"{threads}.h5"
        extract.extract_shard(
            sharded.bams[0], [sharded.pod5s[0]], trna_sim["reference"], trna_sim["kmer_table"],
            paths[threads], threads=threads,
        )  # fmt: skip
    with h5py.File(paths[1]) as one, h5py.File(paths[2]) as two:
        names = []
        one.visititems(lambda name, item: isinstance(item, h5py.Dataset) and names.append(name))
        assert len(names) > 5 and one["read_id"].shape[0] > 14
        for name in names:
            np.testing.assert_array_equal(one[name][()], two[name][()], err_msg=name)
        assert dict(one.attrs) == dict(two.attrs)


RESIDENT_POD5_PAGES = """
import sys
from kennel.io import pod5 as kennel_pod5

path, mode = sys.argv[1], sys.argv[2]
if mode == "keep":
    kennel_pod5.release_mapped_pages = lambda paths: None
elif mode == "many":  # as among a run's thousands of files: the other way through maps
    release = kennel_pod5.release_mapped_pages
    others = {f"/elsewhere/{index}.pod5" for index in range(kennel_pod5._FIND_AT_MOST)}
    kennel_pod5.release_mapped_pages = lambda paths: release(paths | others)
pod5s = kennel_pod5.Pod5Set([path], index_reads=False)
import escapepod
ids = escapepod.Reader(path).read_ids()
for start in range(0, len(ids), 64):
    pod5s.signals(ids[start : start + 64])
resident = 0
mapping = False
for line in open("/proc/self/smaps"):
    fields = line.split()
    if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
        mapping = len(fields) >= 6 and fields[5] == path
    elif mapping and fields[0] == "Rss:":
        resident += int(fields[1])
print(resident)
"""


def _resident_pod5_kib(path, mode: str) -> int:
    command = [sys.executable, "-c", RESIDENT_POD5_PAGES, str(path), mode]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.parametrize("mode", ["release", "many"])
def test_fetched_signal_pages_do_not_stay_resident(trna_sim, mode):
    """escapepod maps the POD5 and keeps touched pages resident: RSS would grow with the file.
    After each batch kennel unmaps them, so what stays is the batch in hand, not the file."""
    path = os.path.realpath(trna_sim["s1.pod5"])
    size_kib = os.path.getsize(path) // 1024
    kept = _resident_pod5_kib(path, "keep")
    released = _resident_pod5_kib(path, mode)
    assert kept >= 0.5 * size_kib, (kept, size_kib)  # the control: pages do stay without it
    assert released <= 0.1 * size_kib, (released, size_kib)


@pytest.mark.parametrize(
    "text",
    [
        "0f8e7b9c-1d2e-4f5a-8b6c-7d8e9f0a1b2c",
        "0F8E7B9C-1D2E-4F5A-8B6C-7D8E9F0A1B2C",
        "0f8e7b9c1d2e4f5a8b6c7d8e9f0a1b2c",
        "{0f8e7b9c-1d2e-4f5a-8b6c-7d8e9f0a1b2c}",
        "urn:uuid:0f8e7b9c-1d2e-4f5a-8b6c-7d8e9f0a1b2c",
        "0f8e7b9c-1d2e-4f5a-8b6c-7d8e9f0a1b2",
        "0f8e7b9c-1d2e-4f5a-8b6c-7d8e9f0a1b2cd",
        "0f8e7b9c-1d2e-4f5a-8b6c_7d8e9f0a1b2c",
        "g f8e7b9c-1d2e-4f5a-8b6c-7d8e9f0a1b2c",
        "read_1",
        "",
    ],
)
def test_read_ids_looked_up_in_a_pod5_are_the_uuids_python_accepts(text):
    """POD5 ids are UUIDs: the lookup's quick check agrees with uuid.UUID on every form."""
    import uuid

    from kennel.io.pod5 import _is_uuid

    try:
        uuid.UUID(text)
        accepted = True
    except ValueError:
        accepted = False
    assert _is_uuid(text) == accepted


def test_a_record_without_bases_is_skipped_with_a_reason(trna_sim, sharded, tmp_path):
    """SEQ "*" leaves nothing to place on the signal: that read is skipped, not the batch."""
    from kennel.trna.extract import read_inputs

    path = tmp_path / "no_seq.bam"
    with (
        pysam.AlignmentFile(str(sharded.bams[0])) as bam,
        pysam.AlignmentFile(str(path), "wb", template=bam) as out,
    ):
        for index, record in enumerate(bam.fetch(until_eof=True)):
            if index == 0:
                bare = record.query_name
                record.query_sequence = None
            out.write(record)
    pysam.index(str(path))
    spec = spec_for(trna_sim["kmer_table"])
    batches = list(read_inputs(path, trna_sim["reference"], spec))
    skipped = dict(pair for _, skips in batches for pair in skips)
    assert skipped[bare] == "no_sequence"
    assert bare not in {read.read_id for batch, _ in batches for read in batch}
    assert sum(len(batch) for batch, _ in batches) > 0


def test_a_read_shorter_than_the_k_mer_is_skipped_with_a_reason(trna_sim, sharded):
    """A window narrower than k lets a read with no whole k-mer past the window check: that
    read is skipped with its reason and the rest of its batch is extracted."""
    import dataclasses

    import escapepod
    from kennel.trna.extract import extract_batch, read_inputs

    spec = dataclasses.replace(spec_for(trna_sim["kmer_table"]), upstream=0, downstream=0)
    reads, skipped = next(read_inputs(sharded.bams[0], trna_sim["reference"], spec))
    short = dataclasses.replace(reads[0], sequence="ACG", anchor=0)
    assert len(short.sequence) < spec.kmer_k
    pod5 = Pod5Set([sharded.pod5s[0]], index_reads=False)
    table = escapepod.KmerTable.from_file(str(trna_sim["kmer_table"]))

    whole = extract_batch(reads[1:], skipped, pod5, table, spec)
    batch = extract_batch([short, *reads[1:]], skipped, pod5, table, spec)

    reasons = dict(zip(batch.skipped_read_id, batch.skipped_reason, strict=True))
    assert reasons[short.read_id.encode()] == b"shorter_than_kmer"
    assert len(whole) > 0
    for name in ("read_id", "signal", "bases", "boundaries", "chunk_start"):
        np.testing.assert_array_equal(getattr(batch, name), getattr(whole, name), err_msg=name)
