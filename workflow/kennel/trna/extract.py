"""``kennel extract``: per-read features around the CCA/adapter anchor, with escapepod.

Per read: signal (pA) → trim ``ts`` → reverse, so signal runs 5'→3' like SEQ (direct RNA is read
3'→5') → move table → seq-to-signal map → MAD normalisation → ``refine_signal_map`` against the
expected k-mer levels (banded DP) → per-read linear fit onto level units → anchor the window at the
motif through the CIGAR → signal chunk justified on the window → ``span_statistics_batch`` for
per-base statistics. The DP holds the GIL, so reads are spread over worker processes in batches;
at most a few batches are in flight, so memory does not grow with the number of reads.

This module reads the records, drives the workers and writes the features file; a batch's maps
and level fit are :mod:`kennel.trna.signal_maps`', its windows and chunks
:mod:`kennel.trna.windows`'.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import escapepod
import numpy as np
import pysam

from kennel.errors import KennelError
from kennel.io.atomic import atomic_output
from kennel.io.bam import (
    CLASSIFIABLE,
    check_contigs_in_reference,
    open_alignments,
    record_fate,
    sorted_records,
)
from kennel.io.kmers import file_sha256, read_kmer_levels
from kennel.io.pod5 import Pod5Set
from kennel.progress import logged_progress
from kennel.trna.anchor import AnchorMotif
from kennel.trna.features import (
    READ_ID_DTYPE,
    SKIP_REASON_DTYPE,
    FeatureBatch,
    FeatureSpec,
    write_features,
)
from kennel.trna.signal_maps import (
    ReadInput,
    choose_maps,
    expected_levels,
    fit_levels,
    move_table_maps,
    refine_near_anchor,
)
from kennel.trna.threads import ThreadPlan, ordered_map, plan_threads
from kennel.trna.windows import assemble_windows, padded_rows

# BAM records per worker task (a shard holds only reads to extract, so records are reads; a BAM
# with secondary or unmapped records only gets smaller tasks). Each batch pays a fixed cost in
# numpy calls, the POD5 lookup and the pool's hand-offs. On 20k simulated reads, 2 workers,
# alternating runs: 256-read tasks 4.0 s vs 4.3 s for 128; 512 and 1,024 a little faster again
# (3.6-3.8 s) but 512 added 30 MiB of padded per-batch arrays per process (bench_extract peak
# RSS 79 / 96 / 130 MiB at 128 / 256 / 512). Separate bench_extract runs minutes apart: +13%
# reads/s at 256 on 1 and 2 workers.
RECORDS_PER_TASK = 256
# Three, not two: a task counts as in flight until the pool's thread in the job's process has
# taken its result, which waits for the GIL while this process runs a task itself. With two,
# the worker process ran dry 8-9 times per 20k reads for 13-56 ms (0.2 s of a 3.6-s run, from
# task start/end times logged in both processes); with three, twice (then, with the reads sent
# as columns rather than read by read, 1 -> 2 workers under way went from 1.66-1.76x to
# 1.84-1.88x in bench_extract's runs alternating with the code before both).
TASKS_IN_FLIGHT_PER_WORKER = 3
_QUERY_CONSUMING = {pysam.CMATCH, pysam.CINS, pysam.CSOFT_CLIP, pysam.CEQUAL, pysam.CDIFF}
_REFERENCE_CONSUMING = {pysam.CMATCH, pysam.CDEL, pysam.CREF_SKIP, pysam.CEQUAL, pysam.CDIFF}
_MATCHING = {pysam.CMATCH, pysam.CEQUAL, pysam.CDIFF}


def spec_for(kmer_table: str | os.PathLike, **overrides) -> FeatureSpec:
    """A feature spec bound to a k-mer table (its k and SHA-256)."""
    table = read_kmer_levels(kmer_table)
    return FeatureSpec(kmer_k=table.k, kmer_sha256=table.sha256, **overrides)


def query_index_of(record: pysam.AlignedSegment, reference_position: int) -> int | None:
    """Index in SEQ of the base aligned to ``reference_position`` (None if deleted/unaligned)."""
    query = 0
    reference = record.reference_start
    for op, length in record.cigartuples or ():
        consumes_query = op in _QUERY_CONSUMING
        consumes_reference = op in _REFERENCE_CONSUMING
        if consumes_reference and reference <= reference_position < reference + length:
            return query + (reference_position - reference) if op in _MATCHING else None
        query += length if consumes_query else 0
        reference += length if consumes_reference else 0
    return None


# --- the producer: BAM records → tasks; the workers read their own records ------------------


def task_ranges(bam_path: str | os.PathLike) -> Iterator[tuple[int, int]]:
    """(BGZF virtual offset, record count) of each task's :data:`RECORDS_PER_TASK` records.

    The job's process only walks the records, checking their order and that some carry a move
    table; each worker seeks to its task's records and reads them itself. The job's process
    feeds every worker and writes every result, so its time per task bounds how many workers a
    job can use: reading the fields of 256 records here cost 5.2 ms per task, walking them
    1.3 ms, and a task is two integers to send instead of 0.25 MB of reads. With writing,
    10.5-11.4 ms per task of 50-56 ms before (about five workers' worth), 4.5-5.7 of 66-89 ms
    after (~15); on a faster host, with cheaper tasks since, 1.9-2.1 of 27-33 ms (~14; walking
    costs what pysam's iteration alone does). bench_extract, hand-offs not counted.
    """
    any_records = any_moves = False
    with open_alignments(bam_path) as bam:
        start, count = bam.tell(), 0
        for record in sorted_records(bam, bam_path):
            any_records = True
            any_moves = any_moves or record.has_tag("mv")
            count += 1
            if count == RECORDS_PER_TASK:
                yield start, count
                start, count = bam.tell(), 0
    if any_records and not any_moves:
        raise KennelError(
            f"{bam_path}: no record carries a move table (mv tag); basecall with "
            "dorado --emit-moves"
        )
    if count:
        yield start, count


def reference_anchors(reference_path: str | os.PathLike, spec: FeatureSpec) -> dict:
    """Index of the anchor base (the motif's) in each reference contig, None where absent."""
    motif = AnchorMotif(spec.motif, spec.motif_anchor)
    try:
        with pysam.FastaFile(str(reference_path)) as fasta:
            return {name: motif.find(fasta.fetch(name)) for name in fasta.references}
    except (OSError, ValueError) as error:
        raise KennelError(f"{reference_path}: unreadable FASTA ({error})") from None


@dataclass(frozen=True)
class RecordSource:
    """Where a task's records come from, and what placing a read's window needs."""

    bam_path: str
    reference_path: str
    anchors: dict  # contig → anchor base index (see :func:`reference_anchors`)

    @classmethod
    def of(
        cls, bam_path: str | os.PathLike, reference_path: str | os.PathLike, spec: FeatureSpec
    ) -> RecordSource:
        """The BAM and FASTA's source, the FASTA read once here (a bad one fails here)."""
        return cls(str(bam_path), str(reference_path), reference_anchors(reference_path, spec))


def task_inputs(
    bam: pysam.AlignmentFile, start: int, count: int, source: RecordSource
) -> tuple[list[ReadInput], list[tuple[str, str]]]:
    """The reads to extract among ``count`` records at ``start``, and (read_id, reason) of those
    skipped before any signal work; records that never reach extraction (secondary etc.) are
    passed over. Whether a read has a signal is found out where it is fetched."""
    reads: list[ReadInput] = []
    skipped: list[tuple[str, str]] = []
    try:
        bam.seek(start)
        records = list(itertools.islice(bam, count))
    except OSError as error:  # walked whole by the job's process: the file changed since
        raise KennelError(f"{source.bam_path}: BAM truncated or corrupt ({error})") from None
    if len(records) < count:
        raise KennelError(f"{source.bam_path}: BAM shorter than when it was first read")
    for record in records:
        if record_fate(record) != CLASSIFIABLE:  # the signal is looked for when fetched
            continue
        if record.reference_name not in source.anchors:
            check_contigs_in_reference(
                source.bam_path, {record.reference_name}, source.reference_path
            )
        if record.query_sequence is None:  # SEQ "*": no bases to place on the signal
            skipped.append((record.query_name, "no_sequence"))
            continue
        anchor_reference = source.anchors[record.reference_name]
        if anchor_reference is None:
            skipped.append((record.query_name, "motif_not_found"))
            continue
        anchor = query_index_of(record, anchor_reference)
        if anchor is None:
            skipped.append((record.query_name, "anchor_not_aligned"))
            continue
        reads.append(
            ReadInput(
                read_id=record.query_name,
                sequence=record.query_sequence,
                moves=np.asarray(record.get_tag("mv")),  # the tag's own integer type
                trimmed=int(record.get_tag("ts")) if record.has_tag("ts") else 0,
                n_samples=int(record.get_tag("ns")) if record.has_tag("ns") else -1,
                anchor=anchor,
            )
        )
    return reads, skipped


def read_inputs(
    bam_path: str | os.PathLike,
    reference_path: str | os.PathLike,
    spec: FeatureSpec,
) -> Iterator[tuple[list[ReadInput], list[tuple[str, str]]]]:
    """Each task's (reads to extract, skipped before any signal work), read in one process: what
    the workers read, task by task."""
    source = RecordSource.of(bam_path, reference_path, spec)
    with open_alignments(bam_path) as bam:
        for start, count in task_ranges(bam_path):
            yield task_inputs(bam, start, count, source)


# --- the worker: one task's records → features ----------------------------------------------

_worker_state: dict = {}


def _init_worker(
    pod5_paths: Sequence[str], kmer_table: str, spec_json: str, source: RecordSource
) -> None:
    # one extraction per process at a time: the job's own process sets up again for each
    if "bam" in _worker_state:
        _worker_state.pop("bam").close()
    _worker_state["pod5"] = Pod5Set(pod5_paths, index_reads=False)
    _worker_state["table"] = escapepod.KmerTable.from_file(kmer_table)
    _worker_state["spec"] = FeatureSpec.from_json(spec_json)
    _worker_state["source"] = source
    _worker_state["bam"] = open_alignments(source.bam_path)


def _run_task(start: int, count: int) -> FeatureBatch:
    state = _worker_state
    reads, skipped = task_inputs(state["bam"], start, count, state["source"])
    return extract_batch(reads, skipped, state["pod5"], state["table"], state["spec"])


def extract_batch(
    reads: list[ReadInput],
    skipped: list[tuple[str, str]],
    pod5: Pod5Set,
    table: escapepod.KmerTable,
    spec: FeatureSpec,
) -> FeatureBatch:
    """Features for a batch of reads (the unit a worker process handles)."""
    skipped = list(skipped)
    fetched = pod5.signals([r.read_id for r in reads], picoamps=True, missing_ok=True)
    signals = {read.read_id: signal for read, signal in fetched}
    del fetched
    penalty = {"dwell_weight": spec.dwell_weight, "dwell_target": spec.dwell_target}
    refine_options = {name: value for name, value in penalty.items() if value is not None}
    refine_counts = {"refine_accepted": 0, "refine_rejected": 0}

    passed: list[tuple[ReadInput, np.ndarray, np.ndarray]] = []  # read, normalised, map
    for read, boundaries in zip(reads, move_table_maps(reads), strict=True):
        signal = signals.pop(read.read_id, None)  # the raw copy is dropped once normalised
        if signal is None:
            skipped.append((read.read_id, "no_signal"))
            continue
        if read.n_samples != len(signal) or not 0 <= read.trimmed < read.n_samples:
            skipped.append((read.read_id, "signal_length_mismatch"))
            continue
        if set(read.sequence) - set("ACGT"):
            skipped.append((read.read_id, "non_acgt_sequence"))
            continue
        if not spec.upstream <= read.anchor < len(read.sequence) - spec.downstream:
            skipped.append((read.read_id, "window_outside_read"))
            continue
        # a window narrower than k lets by a read without one whole k-mer to take levels from
        if len(read.sequence) < spec.kmer_k:
            skipped.append((read.read_id, "shorter_than_kmer"))
            continue
        if boundaries is None:
            skipped.append((read.read_id, "moves_sequence_mismatch"))
            continue
        # the median and MAD do not depend on order: normalised as stored, then read reversed
        # (5'->3'), without a reversed copy of the raw signal. A negative-stride view: escapepod
        # refuses such arrays, so whatever hands it to escapepod copies it first
        normalised = escapepod.mad_normalize(signal[read.trimmed : read.n_samples])[::-1]
        passed.append((read, normalised, boundaries))
    levels = expected_levels(table, [read.sequence for read, *_ in passed], spec.kmer_k)
    kept = [(r, n, b, e) for (r, n, b), e in zip(passed, levels, strict=True)]
    if spec.refine != "off" and kept:  # off: the move table's map, no DP
        refinements = [
            refine_near_anchor(n, b, e, r.anchor, spec, refine_options) for r, n, b, e in kept
        ]
        maps = choose_maps([b for _, _, b, _ in kept], refinements, spec, refine_counts)
        kept = [(r, n, b, e) for (r, n, _, e), b in zip(kept, maps, strict=True)]

    batch = FeatureBatch.empty(spec) if not kept else _features(kept, spec)
    batch.tallies = refine_counts
    if skipped:
        batch.skipped_read_id = np.array([r for r, _ in skipped], dtype=READ_ID_DTYPE)
        batch.skipped_reason = np.array([why for _, why in skipped], dtype=SKIP_REASON_DTYPE)
    return batch


def _features(kept, spec: FeatureSpec) -> FeatureBatch:
    n = len(kept)
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum([len(normalised) for _, normalised, _, _ in kept])

    # per-base means over every base, for the per-read fit onto level units
    maps = padded_rows([refined for _, _, refined, _ in kept], -1, np.int64)
    n_bases = maps.shape[1] - 1
    padded = np.stack([maps[:, :-1], maps[:, 1:]], axis=-1)
    padded[maps[:, 1:] < 0] = -1  # past a read's last base: unresolved, comes back as NaN
    flat = np.concatenate([normalised for _, normalised, _, _ in kept])
    _, base_means, _ = escapepod.span_statistics_batch(
        flat, offsets, padded.reshape(-1, 2), n_bases
    )

    # the per-read fit onto level units, for every read of the batch at once
    lengths = np.array([len(expected) for *_, expected in kept])
    expected_padded = padded_rows([expected for *_, expected in kept], 0.0, np.float32)
    anchors = np.array([read.anchor for read, *_ in kept])
    scale, shift = fit_levels(
        base_means[:, :n_bases].astype(np.float64),
        expected_padded.astype(np.float64),
        lengths,
        anchors - spec.upstream,
        anchors + spec.downstream + 1,
    )
    scale, shift = scale.astype(np.float32), shift.astype(np.float32)
    window = assemble_windows(kept, spec, scale, shift, flat, offsets, maps, expected_padded)
    dwell, mean, std = escapepod.span_statistics_batch(
        window.span_signal, window.span_offsets, window.spans.reshape(-1, 2), spec.window
    )
    expected_window = window.expected
    bases = np.stack([dwell, mean, std, expected_window, mean - expected_window], axis=-1)
    boundaries, chunk_start = window.boundaries, window.chunk_start
    signal = window.chunk_signal

    return FeatureBatch(
        read_id=np.array([read.read_id for read, *_ in kept], dtype=READ_ID_DTYPE),
        signal=signal.astype(np.float16),
        bases=np.nan_to_num(bases, nan=0.0).astype(np.float16),
        sequence=np.array(
            [
                read.sequence[read.anchor - spec.upstream : read.anchor + spec.downstream + 1]
                for read, *_ in kept
            ],
            dtype=f"S{spec.window}",
        ),
        scale=scale,
        shift=shift,
        anchor=np.array([read.anchor for read, *_ in kept], np.int32),
        boundaries=boundaries,
        chunk_start=chunk_start,
    )


# --- the driver: batches through a bounded pool, in order ------------------------------------


def extract_features(
    bam_path: str | os.PathLike,
    pod5_paths: Sequence[str | os.PathLike],
    reference_path: str | os.PathLike,
    kmer_table: str | os.PathLike,
    spec: FeatureSpec,
    plan: ThreadPlan,
) -> Iterator[FeatureBatch]:
    """Feature batches for a shard, in BAM order, from ``plan.extraction_workers`` processes."""
    if isinstance(pod5_paths, (str, os.PathLike)):
        pod5_paths = [pod5_paths]
    if file_sha256(kmer_table) != spec.kmer_sha256:  # the spec's table was parsed and checked
        raise KennelError(f"{kmer_table}: k-mer table differs from the feature spec's")
    Pod5Set(pod5_paths, index_reads=False)  # opened here too: bad files fail in one line
    source = RecordSource.of(bam_path, reference_path, spec)  # its anchors travel to workers
    yield from ordered_map(
        task_ranges(bam_path),
        _run_task,
        plan,
        _init_worker,
        ([str(p) for p in pod5_paths], str(kmer_table), spec.to_json(), source),
        TASKS_IN_FLIGHT_PER_WORKER,
    )


def extract_shard(
    bam_path: str | os.PathLike,
    pod5_paths: Sequence[str | os.PathLike],
    reference_path: str | os.PathLike,
    kmer_table: str | os.PathLike,
    output: str | os.PathLike,
    threads: int = 1,
    spec: FeatureSpec | None = None,
) -> dict[str, int]:
    """Write the shard's features file atomically; returns extracted/skipped counts."""
    spec = spec or spec_for(kmer_table)
    plan = plan_threads(threads, fused=False)
    batches = extract_features(bam_path, pod5_paths, reference_path, kmer_table, spec, plan)
    batches = logged_progress(batches, logging.getLogger("kennel.extract"), "reads extracted")
    with atomic_output(Path(output)) as temporary:
        return write_features(temporary, batches, spec)
