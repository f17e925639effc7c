"""One read's signal as leech 0.16.0's predict path prepares it, before chunks are cut from it
(:mod:`kennel.trna.leech_inputs`).

Raw ADC samples ``[ts:ns]``, reversed (direct RNA is read 3'->5'), normalised over the whole
trimmed read (median/MAD unless the config names another); the move table gives the
query->signal map, a Remora-style reference->query map from the CIGAR gives reference->signal,
and the signal is cropped to the reference span (a basecall-anchored model keeps the read's SEQ
and its whole signal instead). escapepod's ``refine_signal_map`` then moves
the base boundaries against the 9-mer table's expected levels (the fitted rescale is ignored).
Then the per-base features (the config's ``feature_channels``) and a per-sample k-mer residual,
the second signal channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import escapepod
import numpy as np

from kennel.models.leech_defaults import DWELL_CHANNELS, KMER_CHANNELS, LEVEL_CHANNELS
from kennel.trna.leech_levels import LevelTable, encode_bases
from kennel.trna.leech_reads import LeechReadInput, reference_to_query
from kennel.trna.leech_spec import LeechInputSpec

DWELL_WINDOW = 5  # bases in the dwell mean/std window
LOG_EPSILON = 1e-6  # leech's guard against log(0) and division by a zero mean dwell
REFINE_SEED = 42  # leech's fixed seed for escapepod's Theil-Sen subsample


@dataclass
class ReadSignal:
    """One read after normalisation, anchoring and refinement (what chunks are cut from)."""

    signal: np.ndarray  # (samples,) float32, the normalised signal of the chunks' bases
    whole: np.ndarray  # (samples,) float32, the read's, soft-clipped ends included
    offset: int  # where ``signal`` starts in ``whole``
    residual: np.ndarray  # (samples,) float32
    boundaries: np.ndarray  # (mapped bases + 1,) int64
    features: np.ndarray  # (channels, mapped bases) float32
    codes: np.ndarray  # (bases,) uint8: the reference slice's, or SEQ's (basecall anchor)


def _normalise(raw: np.ndarray, spec: LeechInputSpec, calibration: tuple[float, float] | None):
    """The reversed raw signal normalised by the config's ``signal_norm``, float32: leech's
    formulas, each computed in float64 on the int16 values as leech computes it, so the same
    float32 comes out (median/MAD, leech's default, is escapepod's, as in leech)."""
    if spec.signal_norm == "median_mad":
        return escapepod.mad_normalize(np.ascontiguousarray(raw, np.float32))
    if spec.signal_norm == "zscore":
        normalised = (raw - np.mean(raw)) / np.std(raw)
    elif spec.signal_norm == "quantile":  # median/MAD of the signal winsorised at 1% and 99%
        clipped = np.clip(raw, np.quantile(raw, 0.01), np.quantile(raw, 0.99))
        median = np.median(clipped)
        normalised = (raw - median) / (np.median(np.abs(clipped - median)) * 1.4826)
    else:  # pa_scaling: picoamps from the POD5's calibration, then the basecaller's shift/scale
        offset, scale = calibration
        normalised = ((raw + offset) * scale - spec.pa_mean) / spec.pa_stdev
    return normalised.astype(np.float32)


def process_read(
    read: LeechReadInput,
    raw: np.ndarray,
    spec: LeechInputSpec,
    table: LevelTable,
    calibration: tuple[float, float] | None = None,
) -> ReadSignal | str:
    """The read's chunk source, or why it has none (a signal at odds with its tags)."""
    trim, num_samples = read.trim, read.num_samples
    if num_samples > len(raw) or trim >= num_samples:
        # leech would slice past the end and map bases to samples that do not exist
        return "short_signal"
    trimmed = raw[trim:num_samples]
    length = len(trimmed)
    starts = np.flatnonzero(read.moves == 1).astype(np.int64) * read.stride
    query_map = np.append(starts, num_samples - trim)
    # direct RNA passes the pore 3'->5'; reversed, signal and bases both run 5'->3'
    signal = _normalise(trimmed[::-1], spec, calibration)
    query_map = length - query_map[::-1]

    if spec.anchor == "basecall":
        # the read's own bases, and its whole signal: leech crops only to a reference span, so
        # samples past the last base's end (a move table opening on stays) stay in the windows
        bases, base_map = read.query, query_map
        first, last = 0, length
    else:
        bases = read.reference
        base_map = np.floor(
            np.interp(reference_to_query(read.cigar), np.arange(query_map.size), query_map)
        ).astype(np.int64)
        first, last = int(base_map[0]), int(base_map[-1])
    if base_map[-1] <= base_map[0]:
        # no samples for the bases (e.g. a move table without moves); leech's own encoder
        # fails on such a read
        return "no_mapped_signal"
    whole, signal = signal, signal[first:last]
    boundaries = base_map - first

    codes = encode_bases(bases)
    centre = spec.refine_kmer_centre if spec.refine_kmer_centre >= 0 else table.k // 2
    expected = table.expected(codes, centre)
    boundaries = _refine(signal, boundaries, expected, spec)

    n_bases = len(boundaries) - 1
    # an alignment ending in a deletion maps fewer bases than its reference slice has
    mapped_expected = np.zeros(n_bases, np.float32)
    shared = min(n_bases, len(expected))
    mapped_expected[:shared] = expected[:shared]
    features = _base_features(
        signal,
        boundaries,
        mapped_expected,
        spec.feature_channels,
        spec.leech_python_path,
        numpy_levels=not spec.leech_core,
    )
    residual = _sample_residual(signal, boundaries, mapped_expected)
    return ReadSignal(signal, whole, first, residual, boundaries, features, codes)


