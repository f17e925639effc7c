"""One read's signal as leech 0.16.0's predict path prepares it, before chunks are cut from it
(:mod:`kennel.trna.leech_inputs`).

Raw ADC samples ``[ts:ns]``, reversed (direct RNA is read 3'->5'), normalised over the whole
trimmed read (median/MAD unless the config names another); the move table gives the
query->signal map, a Remora-style reference->query map from the CIGAR gives reference->signal,
and the signal is cropped to the reference span. escapepod's ``refine_signal_map`` then moves
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
from kennel.trna.leech_reads import LeechReadInput, reference_to_query
from kennel.trna.leech_spec import LeechInputSpec, LevelTable, encode_bases

DWELL_WINDOW = 5  # bases in the dwell mean/std window
LOG_EPSILON = 1e-6  # leech's guard against log(0) and division by a zero mean dwell
REFINE_SEED = 42  # leech's fixed seed for escapepod's Theil-Sen subsample


@dataclass
class ReadSignal:
    """One read after normalisation, anchoring and refinement (what chunks are cut from)."""

    signal: np.ndarray  # (samples,) float32, the reference span's normalised signal
    whole: np.ndarray  # (samples,) float32, the read's, soft-clipped ends included
    offset: int  # where ``signal`` starts in ``whole``
    residual: np.ndarray  # (samples,) float32
    boundaries: np.ndarray  # (mapped bases + 1,) int64
    features: np.ndarray  # (channels, mapped bases) float32
    codes: np.ndarray  # (reference bases,) uint8


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

    reference_map = np.floor(
        np.interp(reference_to_query(read.cigar), np.arange(query_map.size), query_map)
    ).astype(np.int64)
    first, last = int(reference_map[0]), int(reference_map[-1])
    if last <= first:
        # no samples for the aligned span (e.g. a move table without moves); leech's own
        # encoder fails on such a read
        return "no_mapped_signal"
    whole, signal = signal, signal[first:last]
    boundaries = reference_map - first

    codes = encode_bases(read.reference)
    centre = spec.refine_kmer_centre if spec.refine_kmer_centre >= 0 else table.k // 2
    expected = table.expected(codes, centre)
    boundaries = _refine(signal, boundaries, expected, spec)

    n_bases = len(boundaries) - 1
    # an alignment ending in a deletion maps fewer bases than its reference slice has
    mapped_expected = np.zeros(n_bases, np.float32)
    shared = min(n_bases, len(expected))
    mapped_expected[:shared] = expected[:shared]
    features = _base_features(signal, boundaries, mapped_expected, spec.feature_channels)
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
        spec.refine_scale_iters < 0
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
    signal: np.ndarray, boundaries: np.ndarray, expected: np.ndarray, channels: Sequence[str]
) -> np.ndarray:
    """The ``channels`` rows for every mapped base (float32, as leech stacks them)."""
    dwell = np.diff(boundaries)
    rows: dict[str, np.ndarray] = {}
    if any(name in DWELL_CHANNELS for name in channels):
        half = DWELL_WINDOW // 2
        windows = np.lib.stride_tricks.sliding_window_view(
            np.pad(dwell, half, mode="edge"), DWELL_WINDOW
        )
        # float32 where leech's default (Rust) extraction works in float32: the epsilon is
        # added and the window's deviations summed in float32; its numpy fallback, in float64,
        # differs from the tensors leech predict fed its model by an ulp or two
        dwell32 = dwell.astype(np.float32)
        epsilon = np.float32(LOG_EPSILON)
        windows = windows.astype(np.float32)
        mean = windows.mean(axis=1, dtype=np.float32)
        deviation = windows - mean[:, None]
        rows["dwell"] = dwell32
        rows["dwell_log"] = np.log((dwell32 + epsilon).astype(np.float64)).astype(np.float32)
        rows["dwell_mean"] = mean
        rows["dwell_std"] = np.sqrt((deviation * deviation).mean(axis=1, dtype=np.float32))
        rows["dwell_ratio"] = (dwell / (mean + epsilon)).astype(np.float32)
    if any(name in LEVEL_CHANNELS or name in KMER_CHANNELS for name in channels):
        spans = np.stack([boundaries[:-1], boundaries[1:]], axis=1)
        # "clamp" and numpy's median convention: leech's numpy fallback slices each base's
        # span and takes np.median; an empty span reads 0 in every statistic
        _, mean, sd, median, spread, skew, kurtosis = escapepod.span_statistics(
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
        residual = mean - expected
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
