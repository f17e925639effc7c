"""The inputs leech 0.16.0's ``leech predict`` feeds its models, reimplemented for kennel.

A leech bundle's network is only as good as its inputs: it must see the chunks leech itself would
cut, from the same records, normalised and refined the same way. This module rebuilds them from
the facts and formulas of leech 0.16.0's predict path (read in its source and checked against the
tensors leech handed its model), with kennel's own code. The records and their motif hits come
from :mod:`kennel.trna.leech_reads`, the spec from :mod:`kennel.trna.leech_spec`; here:

1. **Signal**, **per-base features** and the k-mer residual of each read
   (:func:`kennel.trna.leech_signal.process_read`).
2. **Chunks** (:func:`extract_leech_chunks`): every accepted motif hit gives a focus base; a
   window of signal around it (or its bases), the feature window around it, and the sequence
   input, with the config's options applied as leech applies them.

Sequences are stored compactly (one k-mer code per signal sample, or the base codes of the k-mer
window) and expanded into the one-hot tensors the model takes only when a batch is fed to it:
:meth:`~kennel.trna.leech_chunks.LeechChunks.sequence_onehot`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from kennel.errors import KennelError
from kennel.io.kmers import KmerLevels
from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT
from kennel.trna.leech_chunks import CHUNK_ARRAYS, LeechChunks
from kennel.trna.leech_config import dwell_template
from kennel.trna.leech_levels import UNKNOWN_BASE, LevelTable
from kennel.trna.leech_reads import LeechReadInput, motif_hits
from kennel.trna.leech_signal import ReadSignal, process_read
from kennel.trna.leech_spec import LeechInputSpec

NO_BASE = -1  # k-mer code of a sample no base covers (zero in every one-hot channel)

# Why a selected read gets no chunk (leech writes it untagged)
READ_REASONS = (
    "no_motif",
    "motif_indel",  # its motif hits have indels, which the config's skip_motif_indels refuses
    "no_signal",
    "short_signal",
    "no_mapped_signal",
    "no_chunk",
)


def extract_leech_chunks(
    reads: Sequence[LeechReadInput],
    signals: Mapping[str, np.ndarray],
    spec: LeechInputSpec,
    levels: LevelTable | KmerLevels,
    calibrations: Mapping[str, tuple[float, float]] | None = None,
) -> LeechChunks:
    """Chunks of ``reads`` as leech predict cuts them; ``signals`` maps read ids to raw int16
    ADC signals (a read absent from it has no signal), ``calibrations`` to the POD5's
    (offset, scale) of each, which only a ``pa_scaling`` spec needs.

    Reads without a chunk are listed with their reason (:data:`READ_REASONS`), in input order.
    """
    table = levels if isinstance(levels, LevelTable) else LevelTable.from_kmer_levels(levels)
    if spec.kmer_table_sha256 is not None and table.sha256 != spec.kmer_table_sha256:
        raise KennelError(
            f"leech config key 'kmer_table_sha256': the model needs table "
            f"{spec.kmer_table_sha256[:12]}…, the table given is {table.sha256[:12]}…"
        )
    if spec.refine_kmer_centre >= table.k:
        raise KennelError(
            f"leech config key 'refine_kmer_center_idx': {spec.refine_kmer_centre} lies "
            f"outside a {table.k}-mer"
        )
    rows: dict[str, list] = {name: [] for name in CHUNK_ARRAYS}
    skipped_id: list[str] = []
    skipped_reason: list[str] = []
    for read in reads:
        # leech looks for hits before it looks for the signal
        hits = motif_hits(read, spec)
        raw = signals.get(read.read_id)
        reason = None if hits else _no_hit_reason(read, spec)
        if reason is None and raw is None:
            reason = "no_signal"
        if reason is None:
            if raw.dtype != np.int16:
                raise KennelError(
                    f"read {read.read_id}: signal is {raw.dtype}, not raw int16 ADC values "
                    "(leech normalises the ADC values, not picoamps)"
                )
            calibration = None if calibrations is None else calibrations.get(read.read_id)
            if spec.signal_norm == "pa_scaling" and calibration is None:
                raise KennelError(f"read {read.read_id}: pa_scaling needs its POD5 calibration")
            processed = process_read(read, raw, spec, table, calibration)
            reason = processed if isinstance(processed, str) else None
        if reason is None:
            n_before = len(rows["read_id"])
            for hit in hits:
                chunk = _cut_chunk(processed, hit.base_idx, spec)
                if chunk is None:
                    continue
                signal, sequence, features = chunk
                rows["read_id"].append(read.read_id)
                rows["base_idx"].append(hit.base_idx)
                rows["junction_indel"].append(hit.junction_indel)
                rows["junction_mapped"].append(hit.junction_mapped)
                rows["signal"].append(signal)
                rows["sequence"].append(sequence)
                rows["features"].append(features)
            if len(rows["read_id"]) == n_before:
                reason = "no_chunk"
        if reason is not None:
            skipped_id.append(read.read_id)
            skipped_reason.append(reason)
    n_channels, width = spec.feature_rows, spec.feature_width
    sequence_shape = (
        (spec.signal_len,) if spec.seq_encoding == "signal_kmer" else (spec.sequence_shape[1],)
    )
    sequence_dtype = np.int32 if spec.seq_encoding == "signal_kmer" else np.uint8

    def stacked(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        values = rows[name]
        if not values:
            return np.empty((0, *shape), dtype)
        return np.asarray(np.stack(values) if shape else values, dtype=dtype)

    return LeechChunks(
        seq_encoding=spec.seq_encoding,
        read_id=np.asarray(rows["read_id"], dtype=str),
        base_idx=stacked("base_idx", (), np.int64),
        junction_indel=stacked("junction_indel", (), np.int64),
        junction_mapped=stacked("junction_mapped", (), bool),
        signal=stacked("signal", (spec.signal_channels, spec.signal_len), np.float32),
        sequence=stacked("sequence", sequence_shape, sequence_dtype),
        features=stacked("features", (n_channels, width), np.float32),
        skipped_read_id=skipped_id,
        skipped_reason=skipped_reason,
    )


def _template_rows(features: np.ndarray, spec: LeechInputSpec) -> np.ndarray:
    """leech's dwell template rows: the base's dwell over each amino acid's expected dwell, at
    each position of the window the table covers (an expected dwell still 0 or less after the
    table's fill counts as 1); 1 where the table does not reach or the base has no dwell (past
    the read)."""
    template = dwell_template(spec.dwell_template)
    dwell = features[spec.feature_channels.index("dwell")]
    columns = np.arange(spec.feature_start, spec.feature_end + 1) - template.first
    covered = (columns >= 0) & (columns < template.expected.shape[1]) & (dwell > 0)
    rows = np.ones((template.rows, len(dwell)), np.float32)
    expected = template.expected[:, columns[covered]]
    rows[:, covered] = dwell[covered] / np.where(expected > 0, expected, np.float32(1))
    return rows


def _no_hit_reason(read: LeechReadInput, spec: LeechInputSpec) -> str:
    """Why a read has no motif hit: none that maps, or only hits with indels that the
    config's ``skip_motif_indels`` drops (counted apart: on aa-tRNA the adduct makes the CCA
    junction call badly, so these are often charged reads)."""
    if spec.skip_motif_indels and motif_hits(read, replace(spec, skip_motif_indels=False)):
        return "motif_indel"
    return "no_motif"


def _cut_chunk(
    read: ReadSignal, base_idx: int, spec: LeechInputSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(signal, sequence codes, features) around ``base_idx``, or None when the base has no
    refined segment (past the mapped bases, e.g. after a trailing deletion)."""
    boundaries = read.boundaries
    if not 0 <= base_idx < len(boundaries) - 1:
        return None
    if spec.base_justify == "start":
        focus = int(boundaries[base_idx])
    elif spec.base_justify == "end":
        focus = int(boundaries[base_idx + 1])
    else:
        focus = int((boundaries[base_idx] + boundaries[base_idx + 1]) // 2)

    # signal window, zero-padded where it runs off the reference span's signal
    length = spec.signal_len
    if spec.signal_context_bases is None:
        window_start = focus - spec.signal_context[0]
        window_end = window_start + length
    else:
        window_start, window_end = _base_window(boundaries, base_idx, spec)
    lo, hi = max(window_start, 0), min(window_end, len(read.signal))
    signal = np.zeros((spec.signal_channels, length), np.float32)
    if hi > lo:
        signal[0, lo - window_start : hi - window_start] = read.signal[lo:hi]
        if spec.signal_channels > 1:
            signal[1, lo - window_start : hi - window_start] = read.residual[lo:hi]
    if spec.recover_softclip_signal and spec.signal_context_bases is None:
        # leech fills a sample window past the alignment with the soft-clipped signal there;
        # the residual channel stays zero-padded (no expected levels outside the alignment)
        start = window_start + read.offset
        a, b = max(start, 0), min(window_end + read.offset, len(read.whole))
        if b > a:
            signal[0, a - start : b - start] = read.whole[a:b]

    # feature window, zero-padded past the mapped bases
    first = base_idx + spec.feature_start
    features = np.zeros((read.features.shape[0], spec.feature_width), np.float32)
    a, b = max(first, 0), min(base_idx + spec.feature_end + 1, read.features.shape[1])
    if b > a:
        features[:, a - first : b - first] = read.features[:, a:b]
    if spec.dwell_template is not None:
        features = np.concatenate([features, _template_rows(features, spec)])

    if spec.seq_encoding == "base_onehot":
        half = spec.kmer_len // 2
        sequence = _padded(read.codes, base_idx - half, base_idx + half + 1)
        _mask_side(sequence, half, spec.mask_seq_side)
    else:
        sequence = _sample_kmers(read, lo, hi, window_start, length, base_idx, spec.mask_seq_side)
    return signal, sequence, features


def _base_window(boundaries: np.ndarray, base_idx: int, spec: LeechInputSpec) -> tuple[int, int]:
    """The samples [start, end) of a base-defined window (leech's ``signal_context_bases``, L
    and R): from the first sample of base ``base_idx - L`` to the last of ``base_idx + R``, the
    bases clamped to the mapped ones, so the same bases are read whatever the read's speed.
    A span longer than ``signal_len`` is cropped to its middle; a shorter one is zero-padded
    after its end (the window starts at its first base, not around the focus)."""
    left, right = spec.signal_context_bases
    last = len(boundaries) - 2
    start = int(boundaries[min(max(base_idx - left, 0), last)])
    end = int(boundaries[min(max(base_idx + right, 0), last) + 1])
    if end - start > spec.signal_len:
        start += (end - start - spec.signal_len) // 2
        end = start + spec.signal_len
    return start, end


def _mask_side(codes: np.ndarray, focus: int, side: str | None) -> None:
    """Blank (in place) the bases of ``codes`` strictly on ``side`` of index ``focus``; an
    unknown base is zero in every one-hot channel, so the model sees no base there.

    A focus outside ``codes`` (a signal window whose bases all lie on one side of it) is
    clamped to the nearest end, as leech clamps it: only that end's base is kept.
    """
    if side is None or not len(codes):
        return
    focus = min(max(focus, 0), len(codes) - 1)
    if side == "left":
        codes[:focus] = UNKNOWN_BASE
    else:
        codes[focus + 1 :] = UNKNOWN_BASE


def _padded(codes: np.ndarray, start: int, stop: int) -> np.ndarray:
    """codes[start:stop], with UNKNOWN_BASE outside the sequence."""
    out = np.full(stop - start, UNKNOWN_BASE, np.uint8)
    a, b = max(start, 0), min(stop, len(codes))
    if b > a:
        out[a - start : b - start] = codes[a:b]
    return out


def _sample_kmers(
    read: ReadSignal,
    lo: int,
    hi: int,
    window_start: int,
    length: int,
    base_idx: int,
    mask_side: str | None,
) -> np.ndarray:
    """Per-sample k-mer codes of a window whose real signal is [lo, hi) (read coordinates).

    The bases covering [lo, hi) are given chunk-relative boundaries with the first pulled to 0
    and the last pushed to the window's end, so the padding at either end takes the nearest
    base's k-mer, as leech's encoding does. ``mask_side`` blanks the bases on that side of the
    focus base ``base_idx`` in the k-mer context, before the k-mers are read from it.
    """
    boundaries = read.boundaries
    first = max(int(np.searchsorted(boundaries, lo, side="right")) - 1, 0)
    last = min(int(np.searchsorted(boundaries, hi, side="left")), len(read.codes))
    codes = np.full(length, NO_BASE, np.int32)
    if last < first:
        return codes
    local = boundaries[first : last + 1] - window_start
    local[0] = 0
    local[-1] = length
    n_bases = len(local) - 1
    if n_bases <= 0:
        return codes
    before, after = SIGNAL_KMER_CONTEXT
    positions = before + 1 + after
    context = _padded(read.codes, first - before, last + after).astype(np.int32)
    _mask_side(context, base_idx - (first - before), mask_side)
    # leech's encoder reads past the context's end as "no base"
    context = np.append(context, np.full(positions, UNKNOWN_BASE, np.int32))
    kmers = np.lib.stride_tricks.sliding_window_view(context, positions)[:n_bases]
    kmer_codes = kmers @ (5 ** np.arange(positions - 1, -1, -1, dtype=np.int32))
    samples = np.arange(length)
    base = np.searchsorted(local[1:-1], samples, side="right")
    covered = (samples >= local[0]) & (samples < local[-1])
    codes[covered] = kmer_codes[base[covered]]
    return codes