def _refine(
    signal: np.ndarray, boundaries: np.ndarray, expected: np.ndarray, spec: LeechInputSpec
) -> np.ndarray:
    """Refined base boundaries; leech keeps the move-table map whenever escapepod cannot run.

    Only the boundaries are kept: escapepod's fitted rescale is weakly identified on the
    near-constant adapter and leech discards it.
    """
    if (
        not spec.refine_signal_map
        or spec.refine_scale_iters < 0
        or len(expected) == 0
        or len(boundaries) != len(expected) + 1
        or boundaries[0] < 0
        or boundaries[0] >= boundaries[-1]
        or boundaries[-1] > len(signal)
    ):
        return boundaries
    try:
        refined, *_ = escapepod.refine_signal_map(
            np.ascontiguousarray(signal, np.float32),
            boundaries.tolist(),
            np.nan_to_num(expected),
            half_bandwidth=spec.refine_half_bandwidth,
            scale_iters=max(0, spec.refine_scale_iters),
            seed=REFINE_SEED,
        )
    except Exception:  # noqa: BLE001 - leech falls back to the unrefined map on any failure
        return boundaries
    refined = np.asarray(refined, np.int64)
    return refined if len(refined) == len(boundaries) else boundaries


def _base_features(
    signal: np.ndarray,
    boundaries: np.ndarray,
    expected: np.ndarray,
    channels: Sequence[str],
    python_path: bool = False,
    numpy_levels: bool = False,
) -> np.ndarray:
    """The ``channels`` rows for every mapped base (float32, as leech stacks them).

    leech predict computes them on one of two paths, which differ in the last bits: its Rust
    extraction works in float32, its Python one (``python_path``: options the Rust one lacks,
    ``--backend python``, or no leech-core) computes the dwell rows and the k-mer residual in
    float64, then rounds; without leech-core (``numpy_levels``) the level rows are numpy's too.
    """
    dwell = np.diff(boundaries)
    rows: dict[str, np.ndarray] = {}
    if any(name in DWELL_CHANNELS for name in channels):
        rows.update(_dwell_rows(dwell, python_path))
    if any(name in LEVEL_CHANNELS or name in KMER_CHANNELS for name in channels):
        if numpy_levels:
            mean, median, sd, spread, skew, kurtosis = _numpy_level_rows(signal, boundaries)
            observed = mean  # the same segment means
        else:
            mean, median, sd, spread, skew, kurtosis = _escapepod_level_rows(signal, boundaries)
            # the Python path (given leech-core) takes the residual's mean from its own
            # segment sums, the level rows from leech-core, whose statistics are escapepod's
            observed = _segment_means(signal, boundaries) if python_path else mean
        residual = observed - expected
        rows.update(
            level_mean=mean,
            level_median=median,
            level_std=sd,
            level_range=spread,
            level_skew=skew,
            level_kurtosis=kurtosis,
            kmer_expected=expected,
            kmer_residual=residual,
            kmer_residual_abs=np.abs(residual),
        )
    if not channels:
        return np.zeros((0, len(dwell)), np.float32)
    return np.stack([rows[name] for name in channels]).astype(np.float32, copy=False)


