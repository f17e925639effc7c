"""A read's signal against its bases: the move-table map, its refinement, the fit onto levels.

Each step runs on a whole batch of reads with one numpy (or escapepod) call per array; the
``*_per_read`` forms are the per-read definitions the tests hold the batch forms to.

* :func:`move_table_maps`: base boundaries in the reversed (5'→3') trimmed signal, from dorado's
  ``mv``/``ts``/``ns``.
* :func:`expected_levels`: each base's level of the k-mer centred on it.
* :func:`choose_maps`: escapepod's ``refine_signal_map`` near the anchor, kept or not by the
  feature spec's ``refine`` mode (:func:`map_costs` compares the two maps).
* :func:`fit_levels`: the per-read robust linear fit of base means onto expected levels.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import escapepod
import numpy as np

from kennel.trna.features import FeatureSpec

MIN_FIT_BASES = 10
REFINE_MARGIN_BASES = 10  # refined on each side of the window, so its edges are not pinned


@dataclass(frozen=True)
class ReadInput:
    """What extraction needs of one BAM record."""

    read_id: str
    sequence: str
    moves: np.ndarray  # the mv tag (its own integer type): stride, then one 0/1 per block
    trimmed: int  # ts
    n_samples: int  # ns
    anchor: int  # index of the anchor base in SEQ


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


def refine_near_anchor(
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
