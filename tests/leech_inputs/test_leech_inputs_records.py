"""Which records leech predict keeps, and how motif hits map through the CIGAR."""

from __future__ import annotations

import array
import dataclasses
from collections import Counter

import numpy as np
import pysam
import pytest
from kennel.io.bam import select_record
from kennel.trna.leech_reads import (
    LeechReadInput,
    MotifHit,
    leech_read_input,
    motif_hits,
    reference_to_query,
)

MATCH, INS, DEL, SOFT = pysam.CMATCH, pysam.CINS, pysam.CDEL, pysam.CSOFT_CLIP


def test_selected_records_are_those_leech_wrote(leech_dir):
    """leech writes exactly the records it selects, in input order."""
    with pysam.AlignmentFile(str(leech_dir / "data" / "fx.bam"), check_sq=False) as bam:
        records = [(r.query_name, select_record(r)) for r in bam.fetch(until_eof=True)]
    output = leech_dir / "predictions" / "fx.tcndwell.default.bam"
    with pysam.AlignmentFile(str(output), check_sq=False) as bam:
        written = [record.query_name for record in bam.fetch(until_eof=True)]
    assert len(written) == 398
    assert [name for name, reason in records if reason is None] == written
    reasons = Counter(reason for _, reason in records if reason is not None)
    assert reasons == {"unmapped": 12, "secondary": 14, "supplementary": 10, "no_moves": 2}


def test_iterated_inputs_follow_the_selection(leech_reads):
    reads, dropped = leech_reads
    assert len(reads) == 398 and len(dropped) == 38


def _record(**changes) -> pysam.AlignedSegment:
    header = pysam.AlignmentHeader.from_dict({"SQ": [{"SN": "c", "LN": 40}]})
    record = pysam.AlignedSegment(header)
    record.query_name = "r"
    record.query_sequence = "ACGT" * 5
    record.flag = 0
    record.reference_id = 0
    record.reference_start = 3
    record.mapping_quality = 20
    record.cigartuples = [(MATCH, 20)]
    record.set_tag("mv", array.array("B", [5] + [1, 0] * 20))
    record.set_tag("ns", 250)
    for key, value in changes.items():
        if key == "tags":
            for tag, tag_value in value.items():
                record.set_tag(tag, tag_value)
        else:
            setattr(record, key, value)
    return record


@pytest.mark.parametrize(
    ("changes", "min_mapq", "reason"),
    [
        ({}, 0, None),
        ({"flag": 16}, 0, None),  # the strand is not looked at
        ({"flag": 4}, 0, "unmapped"),
        ({"flag": 256}, 0, "secondary"),
        ({"flag": 2048}, 0, "supplementary"),
        ({}, 21, "low_mapq"),
        ({"tags": {"mv": None}}, 0, "no_moves"),
        ({"tags": {"ns": None}}, 0, "no_sample_count"),
        ({"query_sequence": None}, 0, "no_seq"),
    ],
)
def test_record_reasons(changes, min_mapq, reason):
    assert select_record(_record(**changes), min_mapq) == reason


def test_read_input_takes_the_aligned_reference_slice():
    contig = "tt" + "ACGTACGTACGTACGTACGTACGTACGT".lower()
    read = leech_read_input(_record(tags={"ts": 7}), contig)
    assert read.reference == contig[3:23].upper()
    assert (read.stride, read.trim, read.num_samples) == (5, 7, 250)
    assert read.moves.tolist() == [1, 0] * 20
    assert leech_read_input(_record(), contig).trim == 0  # a missing ts means 0


