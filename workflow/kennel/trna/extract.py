"""``kennel extract``: per-read features around the CCA/adapter anchor, with escapepod.

Per read: signal (pA) → trim ``ts`` → reverse, so signal runs 5'→3' like SEQ (direct RNA is read
3'→5') → move table → seq-to-signal map → MAD normalisation → ``refine_signal_map`` against the
expected k-mer levels (banded DP) → per-read linear fit onto level units → anchor the window at the
motif through the CIGAR → signal chunk justified on the window → ``span_statistics_batch`` for
per-base statistics. The DP holds the GIL, so reads are spread over worker processes in batches;
at most a few batches are in flight, so memory does not grow with the number of reads.
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
from kennel.trna.threads import ThreadPlan, ordered_map, plan_threads

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
MIN_FIT_BASES = 10
REFINE_MARGIN_BASES = 10  # refined on each side of the window, so its edges are not pinned
_QUERY_CONSUMING = {pysam.CMATCH, pysam.CINS, pysam.CSOFT_CLIP, pysam.CEQUAL, pysam.CDIFF}
_REFERENCE_CONSUMING = {pysam.CMATCH, pysam.CDEL, pysam.CREF_SKIP, pysam.CEQUAL, pysam.CDIFF}
_MATCHING = {pysam.CMATCH, pysam.CEQUAL, pysam.CDIFF}


@dataclass(frozen=True)
class ReadInput:
    """What extraction needs of one BAM record."""

    read_id: str
    sequence: str
    moves: np.ndarray  # the mv tag (its own integer type): stride, then one 0/1 per block
    trimmed: int  # ts
    n_samples: int  # ns
    anchor: int  # index of the anchor base in SEQ


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
        if record_fate(record, None) != CLASSIFIABLE:  # the signal is looked for when fetched
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


def expected_levels(table: escapepod.KmerTable, sequences: list[str], k: int) -> list[np.ndarray]:
    """Each sequence's level of the k-mer centred on each base; ends take the nearest full
    k-mer's level. One table call for the whole batch: the sequences are looked up joined, and
    the k-mers that span two of them fall on positions every read overwrites with its ends,
    which holds for sequences of at least ``k`` bases (shorter reads are skipped before)."""
    if not sequences:
        return []
    if min(len(sequence) for sequence in sequences) < k:
        raise ValueError(f"a sequence shorter than the k-mer ({k}) has no level of its own")
    centre = k // 2
    joined = np.asarray(table.extract_levels_at("".join(sequences), centre), dtype=np.float32)
    ends = list(itertools.accumulate(len(sequence) for sequence in sequences))
    # views of one array, a fill each (np.split costs ~2 µs a piece more)
    levels = [joined[end - len(s) : end] for s, end in zip(sequences, ends, strict=True)]
    for read_levels in levels:
        first, last = centre, len(read_levels) - (k - centre)
        read_levels[:first] = read_levels[first]
        read_levels[last + 1 :] = read_levels[last]
    return levels


def move_table_maps(reads: Sequence[ReadInput]) -> list[np.ndarray | None]:
    """Each read's base boundaries in its reversed (5'→3') trimmed signal, from the move tables
    of a whole batch at once; None where the table's moves do not count SEQ's bases.

    A read's trimmed signal has ``ns - ts`` samples; base k starts ``stride`` samples per block
    after the trim, at the k-th move, and in the reversed signal the last base comes first:
    boundaries ``[0, n - s[L-1], ..., n - s[0]]``. Per read this was four numpy calls, 10% of
    extraction's CPU on simulated reads; :func:`move_table_map_per_read` is kept as the tests'
    reference.
    """
    if not reads:
        return []
    count = len(reads)
    # an empty mv tag (no stride) counts no bases: a mismatch unless SEQ is empty too
    block_counts = np.fromiter((max(len(read.moves) - 1, 0) for read in reads), np.int64, count)
    strides = np.fromiter(
        (read.moves[0] if len(read.moves) else 0 for read in reads), np.int64, count
    )
    n_trimmed = np.fromiter((read.n_samples - read.trimmed for read in reads), np.int64, count)
    moves = np.flatnonzero(np.concatenate([read.moves[1:] for read in reads]))
    block_ends = np.cumsum(block_counts)
    owner = np.searchsorted(block_ends, moves, side="right")
    bases = np.bincount(owner, minlength=count)
    starts_in_time = strides[owner] * (moves - (block_ends - block_counts)[owner])
    # read i's k-th base start lands at index L_i - k of its boundaries; index 0 is n - n = 0
    map_ends = np.cumsum(bases + 1)
    map_starts = map_ends - (bases + 1)
    base_index = np.arange(len(moves)) - (np.cumsum(bases) - bases)[owner]
    flat = np.zeros(int(map_ends[-1]), np.int64)
    flat[map_starts[owner] + bases[owner] - base_index] = n_trimmed[owner] - starts_in_time
    return [
        flat[start:end] if n_bases == len(read.sequence) else None
        for read, start, end, n_bases in zip(
            reads, map_starts.tolist(), map_ends.tolist(), bases.tolist(), strict=True
        )
    ]


def move_table_map_per_read(read: ReadInput, n_trimmed: int) -> np.ndarray | None:
    """One read's :func:`move_table_maps` (the tests' reference)."""
    stride, blocks = int(read.moves[0]), read.moves[1:]
    starts_in_time = stride * np.flatnonzero(blocks)
    if len(starts_in_time) != len(read.sequence):
        return None
    boundaries_in_time = np.append(starts_in_time, n_trimmed)
    return n_trimmed - boundaries_in_time[::-1]


@dataclass
class Refinement:
    """One read's banded DP over its window plus a margin, before the choice between the
    refined map and the move table's (the stretch's maps count samples from its start)."""

    first: int  # index of the stretch's first base in the read
    start: int  # the stretch's first sample in the read's signal
    segment: np.ndarray  # the stretch's normalised samples
    levels: np.ndarray  # the expected level of each of its bases
    move_map: np.ndarray  # the move table's boundaries
    refined_map: np.ndarray  # the DP's boundaries


def _refine_near_anchor(
    normalised: np.ndarray,
    boundaries: np.ndarray,
    expected: np.ndarray,
    anchor: int,
    spec: FeatureSpec,
    options: dict,
) -> Refinement:
    """Refine the move-table map with escapepod's banded DP over the window plus a margin.

    Only the window's boundaries feed features, and the DP's cost grows with samples: refining
    a stretch of ~45 bases instead of the whole read is several times faster. The stretch's end
    boundaries stay where the move table put them. Which map is kept is decided for the whole
    batch at once (:func:`choose_maps`).
    """
    first = max(anchor - spec.upstream - REFINE_MARGIN_BASES, 0)
    last = min(anchor + spec.downstream + 1 + REFINE_MARGIN_BASES, len(expected))
    start, stop = int(boundaries[first]), int(boundaries[last])
    local_map = boundaries[first : last + 1] - start
    segment = np.ascontiguousarray(normalised[start:stop])
    levels = np.ascontiguousarray(expected[first:last])
    local, *_ = escapepod.refine_signal_map(segment, local_map.tolist(), levels, **options)
    return Refinement(first, start, segment, levels, local_map, np.asarray(local, np.int64))


def choose_maps(
    maps: list[np.ndarray], refinements: list[Refinement], spec: FeatureSpec, tally
) -> list[np.ndarray]:
    """Each read's boundaries after refinement, the costs of a whole batch in one pass.

    The DP can collapse bases on noisy, long-dwell stretches (seen on simulated RNA004-like
    reads), so with ``spec.refine`` checked the refined map is kept only when it explains the
    signal at least as well as the move table's; with always it is kept unless it empties a
    base. The choice is counted in ``tally``.
    """
    segments = [r.segment for r in refinements]
    levels = [r.levels for r in refinements]
    refined_cost = map_costs(segments, [r.refined_map for r in refinements], levels)
    if spec.refine == "always":
        keep = np.isfinite(refined_cost)  # an emptied base has no features: never kept
    else:
        keep = refined_cost <= map_costs(segments, [r.move_map for r in refinements], levels)
    return _apply_choice(maps, refinements, keep, tally)


def choose_maps_per_read(
    maps: list[np.ndarray], refinements: list[Refinement], spec: FeatureSpec, tally
) -> list[np.ndarray]:
    """:func:`choose_maps` read by read with :func:`_map_cost`: the tests' reference."""
    keep = []
    for r in refinements:
        cost = _map_cost(r.segment, r.refined_map, r.levels)
        if spec.refine == "always":
            keep.append(bool(np.isfinite(cost)))
        else:
            keep.append(cost <= _map_cost(r.segment, r.move_map, r.levels))
    return _apply_choice(maps, refinements, np.array(keep, bool), tally)


