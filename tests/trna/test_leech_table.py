"""Joining a sample's per-shard leech tables (``kennel leech-table``): rows in the merged BAM's
order whatever shard holds them, and one-line refusals with nothing written. That the rows are
leech predict's is test_leech_made's and test_leech_workflow's (against leech's own TSV)."""

from __future__ import annotations

import gzip

import pysam
import pytest
from kennel.errors import KennelError
from kennel.trna.leech_table import merge_tables

HEADER = "read_name\tref_name\tprob_A\tprob_B\tpredicted_aa\n"


def merged_bam(path, names_tagged):
    """A BAM of ``(name, tagged)`` records in this order (tagged: scored, an ``aa`` tag)."""
    header = pysam.AlignmentHeader.from_dict({"SQ": [{"SN": "c", "LN": 100}]})
    with pysam.AlignmentFile(str(path), "wb", header=header) as bam:
        for position, (name, tagged) in enumerate(names_tagged):
            record = pysam.AlignedSegment(header)
            record.query_name, record.reference_id, record.reference_start = name, 0, position
            record.query_sequence, record.cigarstring = "ACGT", "4M"
            if tagged:
                record.set_tag("aa", "A")
            bam.write(record)
    return path


def table(path, names, header=HEADER):
    path.write_text(header + "".join(f"{name}\tc\t0.5\t0.5\tA\n" for name in names))
    return path


def test_rows_follow_the_merged_bam_across_shards(tmp_path):
    # the shards were packed greedily, so each holds every other read; r2's second record
    # (untagged, passed through) must not take its row
    bam = merged_bam(tmp_path / "m.bam", [("r1", 1), ("r2", 0), ("r2", 1), ("r3", 1), ("u", 0)])
    shards = [table(tmp_path / "0.tsv", ["r1", "r3"]), table(tmp_path / "1.tsv", ["r2"])]
    output = tmp_path / "out.tsv.gz"
    assert merge_tables(shards, bam, output) == 3
    with gzip.open(output, "rt") as handle:
        lines = handle.read().splitlines()
    assert lines[0] + "\n" == HEADER
    assert [line.split("\t")[0] for line in lines[1:]] == ["r1", "r2", "r3"]
    # the same rows give the same bytes (no file name or time in the gzip header)
    again = tmp_path / "again.tsv.gz"
    merge_tables(shards, bam, again)
    assert again.read_bytes() == output.read_bytes()


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ([("read_id\tchunks\ttags\n", ["r1"])], "not leech predict's table rows"),
        ([(HEADER, ["r1"]), (HEADER.replace("prob_B", "prob_C"), [])], "its columns differ"),
        ([(HEADER, ["r1", "r9"])], "read r9 has no record in"),
        ([(HEADER, [])], "read r1 was scored but no table holds its row"),
    ],
    ids=["not_multiclass", "other_columns", "row_without_record", "record_without_row"],
)
def test_bad_tables_are_refused_in_one_line_with_nothing_written(tmp_path, tables, message):
    bam = merged_bam(tmp_path / "m.bam", [("r1", 1)])
    paths = [
        table(tmp_path / f"{index}.tsv", names, header)
        for index, (header, names) in enumerate(tables)
    ]
    output = tmp_path / "out.tsv.gz"
    with pytest.raises(KennelError) as caught:
        merge_tables(paths, bam, output, "b.pt")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not output.exists() and not list(tmp_path.glob(".tmp-*"))
