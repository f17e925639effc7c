"""The inputs leech 0.16.0's ``leech predict`` feeds its models, reimplemented for kennel.

A leech bundle's network is only as good as its inputs: it must see the chunks leech itself would
cut, from the same records, normalised and refined the same way. This module rebuilds them from
the facts and formulas of leech 0.16.0's predict path (read in its source and checked against the
tensors leech handed its model), with kennel's own code:

1. **Records** (:func:`select_record`): primary, mapped (either strand), MAPQ >= the minimum,
   with ``mv`` and ``ns`` tags and a SEQ. Everything else is dropped from leech's output BAM.
2. **Per read** (:func:`leech_read_input`): the move table, ``ts``/``ns``, the CIGAR and the
   aligned reference slice, small and picklable so that batches travel to worker processes.
3. **Signal** (:func:`extract_leech_chunks`): raw ADC samples ``[ts:ns]``, reversed (direct RNA is
   read 3'->5'), median/MAD-normalised over the whole trimmed read; the move table gives the
   query->signal map, a Remora-style reference->query map from the CIGAR gives reference->signal,
   and the signal is cropped to the reference span. escapepod's ``refine_signal_map`` then moves
   the base boundaries against the 9-mer table's expected levels (the fitted rescale is ignored).
4. **Per-base features** (the config's ``feature_channels``) and a per-sample k-mer residual as
   a second signal channel.
5. **Chunks**: every motif hit in the aligned reference span that maps cleanly through the CIGAR
   (both ends in aligned blocks, mapped length within 3 of the motif's) gives a focus base; a
   fixed window of signal around the middle of its refined segment, the feature window around it,
   and the sequence input.

Sequences are stored compactly (one k-mer code per signal sample, or the base codes of the k-mer
window) and expanded into the one-hot tensors the model takes only when a batch is fed to it:
:meth:`LeechChunks.sequence_onehot`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import escapepod
import numpy as np
import pysam

from kennel.errors import KennelError
from kennel.io.bam import LEECH_RECORD_REASONS
from kennel.io.kmers import KmerLevels, read_kmer_levels

LEECH_VERSION = "0.16.0"

SEQ_ENCODINGS = ("signal_kmer", "base_onehot")
JUSTIFICATIONS = ("start", "center", "end")
DWELL_CHANNELS = ("dwell", "dwell_log", "dwell_mean", "dwell_std", "dwell_ratio")
LEVEL_CHANNELS = (
    "level_mean",
    "level_median",
    "level_std",
    "level_range",
    "level_skew",
    "level_kurtosis",
)
KMER_CHANNELS = ("kmer_expected", "kmer_residual", "kmer_residual_abs")
FEATURE_CHANNELS = DWELL_CHANNELS + LEVEL_CHANNELS + KMER_CHANNELS
# leech's defaults for a config that lacks the key (InferenceSpec.from_config)
DEFAULT_FEATURE_CHANNELS = DWELL_CHANNELS + LEVEL_CHANNELS[:4] + KMER_CHANNELS
# leech cuts the per-sample k-mer context with a fixed (4, 4), whatever the config says, on its
# Python path; other contexts would differ between its two backends, so only this one is taken
SIGNAL_KMER_CONTEXT = (4, 4)
DWELL_WINDOW = 5  # bases in the dwell mean/std window
LOG_EPSILON = 1e-6  # leech's guard against log(0) and division by a zero mean dwell
MAX_MOTIF_INDEL = 3  # |mapped length - motif length| a motif hit may have
REFINE_SEED = 42  # leech's fixed seed for escapepod's Theil-Sen subsample
UNKNOWN_BASE = 4  # base code of anything that is not A/C/G/T(U)
NO_BASE = -1  # k-mer code of a sample no base covers (zero in every one-hot channel)

# Why select_record drops a record, in the order leech tests them
RECORD_REASONS = LEECH_RECORD_REASONS
# The per-chunk arrays of LeechChunks, in the order they are stored
CHUNK_ARRAYS = (
    "read_id",
    "base_idx",
    "junction_indel",
    "junction_mapped",
    "signal",
    "sequence",
    "features",
)
# Why a selected read gets no chunk (leech writes it untagged)
READ_REASONS = ("no_motif", "no_signal", "short_signal", "no_mapped_signal", "no_chunk")

_MATCH_OPS = frozenset((pysam.CMATCH, pysam.CEQUAL, pysam.CDIFF))
_BASE_CODES = np.full(256, UNKNOWN_BASE, np.uint8)
for _code, _bases in enumerate(("Aa", "Cc", "Gg", "TtUu")):
    for _base in _bases:
        _BASE_CODES[ord(_base)] = _code


# --- the spec -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeechInputSpec:
    """What a leech 0.16.0 model config says about its inputs, checked to be what kennel does.

    Build it with :meth:`from_config`; it refuses, naming the config key, any setting this
    reimplementation does not reproduce, so that a model never silently gets inputs it was not
    trained on.
    """

    signal_len: int
    signal_context: tuple[int, int]  # samples before/after the focus sample
    signal_channels: int  # 1: signal; 2: signal and k-mer residual
    seq_encoding: str
    kmer_len: int  # the model's base window (base_onehot bases, and the feature width bound)
    feature_start: int  # first feature column, relative to the focus base
    feature_end: int  # last feature column (inclusive)
    feature_channels: tuple[str, ...]
    motif: str
    motif_offset: int
    base_justify: str
    require_query_mapping: bool
    refine_half_bandwidth: int
    refine_scale_iters: int  # < 0: no refinement
    refine_kmer_centre: int  # -1: the table's k // 2
    kmer_table_sha256: str | None  # None: the config predates the key, nothing to check

    @property
    def feature_width(self) -> int:
        return self.feature_end - self.feature_start + 1

    @property
    def sequence_shape(self) -> tuple[int, int]:
        """Shape of one chunk's expanded sequence input."""
        if self.seq_encoding == "signal_kmer":
            return (4 * sum(SIGNAL_KMER_CONTEXT) + 4, self.signal_len)
        return (4, 2 * (self.kmer_len // 2) + 1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LeechInputSpec:
        fields = json.loads(text)
        for key in ("signal_context", "feature_channels"):
            fields[key] = tuple(fields[key])
        return cls(**fields)

    def differences(self, other: LeechInputSpec) -> list[str]:
        """Names and values of the fields that differ, for an error message."""
        mine, theirs = asdict(self), asdict(other)
        return [f"{k}: {mine[k]!r} != {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]

    @classmethod
    def from_config(cls, config: Mapping, kmer_table_sha256: str | None = None) -> LeechInputSpec:
        """The spec of a leech model config (a bundle's ``config`` or a checkpoint's JSON).

        ``kmer_table_sha256``, when given, is the SHA-256 of the k-mer table that will be used;
        a config recording another table is refused. Defaults for absent keys are leech's own.
        """

        def refuse(key: str, why: str) -> KennelError:
            return KennelError(f"leech config key {key!r}: {why}")

        def check(key: str, default, allowed: Iterable, why: str):
            value = config.get(key, default)
            if value not in tuple(allowed):
                raise refuse(key, f"{value!r} is not supported ({why})")
            return value

        if config.get("is_remora"):
            raise refuse("is_remora", "Remora models are not supported")
        check("anchor", "reference", ("reference",), "only reference-anchored chunks")
        check("signal_norm", "median_mad", ("median_mad",), "only median/MAD normalisation")
        # leech predict reverses by its own --no-reverse-signal flag, not by this key, so a model
        # trained on unreversed signal would be fed reversed signal by leech predict itself
        check("reverse_signal", True, (True,), "only reversed (5'->3') RNA signal")
        check("recover_softclip_signal", False, (False,), "soft-clip signal recovery")
        check("signal_context_bases", None, (None,), "only sample-defined signal windows")
        check("mask_seq_side", None, (None,), "sequence masking")
        check("skip_motif_indels", False, (False,), "only the lenient motif check")
        check("dwell_template_table", None, (None, ""), "dwell template channels")
        for legacy in ("feature_left", "feature_right", "dwell_margin_left", "dwell_margin_right"):
            if config.get(legacy) is not None:
                raise refuse(legacy, "legacy feature-window keys are not supported")

        signal_channels = int(config.get("signal_in_channels", 1))
        if signal_channels not in (1, 2):
            raise refuse("signal_in_channels", f"{signal_channels} is not 1 or 2")
        # two channels need the residual, which needs the expected levels refinement loads
        refine = bool(config.get("refine_signal_map", True)) or signal_channels > 1
        if not refine:
            raise refuse("refine_signal_map", "False is not supported (only refined maps)")

        signal_len = int(config.get("signal_len", 100))
        left, right = config.get("left_context"), config.get("right_context")
        if left is not None and right is not None:
            signal_context = (int(left), int(right))
        else:
            signal_context = (signal_len // 2, signal_len // 2)
        if signal_len <= 0 or min(signal_context) < 0 or sum(signal_context) != signal_len:
            raise refuse(
                "left_context",
                f"signal context {signal_context} must be non-negative and add up to "
                f"signal_len={signal_len}",
            )

        seq_encoding = check(
            "seq_encoding", "base_onehot", SEQ_ENCODINGS, f"only {', '.join(SEQ_ENCODINGS)}"
        )
        if seq_encoding == "signal_kmer":
            context = tuple(int(x) for x in config.get("signal_kmer_context", SIGNAL_KMER_CONTEXT))
            if context != SIGNAL_KMER_CONTEXT:
                raise refuse(
                    "signal_kmer_context", f"{list(context)} is not supported (only [4, 4])"
                )

        kmer_len = int(config.get("kmer_len", 9))
        half = kmer_len // 2
        feature_start = config.get("feature_start")
        feature_end = config.get("feature_end")
        feature_start = -half if feature_start is None else int(feature_start)
        feature_end = half if feature_end is None else int(feature_end)
        width = feature_end - feature_start + 1
        if width <= 0:
            raise refuse("feature_end", f"feature window {feature_start}..{feature_end} is empty")
        if width > kmer_len:
            # leech then narrows the window to kmer_len, or not, by the architecture's
            # wide_features flag, which the config does not record
            raise refuse(
                "kmer_len",
                f"feature window {feature_start}..{feature_end} ({width} bases) wider than "
                f"kmer_len={kmer_len} is not supported",
            )

        channels = tuple(config.get("feature_channels") or DEFAULT_FEATURE_CHANNELS)
        unknown = [name for name in channels if name not in FEATURE_CHANNELS]
        if unknown:
            raise refuse("feature_channels", f"unknown channel {unknown[0]!r}")
        num_features = config.get("num_features")
        if num_features is not None and int(num_features) != len(channels):
            raise refuse(
                "num_features",
                f"{num_features} != the {len(channels)} feature_channels (extra channels such "
                "as dwell templates are not supported)",
            )

        motif = config.get("motif")
        if not motif or not isinstance(motif, str):
            raise refuse("motif", f"{motif!r}: a motif is required")
        motif_offset = int(config.get("motif_offset", 0))
        base_justify = check("base_justify", "center", JUSTIFICATIONS, "start, center or end")

        centre = int(config.get("refine_kmer_center_idx", -1))
        if centre < -1:
            raise refuse("refine_kmer_center_idx", f"{centre} is negative")
        sha = config.get("kmer_table_sha256")
        if sha is not None and kmer_table_sha256 is not None and sha != kmer_table_sha256:
            raise refuse(
                "kmer_table_sha256",
                f"the model was trained against table {sha[:12]}…, the table given is "
                f"{kmer_table_sha256[:12]}…",
            )

        return cls(
            signal_len=signal_len,
            signal_context=signal_context,
            signal_channels=signal_channels,
            seq_encoding=seq_encoding,
            kmer_len=kmer_len,
            feature_start=feature_start,
            feature_end=feature_end,
            feature_channels=channels,
            motif=motif.upper(),
            motif_offset=motif_offset,
            base_justify=base_justify,
            require_query_mapping=bool(config.get("require_query_mapping", True)),
            refine_half_bandwidth=int(config.get("refine_half_bandwidth", 5)),
            refine_scale_iters=int(config.get("refine_scale_iters", 2)),
            refine_kmer_centre=centre,
            kmer_table_sha256=sha,
        )


# --- expected levels ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelTable:
    """A k-mer level table as one float32 array indexed by the k-mer's base-4 code (A=0..T=3).

    Picklable in one piece (1 MiB for 9-mers) and looked up without a dictionary per base.
    float32, as leech stores the levels it looks up.
    """

    k: int
    levels: np.ndarray  # (4**k,) float32
    sha256: str

    @classmethod
    def from_kmer_levels(cls, table: KmerLevels) -> LevelTable:
        levels = np.zeros(4**table.k, np.float32)
        codes = _BASE_CODES[np.frombuffer("".join(table.levels).encode(), np.uint8)]
        weights = 4 ** np.arange(table.k - 1, -1, -1, dtype=np.int64)
        index = codes.reshape(-1, table.k).astype(np.int64) @ weights
        levels[index] = np.fromiter(table.levels.values(), np.float64, len(table.levels))
        return cls(k=table.k, levels=levels, sha256=table.sha256)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> LevelTable:
        return cls.from_kmer_levels(read_kmer_levels(path))

    def expected(self, codes: np.ndarray, centre: int) -> np.ndarray:
        """Level of the k-mer starting ``centre`` bases before each base; 0 where no full
        ACGT k-mer fits (leech's convention, which the residual channel relies on)."""
        k, n = self.k, len(codes)
        expected = np.zeros(n, np.float32)
        if n < k:
            return expected
        windows = np.lib.stride_tricks.sliding_window_view(codes, k)
        # a k-mer with a non-ACGT base has no level and leaves its centre base at 0
        full = (windows < 4).all(axis=1)
        index = windows.astype(np.int64) @ (4 ** np.arange(k - 1, -1, -1, dtype=np.int64))
        expected[centre : centre + len(index)] = np.where(full, self.levels[index % 4**k], 0)
        return expected


def encode_bases(sequence: str) -> np.ndarray:
    """uint8 base codes: A, C, G, T/U (either case) -> 0..3, anything else -> 4."""
    return _BASE_CODES[np.frombuffer(sequence.encode("ascii"), np.uint8)]


# --- records and per-read inputs ----------------------------------------------------------------


def select_record(record: pysam.AlignedSegment, min_mapq: int = 0) -> str | None:
    """Why ``leech predict`` leaves ``record`` out of its output BAM, or None if it keeps it.

    The strand is not looked at: a reverse-strand primary is processed like a forward one.
    """
    if record.is_unmapped:
        return "unmapped"
    if record.is_secondary:
        return "secondary"
    if record.is_supplementary:
        return "supplementary"
    if record.mapping_quality < min_mapq:
        return "low_mapq"
    if not record.has_tag("mv"):
        return "no_moves"
    if not record.has_tag("ns"):
        return "no_sample_count"
    if record.query_name is None or record.query_sequence is None:
        return "no_seq"
    return None


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


def leech_read_input(record: pysam.AlignedSegment, reference_seq: str) -> LeechReadInput:
    """The per-read input of a record :func:`select_record` kept; ``reference_seq`` is its whole
    contig (leech takes it from the BAM header's @SQ sequences when there are any, otherwise
    from ``--reference-fasta``; a read whose contig it lacks gets no chunk there)."""
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
    )


@dataclass(frozen=True)
class MotifHit:
    """A motif hit leech accepts: where its focus base is, and how the junction mapped."""

    base_idx: int  # focus base, 0-based in the aligned reference slice
    junction_indel: int  # mapped query length of the motif minus the motif's length
    junction_mapped: bool  # both motif ends fell in aligned blocks


def motif_hits(read: LeechReadInput, spec: LeechInputSpec) -> list[MotifHit]:
    """Every accepted motif hit of ``read``, 5'->3' (overlapping hits included)."""
    motif, hits = spec.motif, []
    at = read.reference.find(motif)
    while at >= 0:
        span = _query_span(read.cigar, at, at + len(motif))
        indel = 0 if span is None else (span[1] - span[0]) - len(motif)
        if not spec.require_query_mapping or (span is not None and abs(indel) <= MAX_MOTIF_INDEL):
            hits.append(MotifHit(at + spec.motif_offset, indel, span is not None))
        at = read.reference.find(motif, at + 1)
    return hits


def _query_span(cigar: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Query span [q_start, q_end) of reference slice positions [start, end), or None unless
    both ``start`` and ``end - 1`` fall in aligned (M/=/X) blocks.

    Walked as leech walks it, skipped reference (N) included: leech does not advance the
    reference there, and the same walk keeps the same hits.
    """
    reference = query = 0
    q_start = q_end = None
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
            query += length
        elif op == pysam.CDEL:
            reference += length
    if q_start is None or q_end is None:
        return None
    return q_start, q_end


# --- per-read signal processing -----------------------------------------------------------------

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


@dataclass
class _ReadSignal:
    """One read after normalisation, anchoring and refinement (what chunks are cut from)."""

    signal: np.ndarray  # (samples,) float32, the reference span's normalised signal
    residual: np.ndarray  # (samples,) float32
    boundaries: np.ndarray  # (mapped bases + 1,) int64
    features: np.ndarray  # (channels, mapped bases) float32
    codes: np.ndarray  # (reference bases,) uint8


def _process_read(
    read: LeechReadInput, raw: np.ndarray, spec: LeechInputSpec, table: LevelTable
) -> _ReadSignal | str:
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
    signal = escapepod.mad_normalize(np.ascontiguousarray(trimmed[::-1], np.float32))
    query_map = length - query_map[::-1]

    reference_map = np.floor(
        np.interp(reference_to_query(read.cigar), np.arange(query_map.size), query_map)
    ).astype(np.int64)
    first, last = int(reference_map[0]), int(reference_map[-1])
    if last <= first:
        # no samples for the aligned span (e.g. a move table without moves); leech's own
        # encoder fails on such a read
        return "no_mapped_signal"
    signal = signal[first:last]
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
    return _ReadSignal(signal, residual, boundaries, features, codes)


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


# --- chunks -------------------------------------------------------------------------------------


@dataclass
class LeechChunks:
    """Model inputs of a batch of reads, one row per chunk, in leech's order (reads in input
    order, a read's hits 5'->3'). A multiclass model scores only each read's first chunk.

    ``sequence`` is compact; :meth:`sequence_onehot` gives the model's tensor:

    * ``signal_kmer``: (n, signal_len) int32, per signal sample the k-mer of the 9 reference
      bases around the base the sample belongs to, in base 5 (digit 0..3 = A, C, G, T, 4 = no
      base), first k-mer position most significant; -1 where no base covers the sample.
    * ``base_onehot``: (n, window) uint8 base codes (0..3 = A, C, G, T, 4 = none) of the
      reference bases around the focus base.
    """

    seq_encoding: str
    read_id: np.ndarray  # (n,) str
    base_idx: np.ndarray  # (n,) int64, focus base in the aligned reference slice
    junction_indel: np.ndarray  # (n,) int64
    junction_mapped: np.ndarray  # (n,) bool
    signal: np.ndarray  # (n, channels, signal_len) float32
    sequence: np.ndarray  # see above
    features: np.ndarray  # (n, feature channels, feature width) float32
    skipped_read_id: list[str] = field(default_factory=list)
    skipped_reason: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.read_id)

    @classmethod
    def empty(cls, spec: LeechInputSpec) -> LeechChunks:
        """No chunks, with every array shaped and typed as :func:`extract_leech_chunks` makes
        them (a features file's datasets are created from this)."""
        signal_kmer = spec.seq_encoding == "signal_kmer"
        return cls(
            seq_encoding=spec.seq_encoding,
            read_id=np.empty(0, str),
            base_idx=np.empty(0, np.int64),
            junction_indel=np.empty(0, np.int64),
            junction_mapped=np.empty(0, bool),
            signal=np.empty((0, spec.signal_channels, spec.signal_len), np.float32),
            sequence=np.empty(
                (0, spec.signal_len if signal_kmer else spec.sequence_shape[1]),
                np.int32 if signal_kmer else np.uint8,
            ),
            features=np.empty((0, len(spec.feature_channels), spec.feature_width), np.float32),
        )

    def sequence_onehot(self, rows: slice | np.ndarray | None = None) -> np.ndarray:
        """The model's sequence input (uint8 0/1) for ``rows`` (all by default)."""
        codes = self.sequence if rows is None else self.sequence[rows]
        return expand_sequence(codes, self.seq_encoding)


def expand_sequence(codes: np.ndarray, seq_encoding: str) -> np.ndarray:
    """One-hot sequence inputs from :class:`LeechChunks` ``sequence`` codes.

    ``signal_kmer``: (n, L) k-mer codes -> (n, 36, L), channel 4*k + base for k-mer position k.
    ``base_onehot``: (n, W) base codes -> (n, 4, W).
    """
    bases = np.arange(4, dtype=np.int32)
    if seq_encoding == "base_onehot":
        return (codes[:, None, :] == bases[None, :, None]).astype(np.uint8)
    positions = sum(SIGNAL_KMER_CONTEXT) + 1
    powers = 5 ** np.arange(positions - 1, -1, -1, dtype=np.int32)
    digits = (codes[:, None, :] // powers[None, :, None]) % 5  # (n, positions, L)
    digits = np.where(codes[:, None, :] < 0, UNKNOWN_BASE, digits)
    onehot = digits[:, :, None, :] == bases[None, None, :, None]  # (n, positions, 4, L)
    return onehot.reshape(len(codes), 4 * positions, -1).astype(np.uint8)


def extract_leech_chunks(
    reads: Sequence[LeechReadInput],
    signals: Mapping[str, np.ndarray],
    spec: LeechInputSpec,
    levels: LevelTable | KmerLevels,
) -> LeechChunks:
    """Chunks of ``reads`` as leech predict cuts them; ``signals`` maps read ids to raw int16
    ADC signals (a read absent from it has no signal).

    Reads without a chunk are listed with their reason (:data:`READ_REASONS`), in input order.
    """
    table = levels if isinstance(levels, LevelTable) else LevelTable.from_kmer_levels(levels)
    if spec.kmer_table_sha256 is not None and table.sha256 != spec.kmer_table_sha256:
        raise KennelError(
            f"leech config key 'kmer_table_sha256': the model was trained against table "
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
        reason = "no_motif" if not hits else "no_signal" if raw is None else None
        if reason is None:
            if raw.dtype != np.int16:
                raise KennelError(
                    f"read {read.read_id}: signal is {raw.dtype}, not raw int16 ADC values "
                    "(leech normalises the ADC values, not picoamps)"
                )
            processed = _process_read(read, raw, spec, table)
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
    n_channels, width = len(spec.feature_channels), spec.feature_width
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


def _cut_chunk(
    read: _ReadSignal, base_idx: int, spec: LeechInputSpec
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
    before, after = spec.signal_context
    length = before + after
    window_start = focus - before
    lo, hi = max(window_start, 0), min(focus + after, len(read.signal))
    signal = np.zeros((spec.signal_channels, length), np.float32)
    if hi > lo:
        signal[0, lo - window_start : hi - window_start] = read.signal[lo:hi]
        if spec.signal_channels > 1:
            signal[1, lo - window_start : hi - window_start] = read.residual[lo:hi]

    # feature window, zero-padded past the mapped bases
    first = base_idx + spec.feature_start
    features = np.zeros((read.features.shape[0], spec.feature_width), np.float32)
    a, b = max(first, 0), min(base_idx + spec.feature_end + 1, read.features.shape[1])
    if b > a:
        features[:, a - first : b - first] = read.features[:, a:b]

    if spec.seq_encoding == "base_onehot":
        half = spec.kmer_len // 2
        sequence = _padded(read.codes, base_idx - half, base_idx + half + 1)
    else:
        sequence = _sample_kmers(read, lo, hi, window_start, length)
    return signal, sequence, features


def _padded(codes: np.ndarray, start: int, stop: int) -> np.ndarray:
    """codes[start:stop], with UNKNOWN_BASE outside the sequence."""
    out = np.full(stop - start, UNKNOWN_BASE, np.uint8)
    a, b = max(start, 0), min(stop, len(codes))
    if b > a:
        out[a - start : b - start] = codes[a:b]
    return out


def _sample_kmers(
    read: _ReadSignal, lo: int, hi: int, window_start: int, length: int
) -> np.ndarray:
    """Per-sample k-mer codes of a window whose real signal is [lo, hi) (read coordinates).

    The bases covering [lo, hi) are given chunk-relative boundaries with the first pulled to 0
    and the last pushed to the window's end, so the padding at either end takes the nearest
    base's k-mer, as leech's encoding does.
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
    # leech's encoder reads past the context's end as "no base"
    context = np.append(context, np.full(positions, UNKNOWN_BASE, np.int32))
    kmers = np.lib.stride_tricks.sliding_window_view(context, positions)[:n_bases]
    kmer_codes = kmers @ (5 ** np.arange(positions - 1, -1, -1, dtype=np.int32))
    samples = np.arange(length)
    base = np.searchsorted(local[1:-1], samples, side="right")
    covered = (samples >= local[0]) & (samples < local[-1])
    codes[covered] = kmer_codes[base[covered]]
    return codes


# --- files --------------------------------------------------------------------------------------


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
                        raise KennelError(
                            f"{reference_path}: contig {name} of read {record.query_name} "
                            "not in the reference"
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


def load_leech_config(path: str | os.PathLike) -> dict:
    """The ``config`` of a leech bundle (``.pt``) or a checkpoint directory's ``config.json``."""
    path = Path(path)
    if path.is_dir():
        import json

        try:
            return json.loads((path / "config.json").read_text())
        except (OSError, ValueError) as error:
            raise KennelError(f"{path}: unreadable leech checkpoint config ({error})") from None
    import torch

    try:
        bundle = torch.load(path, weights_only=True, map_location="cpu")
    except (OSError, RuntimeError, ValueError) as error:
        raise KennelError(f"{path}: unreadable leech bundle ({error})") from None
    if not isinstance(bundle, dict) or not isinstance(bundle.get("config"), dict):
        raise KennelError(f"{path}: not a leech bundle (no config)")
    return bundle["config"]
