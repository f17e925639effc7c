"""A batch's feature windows and signal chunks, in level units, from the reads' maps and fits.

:func:`assemble_windows` does a whole batch with one numpy call per array;
:func:`assemble_windows_per_read` is the per-read definition the tests hold it to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kennel.trna.features import FeatureSpec


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
