"""Shards: disjoint, complete with the passthrough, balanced, readable by both POD5 readers."""

from __future__ import annotations

import array
import ctypes
import logging
import mmap
import os
import shutil
import sys
from collections import Counter

import escapepod
import numpy as np
import pod5
import pysam
import pytest
from kennel.cli import main
from kennel.errors import KennelError
from kennel.io.bam import PREDICTION_TAGS, is_coordinate_sorted
from kennel.trna.extract import extract_shard
from kennel.trna.shard import ORDINAL_TAG, balance, read_counts, shard_sample

from tests.conftest import shard_outputs, write_in_read_order, write_run_directory


def _records(path, ordinals=None):
    """Records as SAM lines, without the ordinal tag the shard step adds (collected aside)."""
    lines = []
    with pysam.AlignmentFile(str(path), check_sq=False) as bam:
        for record in bam.fetch(until_eof=True):
            if record.has_tag(ORDINAL_TAG):
                if ordinals is not None:
                    ordinals.append(record.get_tag(ORDINAL_TAG))
                record.set_tag(ORDINAL_TAG, None)
            lines.append(record.to_string())
    return lines


def test_every_record_exactly_once(trna_sim, sharded):
    original = Counter(_records(trna_sim["s1.bam"]))
    ordinals = []
    pieces = [Counter(_records(bam, ordinals)) for bam in [*sharded.bams, sharded.passthrough]]
    assert sum(pieces, Counter()) == original
    assert sorted(ordinals) == list(range(sum(original.values())))
    shard_reads = [{line.split("\t")[0] for line in _records(bam)} for bam in sharded.bams]
    for i in range(len(shard_reads)):
        for j in range(i + 1, len(shard_reads)):
            assert shard_reads[i].isdisjoint(shard_reads[j])


def test_shard_bams_hold_only_classifiable_primaries_and_are_indexed(sharded):
    for bam_path in sharded.bams:
        with pysam.AlignmentFile(str(bam_path)) as bam:
            assert bam.check_index()
            for record in bam.fetch(until_eof=True):
                assert not (record.is_secondary or record.is_supplementary or record.is_unmapped)
                assert record.has_tag("mv")


def test_pod5_shards_hold_exactly_their_reads(trna_sim, sharded):
    with pod5.Reader(trna_sim["s1.pod5"]) as reader:
        original = {str(r.read_id): r.signal.copy() for r in reader.reads()}
    for bam_path, pod5_path in zip(sharded.bams, sharded.pod5s, strict=True):
        with pysam.AlignmentFile(str(bam_path)) as bam:
            expected = {r.query_name for r in bam.fetch(until_eof=True)}
        with pod5.Reader(pod5_path) as reader:
            copied = {str(r.read_id): r.signal.copy() for r in reader.reads()}
        with escapepod.Reader(pod5_path) as reader:
            assert set(reader.read_ids()) == expected
        assert set(copied) == expected
        for read_id, signal in copied.items():
            assert (signal == original[read_id]).all()


def test_pod5_shards_store_reads_in_bam_order(sharded):
    """Extraction asks for signals in BAM order; stored the same way, it reads front to back."""
    for bam_path, pod5_path in zip(sharded.bams, sharded.pod5s, strict=True):
        with pysam.AlignmentFile(str(bam_path)) as bam:
            in_bam = [r.query_name for r in bam.fetch(until_eof=True)]
        with escapepod.Reader(pod5_path) as reader:
            assert reader.read_ids() == in_bam