def _reference_to_query_by_walking(cigar) -> np.ndarray:
    """Remora's map by hand: aligned bases 1:1, linear across indels, from (0, 0)."""
    knots_r, knots_q, r, q = [0], [0], 0, 0
    cigar = list(cigar)
    while cigar and cigar[-1][0] not in (MATCH, pysam.CEQUAL, pysam.CDIFF):
        cigar.pop()
    for op, length in cigar:
        if op in (MATCH, pysam.CEQUAL, pysam.CDIFF):
            knots_r += [r, r + length - 1]
            knots_q += [q, q + length - 1]
        r += length if op in (MATCH, DEL, pysam.CREF_SKIP, pysam.CEQUAL, pysam.CDIFF) else 0
        q += length if op in (MATCH, INS, SOFT, pysam.CEQUAL, pysam.CDIFF) else 0
    knots_r.append(r)
    knots_q.append(q)
    return np.interp(np.arange(r + 1), knots_r, knots_q)


@pytest.mark.parametrize(
    "cigar",
    [
        [(MATCH, 10)],
        [(SOFT, 3), (MATCH, 4), (INS, 2), (MATCH, 5), (DEL, 3), (MATCH, 6), (SOFT, 4)],
        [(MATCH, 5), (DEL, 2), (INS, 1), (MATCH, 5), (INS, 3)],
    ],
)
def test_reference_to_query_is_remoras_map(cigar):
    expected = _reference_to_query_by_walking(cigar)
    assert np.array_equal(reference_to_query(np.array(cigar)), expected)


def _read(reference: str, cigar) -> LeechReadInput:
    return LeechReadInput(
        read_id="r",
        stride=5,
        moves=np.ones(1, np.uint8),
        trim=0,
        num_samples=5,
        cigar=np.array(cigar),
        reference_start=0,
        reference=reference,
        query="",
    )


def test_motif_hits_map_through_the_cigar(leech_spec):
    """CCAGGC at 2 (clean), 12 (a 2-base insertion), 22 (a 4-base deletion: |ji| > 3) and 32
    (its last base deleted: its end does not map)."""
    reference = "TT" + "CCAGGC" + "AAAA" + "CCAGGC" + "AAAA" + "CCAGGC" + "AAAA" + "CCAGGC" + "AA"
    cigar = [(MATCH, 14), (INS, 2), (MATCH, 9), (DEL, 4), (MATCH, 10), (DEL, 1), (MATCH, 2)]
    read = _read(reference, cigar)
    assert motif_hits(read, leech_spec) == [MotifHit(2 + 2, 0, True), MotifHit(12 + 2, 2, True)]
    lenient = dataclasses.replace(leech_spec, require_query_mapping=False)
    assert motif_hits(read, lenient) == [
        MotifHit(4, 0, True),
        MotifHit(14, 2, True),
        MotifHit(24, -4, True),
        MotifHit(34, 0, False),
    ]


def test_basecall_anchored_motif_hits_are_their_query_starts(leech_spec):
    """The same hits, found in the reference; a basecall-anchored model's focus base is the
    motif's mapped start in SEQ: after the 3 soft-clipped bases, and for the second hit also
    nothing inserted before it (the insertion lies inside its motif)."""
    reference = "TT" + "CCAGGC" + "AAAA" + "CCAGGC" + "AAAA" + "CCAGGC" + "AAAA" + "CCAGGC" + "AA"
    cigar = [(SOFT, 3), (MATCH, 14), (INS, 2), (MATCH, 9), (DEL, 4), (MATCH, 10), (DEL, 1),
             (MATCH, 2)]  # fmt: skip
    basecall = dataclasses.replace(leech_spec, anchor="basecall")
    hits = motif_hits(_read(reference, cigar), basecall)
    assert hits == [MotifHit(3 + 2 + 2, 0, True), MotifHit(3 + 12 + 2, 2, True)]
    inserted = [(SOFT, 3), (MATCH, 10), (INS, 2), (MATCH, 4)] + cigar[2:]
    hits = motif_hits(_read(reference, inserted), basecall)
    assert hits[1] == MotifHit(3 + 2 + 12 + 2, 2, True)


def test_overlapping_motif_hits_are_all_kept(leech_spec):
    read = _read("ACCAGGCCAGGCA", [(SOFT, 2), (MATCH, 13)])
    assert [hit.base_idx for hit in motif_hits(read, leech_spec)] == [1 + 2, 6 + 2]
