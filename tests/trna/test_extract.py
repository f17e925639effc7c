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
    assert lazy.sample_counts(wanted) == indexed.sample_counts(wanted)
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
    assert sorted(seen) == sorted(
        r.query_name for r in records if record_fate(r, None) == CLASSIFIABLE
    )
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

path, release = sys.argv[1], sys.argv[2] == "release"
if not release:
    kennel_pod5.release_mapped_pages = lambda paths: None
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


def _resident_pod5_kib(path, release: bool) -> int:
    command = [sys.executable, "-c", RESIDENT_POD5_PAGES, str(path), "release" if release else "-"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def test_fetched_signal_pages_do_not_stay_resident(trna_sim):
    """escapepod maps the POD5 and keeps touched pages resident: RSS would grow with the file.
    After each batch kennel unmaps them, so what stays is the batch in hand, not the file."""
    path = os.path.realpath(trna_sim["s1.pod5"])
    size_kib = os.path.getsize(path) // 1024
    kept = _resident_pod5_kib(path, release=False)
    released = _resident_pod5_kib(path, release=True)
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


@pytest.mark.parametrize("k", [3, 5, 9])
def test_a_batch_s_expected_levels_are_each_read_s_k_mer_lookups(tmp_path, k):
    """Looked up for a whole batch at once, each base's level is its own read's k-mer's, never
    one spanning two reads; the ends take the nearest full k-mer's (a plain dictionary lookup
    of the table's text is the reference)."""
    import itertools

    import escapepod
    from kennel.trna.extract import expected_levels

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

    centre = k // 2
    assert len(batch) == len(sequences)
    for sequence, got in zip(sequences, batch, strict=True):
        full = [levels[sequence[p - centre : p - centre + k]] for p in
                range(centre, len(sequence) - k + centre + 1)]  # fmt: skip
        want = np.array([full[0]] * centre + full + [full[-1]] * (k - centre - 1), np.float32)
        np.testing.assert_array_equal(got, want)


def test_batched_level_fit_equals_the_per_read_fit():
    from kennel.trna.extract import fit_levels, fit_levels_per_read

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
    import kennel.trna.extract as extract_module
    from kennel.trna.features import FeatureFile

    monkeypatch.setattr(extract_module, "fit_levels", extract_module.fit_levels_read_by_read)
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


def test_features_equal_those_of_the_per_read_assembly(
    trna_sim, sharded, features, tmp_path, monkeypatch
):
    """The whole extraction with the batched window assembly against the per-read one."""
    import kennel.trna.extract as extract_module
    from kennel.trna.features import FeatureFile

    monkeypatch.setattr(
        extract_module, "assemble_windows", extract_module.assemble_windows_per_read
    )
    reference, _ = extract_shards(sharded, trna_sim, tmp_path / "per_read")
    for batched_path, reference_path in zip(features, reference, strict=True):
        with FeatureFile(batched_path) as batched, FeatureFile(reference_path) as per_read_file:
            a, b = next(batched.batches(len(batched))), next(per_read_file.batches(len(batched)))
        assert len(a) == len(b) > 0
        for name in ("signal", "bases", "boundaries", "chunk_start", "scale", "shift"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_batched_move_table_maps_equal_the_per_read_ones(trna_sim, sharded):
    """A shard's reads and synthetic ones (strides, no moves, a count that misses SEQ's, a
    trim): each read's boundaries from the batch equal its own, None where they were None."""
    from kennel.trna.extract import (
        ReadInput,
        move_table_map_per_read,
        move_table_maps,
        read_inputs,
    )

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
    import kennel.trna.extract as extract_module
    from kennel.trna.features import FeatureFile

    def per_read(reads):
        return [
            extract_module.move_table_map_per_read(read, read.n_samples - read.trimmed)
            for read in reads
        ]

    monkeypatch.setattr(extract_module, "move_table_maps", per_read)
    reference, _ = extract_shards(sharded, trna_sim, tmp_path / "per_read")
    for batched_path, reference_path in zip(features, reference, strict=True):
        with FeatureFile(batched_path) as batched, FeatureFile(reference_path) as per_read_file:
            a, b = next(batched.batches(len(batched))), next(per_read_file.batches(len(batched)))
            assert batched.counts == per_read_file.counts
        assert len(a) == len(b) > 0
        for name in ("read_id", "signal", "bases", "boundaries", "chunk_start", "scale", "shift"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("justify", ["start", "center", "end"])
def test_batched_assembly_equals_the_per_read_one_at_read_edges(justify):
    """Synthetic reads whose chunks run off either end, and a map that stops short of the
    signal's end (a move table whose first block is no move): equal values, residual 0 there."""
    from dataclasses import replace

    import escapepod
    from kennel.trna.extract import (
        ReadInput,
        assemble_windows,
        assemble_windows_per_read,
        padded_rows,
    )

    spec = replace(spec_for_synthetic(), justify=justify)
    rng = np.random.default_rng(3)
    kept = []
    for n_bases, dwell_scale, tail in ((40, 4, 0), (60, 30, 0), (45, 8, 17), (90, 12, 0)):
        dwell = rng.integers(1, dwell_scale + 1, n_bases)
        refined = np.concatenate([[0], np.cumsum(dwell)])
        signal = rng.normal(size=int(refined[-1]) + tail).astype(np.float32)
        expected = rng.normal(size=n_bases).astype(np.float32)
        anchor = int(rng.integers(spec.upstream, n_bases - spec.downstream))
        read = ReadInput("r", "A" * n_bases, np.zeros(1, np.int64), 0, len(signal), anchor)
        kept.append((read, signal, refined, expected))
    offsets = np.concatenate([[0], np.cumsum([len(s) for _, s, _, _ in kept])])
    flat = np.concatenate([s for _, s, _, _ in kept])
    scale = rng.uniform(0.5, 2, len(kept)).astype(np.float32)
    shift = rng.normal(size=len(kept)).astype(np.float32)
    maps = padded_rows([refined for _, _, refined, _ in kept], -1, np.int64)
    expected_padded = padded_rows([expected for *_, expected in kept], 0.0, np.float32)
    ours = assemble_windows(kept, spec, scale, shift, flat, offsets, maps, expected_padded)
    reference = assemble_windows_per_read(kept, spec, scale, shift, flat, offsets)
    for name in ("boundaries", "expected", "chunk_start", "chunk_signal"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name), err_msg=name)
    # the window statistics read from each one's samples (ours holds only the stretches the
    # windows and chunks cover, the reference whole reads)
    statistics = [
        np.stack(
            escapepod.span_statistics_batch(
                w.span_signal, w.span_offsets, w.spans.reshape(-1, 2), spec.window
            )
        )
        for w in (ours, reference)
    ]
    np.testing.assert_array_equal(*statistics)
    assert len(ours.span_signal) < len(reference.span_signal)
    # the cases reached: chunks that run off a read, a tail no base covers (residual 0)
    lengths = np.diff(offsets)
    assert ((ours.chunk_start < 0) | (ours.chunk_start + spec.chunk_length > lengths)).any()
    tail = slice(offsets[2] + kept[2][2][-1], offsets[3])
    assert reference.span_signal[tail].all()
    residual = _residual_at(ours, tail, offsets)
    if justify != "end":  # an end-justified chunk stops at the window, before the tail
        assert len(residual) and not residual.any()


def _residual_at(windows, samples: slice, offsets) -> np.ndarray:
    """The residual channel's values at flat sample positions that fall inside a chunk."""
    values = []
    for i in range(len(offsets) - 1):
        for position in range(samples.start, samples.stop):
            local = position - offsets[i] - windows.chunk_start[i]
            if (
                offsets[i] <= position < offsets[i + 1]
                and 0 <= local < windows.chunk_signal.shape[-1]
            ):
                values.append(windows.chunk_signal[i, 1, local])
    return np.array(values)


def spec_for_synthetic():
    from kennel.trna.features import FeatureSpec

    return FeatureSpec(kmer_k=5, kmer_sha256="x", upstream=10, downstream=14, chunk_length=256)


def test_batched_map_costs_equal_the_per_read_cost():
    from kennel.trna.extract import _map_cost, map_costs

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

    import kennel.trna.extract as extract_module
    from kennel.trna.features import FeatureFile

    spec = replace(spec_for(trna_sim["kmer_table"]), refine="checked")
    batched, batched_counts = extract_shards(sharded, trna_sim, tmp_path / "batched", spec=spec)
    monkeypatch.setattr(extract_module, "choose_maps", extract_module.choose_maps_per_read)
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

    from kennel.trna.extract import row_medians

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