def _cached_fraction(path) -> float:
    """Share of ``path``'s pages in the page cache (mincore over a private map of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = mmap.PAGESIZE
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) as m:
        pages = -(-len(m) // page)
        vector = (ctypes.c_ubyte * pages)()
        address = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mincore(ctypes.c_void_p(address), len(m), vector) == 0, ctypes.get_errno()
        return sum(v & 1 for v in vector) / pages


@pytest.mark.skipif(sys.platform != "linux", reason="page-cache residency is read with mincore")
def test_written_shard_pod5s_leave_the_page_cache(trna_sim, tmp_path):
    """Left in the cache as the writer's large folios, a fresh shard's first signal read mapped
    nearly the whole file into the extracting process; the shard step drops its pages."""
    outputs = shard_outputs(tmp_path, 1)
    shard_sample(trna_sim["s1.bam"], [trna_sim["s1.pod5"]], trna_sim["reference"], outputs)
    assert _cached_fraction(outputs.pod5s[0]) < 0.2
    control = tmp_path / "control.pod5"
    control.write_bytes(outputs.pod5s[0].read_bytes())  # written the ordinary way, kept cached
    assert _cached_fraction(control) > 0.8


def test_counts_account_for_every_record_and_shards_are_balanced(trna_sim, sharded):
    rows = read_counts(sharded.counts)
    total = next(int(r["records"]) for r in rows if r["kind"] == "total")
    fates = {r["name"]: int(r["records"]) for r in rows if r["kind"] == "fate"}
    assert total == len(_records(trna_sim["s1.bam"])) == sum(fates.values())
    assert fates["unmapped"] and fates["secondary"] and fates["supplementary"]
    assert fates["no_signal"] and fates["no_moves"]
    samples = [int(r["signal_samples"]) for r in rows if r["kind"] == "shard"]
    assert max(samples) <= 1.1 * (sum(samples) / len(samples))
    shard_records = [int(r["records"]) for r in rows if r["kind"] == "shard"]
    assert sum(shard_records) == fates["classifiable"]


def test_the_read_index_holds_exactly_the_pod5s_ids(trna_sim, tmp_path):
    """The shard step's index of a whole sample's read ids (a sorted bytes array): every id
    found in its file, and nothing else, not even a prefix or a longer name that starts alike."""
    from kennel.io.pod5 import Pod5Set

    second = tmp_path / "second.pod5"
    ids = sorted(escapepod.Reader(trna_sim["s1.pod5"]).read_ids())
    Pod5Set(trna_sim["s1.pod5"]).write_subset(second, ids[::2])
    Pod5Set(trna_sim["s1.pod5"]).write_subset(tmp_path / "first.pod5", ids[1::2])
    index = Pod5Set([tmp_path / "first.pod5", second]).reads
    assert list(index) == ids and len(index) == len(ids)
    assert all(read_id in index for read_id in ids)
    files = index.files_of(ids).tolist()
    assert files == [1 if position % 2 == 0 else 0 for position in range(len(ids))]
    near = [ids[0][:-1], ids[0] + "0", ids[0].upper(), "\u00e9" + ids[0][1:], "", "read_1"]
    assert not any(name in index for name in near) and None not in index
    assert index.files_of(near).tolist() == [-1] * len(near)


def _greedy_packing(sizes: dict[str, int], n_shards: int) -> dict[str, int]:
    """The packing spelled out as a plain loop: largest first (ties by read id), each read to
    the shard holding the fewest samples so far (ties to the lower shard)."""
    totals = [0] * n_shards
    shard_of = {}
    for read_id in sorted(sizes, key=lambda read_id: (-sizes[read_id], read_id)):
        shard = min(range(n_shards), key=lambda shard: (totals[shard], shard))
        shard_of[read_id] = shard
        totals[shard] += sizes[read_id]
    return shard_of


def test_balance_is_deterministic_and_within_ten_percent():
    # ties on purpose: many reads share a size, so the read-id order decides
    sizes = {f"r{(i * 389) % 600:04d}": 3000 + (i * 7919) % 50 * 100 for i in range(600)}
    ids = np.array(list(sizes), dtype="S5")
    samples = np.array(list(sizes.values()))
    shard_of = balance(samples, ids, 4)
    assert dict(zip(sizes, shard_of.tolist(), strict=True)) == _greedy_packing(sizes, 4)
    backwards = balance(samples[::-1].copy(), ids[::-1].copy(), 4)
    np.testing.assert_array_equal(backwards, shard_of[::-1])
    totals = np.bincount(shard_of, weights=samples, minlength=4)
    assert max(totals) <= 1.1 * sum(totals) / 4


def _run_shard(trna_sim, out, bam=None, pod5_path=None, reference=None, threads=1, *extra):
    outputs = shard_outputs(out, 2)
    arguments = [
        "shard",
        "--bam", str(bam or trna_sim["s1.bam"]),
        "--pod5", str(pod5_path or trna_sim["s1.pod5"]),
        "--reference", str(reference or trna_sim["reference"]),
        "--shard-pod5", *map(str, outputs.pod5s),
        "--shard-bam", *map(str, outputs.bams),
        "--passthrough", str(outputs.passthrough),
        "--counts", str(outputs.counts),
        "--threads", str(threads), *extra,
    ]  # fmt: skip
    return main(arguments), outputs


def _rewrite(source, target, edit, sort_order="coordinate"):
    with pysam.AlignmentFile(str(source), check_sq=False) as bam:
        header = bam.header.to_dict()
        header["HD"]["SO"] = sort_order
        records = list(bam.fetch(until_eof=True))
    with pysam.AlignmentFile(str(target), "wb", header=header) as out:
        for record in edit(records):
            out.write(record)
    return target


def _strip_moves(records):
    for record in records:
        record.set_tag("mv", None)
    return records


def _rename_contig_header(source, target):
    with pysam.AlignmentFile(str(source), check_sq=False) as bam:
        header = bam.header.to_dict()
        records = [r.to_dict() for r in bam.fetch(until_eof=True)]
        first = header["SQ"][0]["SN"]
    header["SQ"][0]["SN"] = "chrUnknown"
    new_header = pysam.AlignmentHeader.from_dict(header)
    with pysam.AlignmentFile(str(target), "wb", header=new_header) as out:
        for record in records:
            if record["ref_name"] == first:
                record["ref_name"] = "chrUnknown"
            if record["next_ref_name"] == first:
                record["next_ref_name"] = "chrUnknown"
            out.write(pysam.AlignedSegment.from_dict(record, new_header))
    pysam.index(str(target))
    return target


def _bad_inputs(trna_sim, tmp_path):
    corrupt = tmp_path / "corrupt.pod5"
    corrupt.write_bytes(trna_sim["s1.pod5"].read_bytes()[:5000])
    no_moves = _rewrite(trna_sim["s1.bam"], tmp_path / "nomv.bam", _strip_moves)
    pysam.index(str(no_moves))
    unsorted = _rewrite(trna_sim["s1.bam"], tmp_path / "unsorted.bam", lambda r: r[::-1])
    # htslib refuses to index it; a stale index beside it must not hide the disorder
    shutil.copyfile(f"{trna_sim['s1.bam']}.bai", f"{unsorted}.bai")
    unsorted_header = _rewrite(
        trna_sim["s1.bam"], tmp_path / "unknown.bam", lambda r: r, sort_order="unknown"
    )
    with_signal = set(escapepod.Reader(trna_sim["s1.pod5"]).read_ids())
    twice = []

    def one_primary_twice(records):
        for record in records:
            yield record
            kept = not (record.is_secondary or record.is_supplementary or record.is_unmapped)
            classifiable = kept and not record.is_reverse and record.has_tag("mv")
            if not twice and classifiable and record.query_name in with_signal:
                twice.append(record.query_name)
                yield record  # a second primary record of that read, in coordinate order

    doubled = _rewrite(trna_sim["s1.bam"], tmp_path / "twice.bam", one_primary_twice)
    run = tmp_path / "run"
    run.mkdir()
    os.link(trna_sim["s1.pod5"], run / "a.pod5")
    os.link(trna_sim["s1.pod5"], run / "b.pod5")  # the same reads in another file
    first_read = min(with_signal)
    return [
        ({"pod5_path": corrupt}, f"{corrupt}: unreadable POD5"),
        ({"bam": doubled}, f"{doubled}: read {twice[0]}: more than one primary record"),
        ({"pod5_path": run}, f"{run / 'b.pod5'}: read {first_read}: also in another POD5 file"),
        ({"bam": no_moves}, f"{no_moves}: no record carries a move table (mv tag)"),
        ({"bam": unsorted}, f"{unsorted}: record"),
        ({"bam": unsorted_header}, f"{unsorted_header}: BAM is not coordinate-sorted"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_bad_inputs_one_line_no_output(trna_sim, tmp_path, capsys, case):
    arguments, message = _bad_inputs(trna_sim, tmp_path)[case]
    out = tmp_path / "out"
    code, outputs = _run_shard(trna_sim, out, **arguments)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists() or not any(out.iterdir())


def test_a_bam_in_read_order_sorted_by_sort_bam_shards_as_the_sorted_one(trna_sim, tmp_path):
    """dorado's aligned BAMs come in read order (SO:unknown) and without an index. kennel
    sort-bam gives a copy that shards into the same records as the simulator's sorted, indexed
    BAM (records at one position may come in another order); the shard step needs no index."""
    unsorted = write_in_read_order(trna_sim["s1.bam"], tmp_path / "dorado.bam")
    assert _records(unsorted) != _records(trna_sim["s1.bam"])
    ordered = tmp_path / "sorted" / "dorado.bam"
    assert main(["sort-bam", "--bam", str(unsorted), "--output", str(ordered)]) == 0
    assert not (tmp_path / "sorted" / "dorado.bam.bai").exists()
    _, reference = _run_shard(trna_sim, tmp_path / "reference")
    code, outputs = _run_shard(trna_sim, tmp_path / "out", bam=ordered)
    assert code == 0
    for ours, theirs in zip(outputs.bams, reference.bams, strict=True):
        assert Counter(_records(ours)) == Counter(_records(theirs))
    assert Counter(_records(outputs.passthrough)) == Counter(_records(reference.passthrough))
    assert outputs.counts.read_text() == reference.counts.read_text()


def test_a_header_without_coordinate_order_is_sorted_and_one_with_it_is_not(trna_sim, tmp_path):
    """The workflow's parse-time choice: SO:coordinate (the simulator's) is read as sorted; a
    header without @HD, or SO:unknown, needs sorting; an unreadable file is left to the shard
    step's one-line error."""
    assert is_coordinate_sorted(trna_sim["s1.bam"])
    assert not is_coordinate_sorted(write_in_read_order(trna_sim["s1.bam"], tmp_path / "a.bam"))
    no_hd = write_in_read_order(trna_sim["s1.bam"], tmp_path / "no_hd.bam", no_hd=True)
    assert not is_coordinate_sorted(no_hd)
    (tmp_path / "text.bam").write_text("not a BAM\n")
    assert is_coordinate_sorted(tmp_path / "text.bam")