def _dwell_rows(dwell: np.ndarray, python_path: bool) -> dict[str, np.ndarray]:
    """The dwell rows: each base's dwell, its log, and the mean, spread and ratio over the
    ``DWELL_WINDOW`` bases around it (edge bases repeated)."""
    half = DWELL_WINDOW // 2
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(dwell, half, mode="edge"), DWELL_WINDOW
    )
    epsilon = np.float32(LOG_EPSILON)
    if python_path:  # numpy on the integer dwells: float64 throughout, rounded at the end
        mean = windows.mean(axis=1).astype(np.float32)
        log = np.log(dwell + LOG_EPSILON)
        std = windows.std(axis=1)
    else:
        # the Rust extraction adds the epsilon and sums the window's deviations in float32
        windows = windows.astype(np.float32)
        mean = windows.mean(axis=1, dtype=np.float32)
        deviation = windows - mean[:, None]
        log = np.log((dwell.astype(np.float32) + epsilon).astype(np.float64))
        std = np.sqrt((deviation * deviation).mean(axis=1, dtype=np.float32))
    return {
        "dwell": dwell.astype(np.float32),
        "dwell_log": log.astype(np.float32),
        "dwell_mean": mean,
        "dwell_std": std.astype(np.float32),
        "dwell_ratio": (dwell / (mean + epsilon)).astype(np.float32),
    }


def _escapepod_level_rows(signal: np.ndarray, boundaries: np.ndarray) -> tuple[np.ndarray, ...]:
    """mean, median, std, range, skew and kurtosis of each base's samples, escapepod's, as
    leech-core computes them: "clamp" and numpy's median convention (leech's numpy fallback
    slices each base's span and takes np.median); a base without samples reads 0 in each."""
    spans = np.stack([boundaries[:-1], boundaries[1:]], axis=1)
    _, *rows = escapepod.span_statistics(
        np.ascontiguousarray(signal, np.float32),
        np.ascontiguousarray(spans, np.int64),
        median=True,
        range=True,
        skew=True,
        kurtosis=True,
        fill=0.0,
        bounds="clamp",
        median_convention="sort",
    )
    mean, sd, median, spread, skew, kurtosis = rows
    return mean, median, sd, spread, skew, kurtosis


def _numpy_level_rows(signal: np.ndarray, boundaries: np.ndarray) -> tuple[np.ndarray, ...]:
    """mean, median, std, range, skew and kurtosis of each base's samples as leech computes them
    without leech-core: the mean from segment sums, the rest base by base in numpy (float32,
    the moments in float64; 0 for a base without samples or, for the moments, without spread)."""
    n_bases = len(boundaries) - 1
    median, sd, spread, skew, kurtosis = (np.zeros(n_bases, np.float32) for _ in range(5))
    for i in np.flatnonzero(np.diff(boundaries) > 0):
        samples = signal[boundaries[i] : boundaries[i + 1]]
        if not len(samples):
            continue
        median[i], sd[i] = np.median(samples), np.std(samples)
        spread[i] = np.max(samples) - np.min(samples)
        centred = samples.astype(np.float64) - samples.astype(np.float64).mean()
        m2 = np.mean(centred**2)
        if m2 != 0.0:
            skew[i] = np.mean(centred**3) / m2**1.5
            kurtosis[i] = np.mean(centred**4) / m2**2 - 3.0
    return _segment_means(signal, boundaries), median, sd, spread, skew, kurtosis


def _segment_means(signal: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """Each base's mean signal as leech's Python extraction takes it: float32 sums of its
    samples (numpy's, segment by segment, the last segment ending at the last base's end),
    divided in float64 by the samples inside the signal; 0 for a base with none."""
    starts, ends = boundaries[:-1], boundaries[1:]
    means = np.zeros(len(starts), np.float32)
    inside = (ends > starts) & (starts < len(signal))
    if not inside.any():
        return means
    first, last = starts[inside], np.minimum(ends[inside], len(signal))
    cuts = np.append(first, last[-1]) if last[-1] < len(signal) else first
    sums = np.add.reduceat(np.asarray(signal, np.float32), cuts)[: len(first)]
    means[inside] = (sums / (last - first)).astype(np.float32)
    return means


def _sample_residual(
    signal: np.ndarray, boundaries: np.ndarray, expected: np.ndarray
) -> np.ndarray:
    """Signal minus the expected level of the base each sample belongs to; 0 where that base has
    no level (no full k-mer) or no base covers the sample."""
    residual = np.zeros(len(signal), np.float32)
    per_sample = np.repeat(expected, np.maximum(np.diff(boundaries), 0))
    start = int(boundaries[0])
    stop = min(start + len(per_sample), len(signal))
    if stop <= start:
        return residual
    level = per_sample[: stop - start]
    residual[start:stop] = np.where(level != 0, signal[start:stop] - level, 0)
    return residual