def _apply_choice(maps, refinements, keep, tally) -> list[np.ndarray]:
    tally["refine_accepted"] += int(keep.sum())
    tally["refine_rejected"] += int(len(keep) - keep.sum())
    chosen = []
    for boundaries, r, kept in zip(maps, refinements, keep, strict=True):
        if kept:
            boundaries = boundaries.copy()
            boundaries[r.first : r.first + len(r.refined_map)] = r.refined_map + r.start
        chosen.append(boundaries)
    return chosen


def map_costs(
    segments: list[np.ndarray], maps: list[np.ndarray], levels: list[np.ndarray]
) -> np.ndarray:
    """:func:`_map_cost` of every read of a batch at once (inf where a map empties a base):
    sums over each base by one ``reduceat`` over the concatenated segments, the dwell-weighted
    affine fit in closed form per read."""
    n = len(segments)
    lengths = np.fromiter((len(s) for s in segments), np.int64, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    # one trailing sample so that a map's end boundary is a valid index at the batch's end
    flat = np.concatenate([*segments, np.zeros(1, np.float32)]).astype(np.float64)
    counts = np.fromiter((len(m) for m in maps), np.int64, n)  # boundaries per read
    boundaries = np.concatenate(maps) + np.repeat(offsets[:-1], counts)
    base = np.ones(len(boundaries), bool)
    base[np.cumsum(counts) - 1] = False  # a read's last boundary starts no base
    dwell = np.diff(boundaries)[base[:-1]].astype(np.float64)
    base_read = np.repeat(np.arange(n), counts - 1)
    empty = np.bincount(base_read[dwell <= 0], minlength=n) > 0
    index = np.clip(boundaries, 0, len(flat) - 1)
    sums = np.add.reduceat(flat, index)[base]
    squares = np.add.reduceat(flat**2, index)[base]
    safe = np.where(dwell > 0, dwell, 1.0)
    means = sums / safe
    expected = np.concatenate(levels).astype(np.float64)
    first_base = np.concatenate([[0], np.cumsum(counts - 1)[:-1]])

    def per_read(values):
        return np.add.reduceat(values, first_base)

    total = per_read(dwell)
    mean_x = per_read(dwell * means) / total
    mean_y = per_read(dwell * expected) / total
    dx = means - mean_x[base_read]
    dy = expected - mean_y[base_read]
    sxx = per_read(dwell * dx * dx)
    # every base's mean the same (one base, a flat stretch): the fit is rank-deficient, and
    # least squares takes the smallest (scale, shift) on the line scale*mean + shift = mean_y
    flat_fit = sxx <= 1e-12 * per_read(dwell * means * means)
    scale = per_read(dwell * dx * dy) / np.where(flat_fit, 1.0, sxx)
    shift = mean_y - scale * mean_x
    scale[flat_fit] = mean_x[flat_fit] * mean_y[flat_fit] / (mean_x[flat_fit] ** 2 + 1)
    shift[flat_fit] = mean_y[flat_fit] / (mean_x[flat_fit] ** 2 + 1)
    within = per_read(squares - sums * means)
    fitted = scale[base_read] * means + shift[base_read]
    between = per_read(dwell * (fitted - expected) ** 2)
    costs = scale**2 * within + between
    costs[empty] = np.inf
    return costs


def _map_cost(signal: np.ndarray, boundaries: np.ndarray, expected: np.ndarray) -> float:
    """Per-sample squared error of ``signal`` against the levels a map assigns it, after the
    best affine fit of per-base means onto the levels (dwell-weighted)."""
    dwell = np.diff(boundaries).astype(np.float64)
    if (dwell <= 0).any():
        return np.inf
    signal = signal.astype(np.float64)
    sums = np.add.reduceat(signal, boundaries[:-1])
    squares = np.add.reduceat(signal**2, boundaries[:-1])
    means = sums / dwell
    within = squares - sums * means  # sum of squared deviations from each base's mean
    weights = np.sqrt(dwell)
    design = np.stack([means * weights, weights], axis=1)
    (scale, shift), *_ = np.linalg.lstsq(design, expected * weights, rcond=None)
    between = dwell * (scale * means + shift - expected) ** 2
    return float(scale**2 * within.sum() + between.sum())


def fit_levels_per_read(
    means: np.ndarray, expected: np.ndarray, exclude: slice
) -> tuple[float, float]:
    """The definition, one read at a time: what :func:`fit_levels` must equal (the tests and
    the benchmark compare the batched fit against it; extraction ran it per read before)."""
    keep = np.ones(len(means), bool)
    keep[exclude] = False
    keep &= np.isfinite(means)
    scale, shift = 1.0, 0.0
    for _ in range(2):
        if keep.sum() < MIN_FIT_BASES:
            break
        scale, shift = np.polyfit(means[keep], expected[keep], 1)
        residual = expected - (scale * means + shift)
        spread = 1.4826 * np.median(np.abs(residual[keep] - np.median(residual[keep])))
        keep &= np.abs(residual) <= 3 * max(spread, 1e-6)
    return float(scale), float(shift)


def fit_levels_read_by_read(means, expected, lengths, first, last):
    """:func:`fit_levels_per_read` over a batch, with :func:`fit_levels`'s signature."""
    fits = [
        fit_levels_per_read(means[i, :n], expected[i, :n], slice(first[i], last[i]))
        for i, n in enumerate(lengths)
    ]
    return np.array([f[0] for f in fits]), np.array([f[1] for f in fits])


def row_medians(values: np.ndarray, use: np.ndarray) -> np.ndarray:
    """Each row's median over its ``use`` entries (NaN for none): ``np.nanmedian`` of the
    masked rows, value for value, by one sort of the batch (nanmedian takes a masked-array
    path per call that cost as much as the rest of the fit)."""
    count = use.sum(axis=1)
    ordered = np.sort(np.where(use, values, np.inf), axis=1)
    rows = np.arange(len(values))
    low = ordered[rows, np.maximum((count - 1) // 2, 0)]
    high = ordered[rows, np.minimum(count // 2, values.shape[1] - 1)]
    median = (low + high) / 2
    median[count == 0] = np.nan
    return median


def fit_levels(
    means: np.ndarray,
    expected: np.ndarray,
    lengths: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per read, least squares ``expected ≈ scale·mean + shift`` over its bases outside
    ``[first, last)`` (the class window), refitted once without outliers beyond 3 robust SDs;
    for a whole batch at once (``means``/``expected``: (reads, bases), padded past ``lengths``).

    A read with fewer than ``MIN_FIT_BASES`` usable bases keeps its last fit (or 1, 0).
    """
    n, n_bases = means.shape
    column = np.arange(n_bases)[None, :]
    keep = (column < lengths[:, None]) & np.isfinite(means)
    keep &= (column < first[:, None]) | (column >= last[:, None])
    scale, shift = np.ones(n), np.zeros(n)
    active = np.ones(n, bool)
    x = np.where(keep, means, 0.0)
    for _ in range(2):
        active &= keep.sum(axis=1) >= MIN_FIT_BASES
        if not active.any():
            break
        rows = np.flatnonzero(active)
        use = keep[rows]
        count = use.sum(axis=1)
        xs, ys = np.where(use, x[rows], 0.0), np.where(use, expected[rows], 0.0)
        mean_x, mean_y = xs.sum(axis=1) / count, ys.sum(axis=1) / count
        dx = np.where(use, xs - mean_x[:, None], 0.0)
        dy = np.where(use, ys - mean_y[:, None], 0.0)
        slope = (dx * dy).sum(axis=1) / (dx * dx).sum(axis=1)
        scale[rows], shift[rows] = slope, mean_y - slope * mean_x
        residual = expected[rows] - (scale[rows, None] * x[rows] + shift[rows, None])
        centre = row_medians(residual, use)
        spread = 1.4826 * row_medians(np.abs(residual - centre[:, None]), use)
        keep[rows] = use & (np.abs(residual) <= 3 * np.maximum(spread, 1e-6)[:, None])
    return scale, shift


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
            _refine_near_anchor(n, b, e, r.anchor, spec, refine_options) for r, n, b, e in kept
        ]
        maps = choose_maps([b for _, _, b, _ in kept], refinements, spec, refine_counts)
        kept = [(r, n, b, e) for (r, n, _, e), b in zip(kept, maps, strict=True)]

    batch = FeatureBatch.empty(spec) if not kept else _features(kept, spec)
    batch.tallies = refine_counts
    if skipped:
        batch.skipped_read_id = np.array([r for r, _ in skipped], dtype=READ_ID_DTYPE)
        batch.skipped_reason = np.array([why for _, why in skipped], dtype=SKIP_REASON_DTYPE)
    return batch


def padded_rows(arrays: list[np.ndarray], fill, dtype) -> np.ndarray:
    """``(len(arrays), longest)`` matrix of the arrays, row by row, ``fill`` after each one's
    end; one scatter instead of a copy per read."""
    counts = np.fromiter((len(a) for a in arrays), np.int64, len(arrays))
    values = np.concatenate(arrays)
    rows = np.repeat(np.arange(len(arrays)), counts)
    columns = np.arange(len(values)) - np.repeat(np.cumsum(counts) - counts, counts)
    matrix = np.full((len(arrays), int(counts.max())), fill, dtype)
    matrix[rows, columns] = values
    return matrix


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


@dataclass
class Windows:
    """A batch's feature windows and signal chunks, and the samples the window statistics are
    read from."""

    span_signal: np.ndarray  # (samples,) signal in level units: whole reads or stretches of them
    span_offsets: np.ndarray  # (reads + 1,) where each read's stretch starts in span_signal
    spans: np.ndarray  # (reads, window, 2) the window's bases as spans of its stretch
    boundaries: np.ndarray  # (reads, window + 1) int32, samples of the read
    expected: np.ndarray  # (reads, window) float32 expected level of each window base
    chunk_start: np.ndarray  # (reads,) int32 first sample of the chunk (may be < 0)
    chunk_signal: np.ndarray  # (reads, 2, chunk_length) float32 levels, residual; 0 off-read


def assemble_windows(
    kept, spec: FeatureSpec, scale, shift, flat, offsets, maps, expected_padded
) -> Windows:
    """Level units, windows and chunks for a whole batch with one numpy call per array.

    ``flat`` is the batch's normalised signals concatenated at ``offsets``; ``scale``/``shift``
    (float32) the per-read fit; ``maps`` and ``expected_padded`` the reads' boundaries and
    expected levels as padded rows (-1 and 0 after each read's end). Only the samples that the
    window or the chunk covers are put in level units: a 512-sample chunk and a 25-base window
    cover about a quarter of a simulated read's samples. Equal, value for value, to
    :func:`assemble_windows_per_read` (the same float32 operations on the same samples).
    Samples that no base covers (a move table whose first block is not a move, the tail after
    the last base) get residual 0.
    """
    n = len(kept)
    rows = np.arange(n)
    lengths = np.diff(offsets)
    n_maps = np.fromiter((len(refined) for _, _, refined, _ in kept), np.int64, n)
    first = np.array([read.anchor - spec.upstream for read, *_ in kept])
    boundaries = maps[rows[:, None], first[:, None] + np.arange(spec.window + 1)]
    expected_window = expected_padded[rows[:, None], first[:, None] + np.arange(spec.window)]
    chunk_start = _chunk_start(boundaries[:, 0], boundaries[:, -1], spec).astype(np.int32)

    # each read's stretch: the window's samples and the chunk's samples inside the read
    chunk_end = chunk_start.astype(np.int64) + spec.chunk_length
    low = np.minimum(np.clip(chunk_start, 0, lengths), boundaries[:, 0])
    high = np.maximum(np.clip(chunk_end, 0, lengths), boundaries[:, -1])
    counts = high - low
    span_offsets = np.zeros(n + 1, np.int64)
    span_offsets[1:] = np.cumsum(counts)
    # both channels, levels and residuals, side by side with chunk_length zeros around them:
    # each chunk is then one row of a sliding-window view, and no row leaves the array
    length = spec.chunk_length
    channels = np.zeros((2, int(span_offsets[-1]) + 2 * length), np.float32)
    span_signal, residual_signal = channels[0, length:-length], channels[1, length:-length]
    # a slice per read and one copy: a gather through a per-sample index made the whole
    # assembly 7.1 ms per 256-read batch, 6.0 ms this way
    starts, ends = (offsets[:-1] + low).tolist(), (offsets[:-1] + high).tolist()
    stretch = np.concatenate([flat[a:b] for a, b in zip(starts, ends, strict=True)])
    np.multiply(np.repeat(scale, counts), stretch, out=span_signal)
    span_signal += np.repeat(shift, counts)

    # each sample's expected level: a read's levels repeated by its bases' dwells inside the
    # stretch, then the stretch's samples after the read's last boundary (if any) as NaN
    clipped = np.clip(maps, low[:, None], high[:, None])
    covered = np.arange(maps.shape[1] - 1) < (n_maps - 1)[:, None]
    dwell = np.where(covered, np.diff(clipped, axis=1), 0)
    tails = high - clipped[rows, n_maps - 1]
    levels = np.concatenate([expected_padded, np.full((n, 1), np.nan, np.float32)], axis=1)
    repeats = np.concatenate([dwell, tails[:, None]], axis=1)
    per_sample_expected = np.repeat(levels.ravel(), repeats.ravel())
    np.subtract(span_signal, per_sample_expected, out=residual_signal)
    residual_signal[np.isnan(per_sample_expected)] = 0.0

    # the chunks' rows, then their samples off the read zeroed; per-sample int64 indices over
    # every chunk (and the channels copied in rather than written in place) made the whole
    # assembly 6.0 ms per batch, 4.5 ms this way
    first_sample = length + span_offsets[:-1] + (chunk_start - low)
    windows = np.lib.stride_tricks.sliding_window_view(channels, length, axis=1)
    chunks = windows[:, first_sample]  # (channel, read, sample)
    step = np.arange(length)
    inside = (step >= -chunk_start[:, None]) & (step < (lengths - chunk_start)[:, None])
    chunk_signal = np.ascontiguousarray(np.where(inside, chunks, 0.0).transpose(1, 0, 2))
    return Windows(
        span_signal=span_signal,
        span_offsets=span_offsets,
        spans=np.stack([boundaries[:, :-1], boundaries[:, 1:]], axis=-1) - low[:, None, None],
        boundaries=boundaries.astype(np.int32),
        expected=expected_window,
        chunk_start=chunk_start,
        chunk_signal=chunk_signal,
    )


def assemble_windows_per_read(kept, spec: FeatureSpec, scale, shift, flat, offsets, *_) -> Windows:
    """:func:`assemble_windows` read by read from ``kept`` alone (the padded rows are not
    used): the definition, kept as the tests' reference."""
    n = len(kept)
    levels_signal = np.empty_like(flat)
    residual_signal = np.empty_like(flat)
    spans = np.empty((n, spec.window, 2), np.int64)
    boundaries = np.empty((n, spec.window + 1), np.int32)
    expected_window = np.empty((n, spec.window), np.float32)
    chunk_start = np.empty(n, np.int32)
    for i, (read, normalised, refined, expected) in enumerate(kept):
        first = read.anchor - spec.upstream
        last = read.anchor + spec.downstream + 1
        in_levels = scale[i] * normalised + shift[i]
        covered = int(refined[-1])
        levels_signal[offsets[i] : offsets[i + 1]] = in_levels
        residual = np.zeros_like(in_levels)
        residual[:covered] = in_levels[:covered] - np.repeat(expected, np.diff(refined))
        residual_signal[offsets[i] : offsets[i + 1]] = residual
        boundaries[i] = refined[first : last + 1]
        spans[i, :, 0] = refined[first:last]
        spans[i, :, 1] = refined[first + 1 : last + 1]
        expected_window[i] = expected[first:last]
        chunk_start[i] = _chunk_start(refined[first], refined[last], spec)
    chunk_signal = np.zeros((n, 2, spec.chunk_length), np.float32)
    for i in range(n):
        length = offsets[i + 1] - offsets[i]
        start, stop = chunk_start[i], chunk_start[i] + spec.chunk_length
        source = slice(max(start, 0), min(stop, length))
        target = slice(source.start - start, source.stop - start)
        chunk_signal[i, 0, target] = levels_signal[
            offsets[i] + source.start : offsets[i] + source.stop
        ]
        chunk_signal[i, 1, target] = residual_signal[
            offsets[i] + source.start : offsets[i] + source.stop
        ]
    return Windows(
        levels_signal, offsets, spans, boundaries, expected_window, chunk_start, chunk_signal
    )


def _chunk_start(window_start, window_end, spec: FeatureSpec):
    """First sample of the chunk for windows ``[window_start, window_end)`` (ints or arrays)."""
    if spec.justify == "start":
        return window_start
    if spec.justify == "end":
        return window_end - spec.chunk_length
    return (window_start + window_end) // 2 - spec.chunk_length // 2


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