def test_compression_threads_write_the_same_bytes_and_progress_is_logged(
    trna_sim, tmp_path, caplog
):
    """BGZF threads only share the compressing: every BAM byte for byte the one-thread file's.
    The log counts what each pass did, as a long job's progress lines do."""
    _, one = _run_shard(trna_sim, tmp_path / "one")
    caplog.clear()
    caplog.set_level(logging.INFO)
    code, three = _run_shard(trna_sim, tmp_path / "three", threads=3)
    assert code == 0
    written = zip([*three.bams, three.passthrough], [*one.bams, one.passthrough], strict=True)
    for ours, theirs in written:
        assert ours.read_bytes() == theirs.read_bytes()
    log = caplog.text
    records = len(_records(trna_sim["s1.bam"]))
    classifiable = sum(len(_records(bam)) for bam in one.bams)
    assert f"records read: {records} done" in log
    assert f"records written: {records} done" in log
    assert f"signals copied: {classifiable} done" in log


def test_a_run_directory_of_pod5s_shards_as_the_one_file(trna_sim, tmp_path, capsys):
    """A MinKNOW run's pod5_pass/ (files in it and in barcode folders below) given as the POD5
    shards into the same records and reads as the one file holding them all; a directory
    without POD5 files is one line."""
    run = write_run_directory(trna_sim["s1.pod5"], tmp_path / "run")
    _, reference = _run_shard(trna_sim, tmp_path / "reference")
    code, outputs = _run_shard(trna_sim, tmp_path / "out", pod5_path=run)
    assert code == 0
    for ours, theirs in zip(outputs.bams, reference.bams, strict=True):
        assert _records(ours) == _records(theirs)
    for ours, theirs in zip(outputs.pod5s, reference.pod5s, strict=True):
        with pod5.Reader(ours) as mine, pod5.Reader(theirs) as expected:
            assert [r.read_id for r in mine.reads()] == [r.read_id for r in expected.reads()]
    assert outputs.counts.read_text() == reference.counts.read_text()

    empty = tmp_path / "empty_run"
    (empty / "pod5_pass").mkdir(parents=True)
    code, _ = _run_shard(trna_sim, tmp_path / "none", pod5_path=empty)
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"{empty}: a directory without .pod5 files" in err, err
    assert len(err.splitlines()) == 1


