"""The records ``leech predict`` reads, and where their motifs and bases map.

1. **Records** (:func:`kennel.io.bam.select_record`): primary, mapped (either strand), MAPQ >= the
   minimum, with ``mv`` and ``ns`` tags and a SEQ. Everything else is dropped from leech's output.
2. **Per read** (:func:`leech_read_input`): the move table, ``ts``/``ns``, the CIGAR and the
   aligned reference slice, small and picklable so that batches travel to worker processes.
3. **Motifs** (:func:`motif_hits`): every motif hit in the aligned reference span that maps
   cleanly through the CIGAR (both ends in aligned blocks, mapped length within 3 of the
   motif's; with ``skip_motif_indels``, no indel in it) gives a focus base, in the reference
   slice or, for a basecall-anchored model, at the motif's mapped start in SEQ;
   :func:`reference_to_query` is Remora's reference->query map.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pysam

from kennel.errors import KennelError
from kennel.io.bam import select_record
from kennel.trna.leech_spec import LeechInputSpec

MAX_MOTIF_INDEL = 3  # |mapped length - motif length| a motif hit may have
_MATCH_OPS = frozenset((pysam.CMATCH, pysam.CEQUAL, pysam.CDIFF))


@dataclass(frozen=True)
class LeechReadInput:
    """What extraction needs of one selected BAM record (small and picklable)."""

    read_id: str
    stride: int  # samples per move-table step
    moves: np.ndarray  # (steps,) uint8, the mv tag without its stride
    trim: int  # ts: samples before the basecalled signal
    num_samples: int  # ns: end of the basecalled signal
    cigar: np.ndarray  # (ops, 2) int64: operation, length
    reference_start: int
    reference: str  # the aligned reference slice [reference_start, reference_end), upper case
    query: str  # SEQ, soft clips included: what a basecall-anchored model's chunks are cut from


def leech_read_input(record: pysam.AlignedSegment, reference_seq: str) -> LeechReadInput:
    """The per-read input of a record :func:`~kennel.io.bam.select_record` kept;
    ``reference_seq`` is its whole contig (leech takes it from the BAM header's @SQ sequences
    when there are any, otherwise from ``--reference-fasta``; a read whose contig it lacks gets
    no chunk there)."""
    mv = record.get_tag("mv")
    start, end = record.reference_start, record.reference_end
    return LeechReadInput(
        read_id=record.query_name,
        stride=int(mv[0]),
        moves=np.asarray(mv[1:], np.uint8),
        trim=int(record.get_tag("ts")) if record.has_tag("ts") else 0,
        num_samples=int(record.get_tag("ns")),
        cigar=np.asarray(record.cigartuples or [], np.int64).reshape(-1, 2),
        reference_start=start,
        reference=reference_seq[start:end].upper(),
        query=record.query_sequence,
    )


@dataclass(frozen=True)
class MotifHit:
    """A motif hit leech accepts: where its focus base is, and how the junction mapped."""

    base_idx: int  # focus base, 0-based in the aligned reference slice (basecall anchor: SEQ)
    junction_indel: int  # mapped query length of the motif minus the motif's length
    junction_mapped: bool  # both motif ends fell in aligned blocks


def motif_hits(read: LeechReadInput, spec: LeechInputSpec) -> list[MotifHit]:
    """Every accepted motif hit of ``read``, 5'->3' (overlapping hits included)."""
    motif, hits = spec.motif, []
    basecall = spec.anchor == "basecall"  # the spec refuses it without require_query_mapping
    at = read.reference.find(motif)
    while at >= 0:
        span, indel_inside = _query_span(read.cigar, at, at + len(motif))
        indel = 0 if span is None else (span[1] - span[0]) - len(motif)
        if spec.skip_motif_indels:  # leech prepare --skip-motif-indels: no indel at all
            accepted = span is not None and not indel_inside and indel == 0
        else:
            accepted = span is not None and abs(indel) <= MAX_MOTIF_INDEL
        if not spec.require_query_mapping or accepted:
            start = span[0] if basecall else at
            hits.append(MotifHit(start + spec.motif_offset, indel, span is not None))
        at = read.reference.find(motif, at + 1)
    return hits


def _query_span(cigar: np.ndarray, start: int, end: int) -> tuple[tuple[int, int] | None, bool]:
    """Query span [q_start, q_end) of reference slice positions [start, end), or None unless
    both ``start`` and ``end - 1`` fall in aligned (M/=/X) blocks; and whether the walk met an
    indel there, as leech's ``skip_motif_indels`` counts them.

    Walked as leech walks it, skipped reference (N) included: leech does not advance the
    reference there, and the same walk keeps the same hits. The walk stops at the first
    operation after both ends are found, so what counts as an indel is leech's: an insertion
    where the reference stands at start..end-1 (one just before the motif's first base
    included), and a deletion starting at or after ``start`` met before the walk stops.
    """
    reference = query = 0
    q_start = q_end = None
    indel = False
    for op, length in cigar.tolist():
        if q_start is not None and q_end is not None:
            break
        if op in _MATCH_OPS:
            if q_start is None and reference <= start < reference + length:
                q_start = query + start - reference
            if q_end is None and reference <= end - 1 < reference + length:
                q_end = query + end - reference
            reference += length
            query += length
        elif op in (pysam.CINS, pysam.CSOFT_CLIP):
            indel |= op == pysam.CINS and start <= reference < end
            query += length
        elif op == pysam.CDEL:
            indel |= reference >= start
            reference += length
    if q_start is None or q_end is None:
        return None, indel
    return (q_start, q_end), indel


_REFERENCE_OPS = np.array([1, 0, 1, 1, 0, 0, 0, 1, 1], bool)  # M, D, N, =, X
_QUERY_OPS = np.array([1, 1, 0, 0, 1, 0, 0, 1, 1], bool)  # M, I, S, =, X
_MATCH_MASK = np.array([1, 0, 0, 0, 0, 0, 0, 1, 1], bool)  # M, =, X


def reference_to_query(cigar: np.ndarray) -> np.ndarray:
    """Remora's float reference->query map (length reference span + 1) from a CIGAR.

    Knots at the first and last base of every aligned block, linear in between, so aligned bases
    map 1:1 and indels are spread over; trailing unaligned operations are dropped first.
    """
    ops, lengths = cigar[:, 0], cigar[:, 1]
    aligned = np.flatnonzero(_MATCH_MASK[ops])
    if len(aligned) == 0:
        return np.zeros(1)
    ops, lengths = ops[: aligned[-1] + 1], lengths[: aligned[-1] + 1]
    is_match = _MATCH_MASK[ops]
    ends_r = np.cumsum(np.where(_REFERENCE_OPS[ops], lengths, 0))
    ends_q = np.cumsum(np.where(_QUERY_OPS[ops], lengths, 0))
    block = lengths[is_match]
    # per aligned block: its first base (end - length) and its last (end - 1)
    knots_r = np.stack([ends_r[is_match] - block, ends_r[is_match] - 1], axis=1).ravel()
    knots_q = np.stack([ends_q[is_match] - block, ends_q[is_match] - 1], axis=1).ravel()
    knots_r = np.concatenate([[0], knots_r, [ends_r[-1]]])
    knots_q = np.concatenate([[0], knots_q, [ends_q[-1]]])
    return np.interp(np.arange(knots_r[-1] + 1), knots_r, knots_q)


def iter_leech_inputs(
    bam_path: str | os.PathLike,
    reference_path: str | os.PathLike,
    min_mapq: int = 0,
    batch_size: int = 256,
) -> Iterator[tuple[list[LeechReadInput], list[tuple[str, str]]]]:
    """Batches of (per-read inputs of selected records, (read id, reason) of dropped records),
    in BAM file order."""
    try:
        fasta = pysam.FastaFile(str(reference_path))
    except (OSError, ValueError) as error:
        raise KennelError(f"{reference_path}: unreadable FASTA ({error})") from None
    contigs: dict[str, str] = {}
    batch: list[LeechReadInput] = []
    dropped: list[tuple[str, str]] = []
    try:
        with fasta, pysam.AlignmentFile(str(bam_path), "rb", check_sq=False) as bam:
            for record in bam.fetch(until_eof=True):
                reason = select_record(record, min_mapq)
                if reason is not None:
                    dropped.append((record.query_name, reason))
                    continue
                name = record.reference_name
                if name not in contigs:
                    if name not in fasta.references:
                        # the shard step passes such reads through: a shard BAM has none
                        raise KennelError(
                            f"{reference_path}: contig {name} of read {record.query_name} "
                            "not in the reference (extract reads a shard of kennel shard, "
                            "given the same reference)"
                        )
                    contigs[name] = fasta.fetch(name)
                batch.append(leech_read_input(record, contigs[name]))
                if len(batch) >= batch_size:
                    yield batch, dropped
                    batch, dropped = [], []
    except OSError as error:
        raise KennelError(f"{bam_path}: unreadable BAM ({error})") from None
    if batch or dropped:
        yield batch, dropped
