"""The tRNA simulator's files, checked with independent readers (pod5, pysam, plain parsing)."""

from __future__ import annotations

import csv
import hashlib
from collections import Counter

import escapepod
import numpy as np
import pod5
import pysam
import pytest
from kennel.cli import main
from kennel.errors import KennelError
from kennel.io.kmers import read_kmer_levels
from kennel.sim.trna import FATES, TrnaSimulation, simulate_trna
from kennel.trna.anchor import AnchorMotif

from tests.conftest import REAL_KMER_TABLE, REAL_REFERENCE, require_real_data


def _truth(path):
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _records(path):
    with pysam.AlignmentFile(str(path), check_sq=False) as bam:
        return list(bam.fetch(until_eof=True))


@pytest.mark.parametrize("sample", ["s1", "s2"])
def test_pod5_readable_by_both_readers(trna_sim, sample):
    path = trna_sim[f"{sample}.pod5"]
    truth = {row["read_id"]: row for row in _truth(trna_sim[f"{sample}.truth.tsv"])}
    official = {}
    with pod5.Reader(path) as reader:
        for read in reader.reads():
            assert read.run_info.sample_rate == 4000
            assert read.signal.dtype == np.int16
            assert read.calibration.scale > 0
            assert 40 < float(np.median(read.signal_pa)) < 140  # RNA004-like current
            official[str(read.read_id)] = read.signal.copy()
    with escapepod.Reader(path) as reader:
        ours = {read.read_id: read for read in reader.reads()}
        first = next(iter(ours))
        np.testing.assert_array_equal(reader.get_signal(ours[first]), official[first])
    assert set(official) == set(ours)
    # every read in the POD5 is in the truth; reads without signal are exactly the absent ones
    assert set(official) <= set(truth)
    absent = {read_id for read_id, row in truth.items() if row["fate"] == "no_signal"}
    assert absent and absent.isdisjoint(official)
    assert set(truth) - absent == set(official)


def test_bam_sorted_indexed_with_dorado_tags(trna_sim):
    path = trna_sim["s1.bam"]
    with pysam.AlignmentFile(str(path)) as bam:
        assert bam.header["HD"]["SO"] == "coordinate"
        assert bam.check_index()
        references = bam.references
    records = _records(path)
    keys = [
        (r.reference_id if r.reference_id >= 0 else len(references), r.reference_start)
        for r in records
    ]
    assert keys == sorted(keys)
    kinds = Counter(
        "secondary"
        if r.is_secondary
        else "supplementary"
        if r.is_supplementary
        else "unmapped"
        if r.is_unmapped
        else "primary"
        for r in records
    )
    assert kinds["secondary"] > 0 and kinds["supplementary"] > 0 and kinds["unmapped"] > 0
    n_with_moves = 0
    for record in records:
        if not record.has_tag("mv"):
            continue
        moves = record.get_tag("mv")
        stride, blocks = moves[0], moves[1:]
        assert stride == 5
        assert set(blocks) <= {0, 1} and blocks[0] == 1
        # one block per stride of the trimmed signal; ns ends the last block
        assert len(blocks) * stride == record.get_tag("ns") - record.get_tag("ts")
        if not (record.is_secondary or record.is_supplementary):
            assert sum(blocks) == record.query_length
            n_with_moves += 1
    assert n_with_moves > 250


def test_cigars_have_mismatches_and_indels(trna_sim):
    reference = pysam.FastaFile(str(trna_sim["reference"]))
    n_indel = n_mismatch = 0
    for record in _records(trna_sim["s1.bam"]):
        if record.is_unmapped or record.is_secondary or record.is_supplementary:
            continue
        ops = {op for op, _ in record.cigartuples}
        n_indel += bool(ops & {pysam.CINS, pysam.CDEL})
        contig = reference.fetch(record.reference_name)
        for query_pos, ref_pos in record.get_aligned_pairs(matches_only=True):
            n_mismatch += (
                record.query_sequence[query_pos] != contig[ref_pos] and contig[ref_pos] != "N"
            )
    assert n_indel > 30 and n_mismatch > 50


def test_truth_covers_every_read_and_fate(trna_sim):
    truth = _truth(trna_sim["s1.truth.tsv"])
    records = _records(trna_sim["s1.bam"])
    assert {row["read_id"] for row in truth} == {r.query_name for r in records}
    fates = Counter(row["fate"] for row in truth)
    assert set(fates) == set(FATES)
    assert fates["classifiable"] > 250
    by_id = {row["read_id"]: row for row in truth}
    for record in records:
        row = by_id[record.query_name]
        if record.is_secondary:
            assert int(row["n_secondary"]) >= 1
        elif record.is_supplementary:
            assert int(row["n_supplementary"]) >= 1
        elif record.is_unmapped:
            assert row["fate"] == "unmapped"
        else:
            assert row["reference"] == record.reference_name
            assert (row["fate"] == "no_moves") == (not record.has_tag("mv"))
    labels = Counter(row["label"] for row in truth if row["fate"] == "classifiable")
    assert set(labels) == {"Ala", "Gly", "Leu", "Phe"}
    charging = [float(row["charging"]) for row in truth if row["charging"]]
    assert min(charging) >= 0.0 and max(charging) <= 1.0


def test_anchor_is_on_the_reference_junction(trna_sim):
    reference = pysam.FastaFile(str(trna_sim["reference"]))
    motif = AnchorMotif()
    for row in _truth(trna_sim["s1.truth.tsv"]):
        if row["reference"]:
            contig = reference.fetch(row["reference"])
            anchor = int(row["anchor_reference_position"])
            assert contig[anchor - 2 : anchor + 1] == "CCA"
            assert anchor == motif.find(contig)