def test_a_run_directory_that_changed_since_the_plan_is_refused(trna_sim, tmp_path, capsys):
    """The workflow hands the shard job the directory and the count of files its plan took as
    input; a file written since (a run still being sequenced) would be read undeclared."""
    run = write_run_directory(trna_sim["s1.pod5"], tmp_path / "run")
    code, _ = _run_shard(trna_sim, tmp_path / "planned", None, run, None, 1, "--pod5-files", "3")
    assert code == 0
    code, outputs = _run_shard(trna_sim, tmp_path / "out", None, run, None, 1, "--pod5-files", "2")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.endswith(
        f"{run}: 3 POD5 files now, 2 when the workflow was planned (files added or removed "
        "since: a run still being written?); rerun snakemake once the run is complete"
    ), err
    assert not any(path.exists() for path in outputs.all_paths())


def test_sort_bam_refuses_what_is_not_a_bam_in_one_line(tmp_path, capsys):
    bad = tmp_path / "empty.bam"
    bad.write_bytes(b"")
    out = tmp_path / "out" / "sorted.bam"
    assert main(["sort-bam", "--bam", str(bad), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{bad}: unreadable BAM" in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def _names(paths) -> set[str]:
    names = set()
    for path in paths:
        with pysam.AlignmentFile(str(path), check_sq=False) as bam:
            names |= {record.query_name for record in bam.fetch(until_eof=True)}
    return names


def test_reads_on_a_contig_the_reference_lacks_pass_through_counted(trna_sim, sharded, tmp_path):
    """A spike-in contig the FASTA lacks: its reads pass through, as leech predict leaves them
    untagged; the other reads shard as before. When no read's contig is in the reference, the
    BAM was aligned to another one: an error (tests/test_bad_inputs.py)."""
    renamed = _rename_contig_header(trna_sim["s1.bam"], tmp_path / "contig.bam")
    with pysam.AlignmentFile(str(renamed), check_sq=False) as bam:
        on_renamed = {
            r.query_name
            for r in bam.fetch(until_eof=True)
            if r.reference_name == "chrUnknown" and not (r.is_secondary or r.is_supplementary)
        }
    code, outputs = _run_shard(trna_sim, tmp_path / "out", bam=renamed)
    assert code == 0
    before = _names(sharded.bams)
    moved = before & on_renamed
    assert moved  # the contig held classifiable reads
    assert _names(outputs.bams) == before - moved
    assert _names([outputs.passthrough]) == _names([sharded.passthrough]) | moved
    counts, old = (
        {(row["kind"], row["name"]): int(row["records"]) for row in read_counts(path)}
        for path in (outputs.counts, sharded.counts)
    )
    # the contig is tested before the signal: its reads missing from the POD5 move too
    no_signal_moved = old["fate", "no_signal"] - counts["fate", "no_signal"]
    assert counts["fate", "contig_not_in_reference"] == len(moved) + no_signal_moved
    assert counts["fate", "classifiable"] == len(before) - len(moved)
    assert counts["total", "input"] == old["total", "input"]
    # with another sample's POD5 no read has a signal: the reads on the reference still say the
    # BAM was aligned to it (no "another reference" error); all pass through, counted
    code, other = _run_shard(trna_sim, tmp_path / "s2", bam=renamed, pod5_path=trna_sim["s2.pod5"])
    assert code == 0
    assert not _names(other.bams)


def _tag_as_if_called_by_leech(records):
    """leech's tags from an earlier run: a binary call (MP with its ML) on even records, and on
    odd ones dorado's modified-base MM/ML, which are not predictions and must stay."""
    for index, record in enumerate(records):
        record.set_tag("ji", 1, "i")
        record.set_tag("jm", 0, "i")
        if index % 2:
            record.set_tag("MM", "A+a?,0;")
            record.set_tag("ML", array.array("B", [200]))
        else:
            # as leech writes them: base indices and their uint8 probabilities
            record.set_tag("MP", array.array("i", [3, 9]))
            record.set_tag("ML", array.array("B", [17, 42]))
    return records


def _shard_tagged(trna_sim, tmp_path, tag):
    """Shard s1.bam after ``tag`` edits its records; every record of every output."""
    tagged = _rewrite(trna_sim["s1.bam"], tmp_path / "tagged.bam", tag)
    pysam.index(str(tagged))
    status, outputs = _run_shard(trna_sim, tmp_path / "out", bam=tagged)
    assert status == 0
    records = []
    for path in [*outputs.bams, outputs.passthrough]:
        with pysam.AlignmentFile(str(path), check_sq=False) as bam:
            records.extend(bam.fetch(until_eof=True))
    return outputs, records


def test_leech_calls_from_an_earlier_run_are_dropped_and_modified_bases_kept(trna_sim, tmp_path):
    _, records = _shard_tagged(trna_sim, tmp_path, _tag_as_if_called_by_leech)
    seen = {"MM": 0, "plain": 0}
    for record in records:
        assert not any(record.has_tag(tag) for tag in ("ji", "jm", "MP")), record.query_name
        if record.has_tag("MM"):  # dorado's pair, untouched
            assert list(record.get_tag("ML")) == [200], record.query_name
            seen["MM"] += 1
        else:  # leech's ML went with its MP
            assert not record.has_tag("ML"), record.query_name
            seen["plain"] += 1
    assert seen["MM"] > 0 and seen["plain"] > 0


def _tag_as_if_classified(records):
    """Predictions from an earlier run on every record, one of them of another type."""
    for record in records:
        record.set_tag("aa", "Gly")
        record.set_tag("pc", 0.5, "f")
    return records


def test_predictions_from_an_earlier_run_are_dropped(trna_sim, tmp_path):
    outputs, records = _shard_tagged(trna_sim, tmp_path, _tag_as_if_classified)
    for record in records:
        assert not any(record.has_tag(tag) for tag in PREDICTION_TAGS), record.query_name
    # all else is as it came: the same records as sharding the untagged input
    _, untagged = _run_shard(trna_sim, tmp_path / "plain")
    for ours, plain in zip([*outputs.bams, outputs.passthrough],
                           [*untagged.bams, untagged.passthrough], strict=True):  # fmt: skip
        assert _records(ours) == _records(plain)


def test_extract_refuses_a_bam_without_move_tables(trna_sim, sharded, tmp_path):
    no_moves = _rewrite(sharded.bams[0], tmp_path / "nomv.bam", _strip_moves)
    pysam.index(str(no_moves))
    with pytest.raises(KennelError, match="no record carries a move table"):
        extract_shard(no_moves, [sharded.pod5s[0]], trna_sim["reference"],
                      trna_sim["kmer_table"], tmp_path / "f.h5")  # fmt: skip
    assert not list(tmp_path.glob("*.h5"))