def _read_levels_by_class(trna_sim, table):
    """Recover per-base mean current around the anchor from the raw files alone (plain numpy),
    to show the planted class signal is where the truth says and nowhere else."""
    truth = {row["read_id"]: row for row in _truth(trna_sim["s1.truth.tsv"])}
    with pod5.Reader(trna_sim["s1.pod5"]) as reader:
        signals = {str(read.read_id): read.signal_pa for read in reader.reads()}
    per_class: dict[str, list[np.ndarray]] = {}
    for record in _records(trna_sim["s1.bam"]):
        row = truth[record.query_name]
        if record.is_secondary or record.is_supplementary or row["fate"] != "classifiable":
            continue
        moves = np.asarray(record.get_tag("mv"))
        stride, blocks = moves[0], moves[1:]
        starts_time = record.get_tag("ts") + stride * np.flatnonzero(blocks)
        ends_time = np.append(starts_time[1:], record.get_tag("ns"))
        signal = signals[record.query_name]
        means_time = np.array(
            [signal[a:b].mean() for a, b in zip(starts_time, ends_time, strict=True)]
        )
        means = means_time[::-1]  # signal runs 3'->5'; SEQ runs 5'->3'
        means = (means - np.median(means)) / np.median(np.abs(means - np.median(means)))
        anchor_ref = int(row["anchor_reference_position"])
        query_of_ref = {r: q for q, r in record.get_aligned_pairs(matches_only=True)}
        anchor = query_of_ref[anchor_ref]
        offsets = np.arange(-12, 13)
        per_class.setdefault(row["label"], []).append(means[anchor + offsets])
    return {label: np.stack(rows) for label, rows in per_class.items()}


def test_planted_class_signal_lies_only_near_anchor(trna_sim):
    table = read_kmer_levels(trna_sim["kmer_table"])
    by_class = _read_levels_by_class(trna_sim, table)
    class_means = np.stack([rows.mean(axis=0) for rows in by_class.values()])
    spread = class_means.std(axis=0)  # between-class spread per offset (-12..12)
    near = spread[12 - 3 : 12 + 4]
    far = np.concatenate([spread[:6], spread[-6:]])
    assert near.max() > 4 * far.max()


def test_same_seed_same_files_other_seed_differs(tmp_path):
    settings = TrnaSimulation(samples=("x",), reads=40, seed=3)
    first = simulate_trna(tmp_path / "a", settings)
    second = simulate_trna(tmp_path / "b", settings)
    third = simulate_trna(tmp_path / "c", TrnaSimulation(samples=("x",), reads=40, seed=4))

    def digest(paths, role):
        return hashlib.sha256(paths[role].read_bytes()).hexdigest()

    for role in ("reference", "kmer_table", "x.truth.tsv"):
        assert digest(first, role) == digest(second, role)
    records = [[r.to_string() for r in _records(p["x.bam"])] for p in (first, second, third)]
    assert records[0] == records[1] != records[2]
    with pod5.Reader(first["x.pod5"]) as a, pod5.Reader(second["x.pod5"]) as b:
        for read_a, read_b in zip(a.reads(), b.reads(), strict=True):
            assert read_a.read_id == read_b.read_id
            np.testing.assert_array_equal(read_a.signal, read_b.signal)


@pytest.mark.slow
def test_real_reference_and_9mer_table(real_trna_sim):
    table = read_kmer_levels(real_trna_sim["kmer_table"])
    assert table.k == 9
    references = pysam.FastaFile(str(real_trna_sim["reference"]))
    with open(REAL_REFERENCE) as handle:
        assert len(references.references) == sum(line.startswith(">") for line in handle)
    truth = _truth(real_trna_sim["real.truth.tsv"])
    assert sum(row["fate"] == "classifiable" for row in truth) > 150
    with pod5.Reader(real_trna_sim["real.pod5"]) as reader:
        assert len(list(reader.read_ids)) == sum(row["fate"] != "no_signal" for row in truth)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--reads", "-5"], "--reads must be positive"),
        (["--reads", "0"], "--reads must be positive"),
        (["--reference", "/nonexistent/ref.fa"], "--reference /nonexistent/ref.fa: file not found"),
        (["--kmer-table", "/nonexistent/k.tsv"], "--kmer-table /nonexistent/k.tsv: file not found"),
        (["--k", "12"], "--k must be between 3 and 9"),
        (["--classes", "Ala"], "at least two class labels"),
        (["--samples", "a,a"], "duplicates"),
        (["--k", "7", "--kmer-table", str(REAL_KMER_TABLE)], "does not match --kmer-table"),
    ],
)
def test_bad_arguments_fail_with_one_line_and_no_output(tmp_path, capsys, arguments, message):
    if str(REAL_KMER_TABLE) in arguments:
        require_real_data(REAL_KMER_TABLE)
    out = tmp_path / "out"
    code = main(["simulate", "trna", "--out-dir", str(out), *arguments])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists() or not any(out.iterdir())


def test_malformed_kmer_table_is_rejected_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("ACG\t0.1\nACGT\t0.2\n")
    with pytest.raises(KennelError, match=r"bad.tsv: line 2"):
        simulate_trna(tmp_path / "o", TrnaSimulation(samples=("x",), reads=5, kmer_table=bad))
    assert not (tmp_path / "o" / "x.bam").exists()
