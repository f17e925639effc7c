"""A plain-loop reference of calico/baskerville's ``hound_snp`` variant scoring, for the tests.

It re-derives, step by step and independently of ``kennel.snp`` (the code under test), what
``baskerville.snps.score_snps`` computes for a VCF, a genome, a model and a targets table:

* records: one per VCF line, first ALT only; a chromosome name without ``chr`` gets it
  (``1`` -> ``chr1``, for the genome and the output), and an ID of ``.`` becomes
  ``chrom:pos`` with that name;
* REF check against the genome; a REF that does not match while the first ALT does is
  *flipped* (the alleles are swapped for prediction; ``hound_snp`` passes
  ``flip_ref=~snps_clustered``, which is -1 or -2, always true). The outputs keep the VCF's
  alleles, and the two predictions are swapped back before scoring;
* windows: records are grouped only when ``cluster_pct > 0`` (sorted input required); a
  window of ``seq_len`` starts at ``mid - seq_len // 2`` where ``mid`` is the floored midpoint
  of the group's 1-based positions; bases off the chromosome are N (an all-zero row);
* the alternate one-hot: same length alleles reset the single row at the variant
  (a multi-base substitution only clears it: baskerville compares the whole allele with one
  base); deletions and insertions keep the first base and move the rest, padding with zeros;
* shifts move the sequence right (positive) or left (negative), padding with zeros;
* the reverse-complement ensemble averages the forward prediction with the prediction on the
  reverse complement, reversed along the length and with strand partners swapped;
* untransform (soft clip, ``_sqrt`` sum stats, optional unscale; or ``-u``'s older
  transforms) in float64, as numpy does
  when float32 predictions meet the float64 columns of the targets table;
* indel compensation (extra shifts by the indel size), stitching, and every statistic of
  ``compute_scores`` with the strand transform, float16 clipping and conversion.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pysam
import torch

BASE_COLUMN = {"A": 0, "C": 1, "G": 2, "T": 3}


def rel_entr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """scipy.special.rel_entr (scipy is not a kennel dependency): ``x log(x / y)`` for
    positive x and y, 0 where x is 0 and y >= 0, inf elsewhere; NaN stays NaN."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((x > 0) & (y > 0), x * np.log(x / y), np.inf)
    out = np.where((x == 0) & (y >= 0), 0.0, out)
    return np.where(np.isnan(x) | np.isnan(y), np.nan, out)


HALF_MIN = float(np.finfo(np.float16).min)
HALF_MAX = float(np.finfo(np.float16).max)
TRACK_STATS = (
    "SUM",
    "logSUM",
    "logSED",
    "sqrtSUM",
    "SAX",
    "D1",
    "logD1",
    "sqrtD1",
    "D2",
    "logD2",
    "sqrtD2",
    "JS",
    "logJS",
)
PREDICTION_STATS = ("REF", "ALT")


# --- records ------------------------------------------------------------------------------------


@dataclass
class Record:
    """One VCF line as the scorer sees it (alleles already flipped when ``flipped``)."""

    chrom: str
    pos: int  # 1-based
    rsid: str
    ref: str
    alt: str
    vcf_ref: str
    vcf_alt: str
    n_alts: int
    flipped: bool = False

    @property
    def indel_size(self) -> int:
        return len(self.alt) - len(self.ref)


def read_records(vcf_path: str | os.PathLike) -> list[Record]:
    """Every data line of a (plain or gzipped) VCF, in file order."""
    vcf_path = str(vcf_path)
    opener = gzip.open if vcf_path.endswith(".gz") else open
    records = []
    with opener(vcf_path, "rt") as handle:
        for line in handle:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split()
            chrom, pos, rsid, ref, alts = fields[0], int(fields[1]), fields[2], fields[3], fields[4]
            if not chrom.startswith("chr"):
                chrom = f"chr{chrom}"  # baskerville's SNP names every chromosome chr...
            alt_list = alts.split(",")
            if rsid == ".":
                rsid = f"{chrom}:{pos}"
            records.append(
                Record(chrom, pos, rsid, ref, alt_list[0], ref, alt_list[0], len(alt_list))
            )
    return records


def check_and_flip(records: list[Record], fasta: pysam.FastaFile, flip: bool = True) -> None:
    """Compare each REF with the genome; swap REF and ALT where only the ALT matches."""
    for record in records:
        start = record.pos - 1
        genome_ref = fasta.fetch(record.chrom, start, start + len(record.ref)).upper()
        if genome_ref == record.ref:
            continue
        genome_alt = fasta.fetch(record.chrom, start, start + len(record.alt)).upper()
        if not flip or genome_alt != record.alt:
            raise ValueError(
                f"{record.rsid}: REF {record.ref} does not match the genome ({genome_ref})"
            )
        if record.n_alts != 1:  # baskerville asserts a single ALT before it flips
            raise ValueError(f"{record.rsid}: cannot flip a record with {record.n_alts} ALTs")
        record.ref, record.alt = record.alt, record.ref
        record.flipped = True


def check_sorted(records: list[Record]) -> None:
    """Clustering needs records sorted by position within contiguous chromosomes."""
    seen: set[str] = set()
    previous: Record | None = None
    for record in records:
        if previous is not None:
            if record.chrom == previous.chrom:
                if record.pos < previous.pos:
                    raise ValueError(f"{record.rsid}: VCF not sorted by position")
            elif record.chrom in seen:
                raise ValueError(f"{record.rsid}: VCF chromosomes not contiguous")
        seen.add(record.chrom)
        previous = record


# --- windows ------------------------------------------------------------------------------------


@dataclass
class Window:
    chrom: str
    start: int  # 0-based, may be negative
    members: list[int]  # indices into the record list


def group_records(records: list[Record], seq_len: int, cluster_pct: float) -> list[list[int]]:
    """Greedy groups: a record joins the current group while it is on the group's chromosome
    and closer than ``int(seq_len * cluster_pct)`` to the group's first record."""
    if cluster_pct <= 0:
        return [[index] for index in range(len(records))]
    distance = int(seq_len * cluster_pct)
    groups: list[list[int]] = []
    first: Record | None = None
    for index, record in enumerate(records):
        if first is not None and record.chrom == first.chrom and record.pos < first.pos + distance:
            groups[-1].append(index)
        else:
            groups.append([index])
            first = record
    return groups


def window_start(positions: Sequence[int], seq_len: int) -> int:
    """Start of the window around 1-based positions: their floored midpoint minus half."""
    middle = (min(positions) + max(positions)) // 2
    return middle - seq_len // 2


def make_windows(records: list[Record], seq_len: int, cluster_pct: float) -> list[Window]:
    windows = []
    for members in group_records(records, seq_len, cluster_pct):
        start = window_start([records[i].pos for i in members], seq_len)
        windows.append(Window(records[members[0]].chrom, start, members))
    return windows


def window_text(fasta: pysam.FastaFile, chrom: str, start: int, seq_len: int) -> str:
    """The genome between start and start + seq_len, upper case, N off the chromosome."""
    length = fasta.get_reference_length(chrom)
    low, high = max(start, 0), min(start + seq_len, length)
    body = fasta.fetch(chrom, low, high) if high > low else ""
    text = "N" * (low - start) + body
    text += "N" * (seq_len - len(text))
    return text.upper()


# --- one-hot ------------------------------------------------------------------------------------


def one_hot(text: str) -> np.ndarray:
    """Boolean (len, 4) one-hot in A, C, G, T order; any other letter is an all-zero row."""
    code = np.zeros((len(text), 4), dtype=bool)
    for i, base in enumerate(text.upper()):
        if base in BASE_COLUMN:
            code[i, BASE_COLUMN[base]] = True
    return code


def _set_base(code: np.ndarray, row: int, base: str) -> None:
    """Clear a row and set one base; anything but one of A, C, G, T (case sensitive, as in
    baskerville) leaves the row cleared."""
    code[row, :] = False
    if base in BASE_COLUMN:
        code[row, BASE_COLUMN[base]] = True


def alt_one_hot(ref_code: np.ndarray, offset: int, ref: str, alt: str) -> np.ndarray:
    """The alternate sequence of a variant whose REF starts at window row ``offset``.

    * same length: the row at ``offset`` is set to ``alt`` (a multi-base ``alt`` clears it);
    * deletion (REF longer) sharing the first base: the ``len(ref) - len(alt)`` rows after
      ``offset`` are removed, the rest move left and the end is zero-padded (the ALT's
      bases after the first are not used);
    * insertion (ALT longer) sharing the first base: ``alt[1:]`` goes in after ``offset``,
      the rest moves right and falls off the end (the REF's later bases stay);
    * an indel whose alleles differ in the first base leaves the sequence unchanged.
    """
    length = len(ref_code)
    code = ref_code.copy()
    if len(alt) == len(ref):
        _set_base(code, offset, alt)
    elif len(ref) > len(alt):
        if ref[0] == alt[0]:
            removed = len(ref) - len(alt)
            for row in range(offset + 1, length - removed):
                code[row] = ref_code[row + removed]
            for row in range(length - removed, length):
                code[row] = False
    elif ref[0] == alt[0]:
        inserted = alt[1:]
        for row in range(offset + 1 + len(inserted), length):
            code[row] = ref_code[row - len(inserted)]
        for i, base in enumerate(inserted):
            _set_base(code, offset + 1 + i, base)
    return code


def shift_one_hot(code: np.ndarray, shift: int) -> np.ndarray:
    """Row i of the result is row i - shift of the input, zeros where that is outside."""
    length = len(code)
    shifted = np.zeros_like(code)
    if shift >= 0:
        shifted[shift:] = code[: length - shift]
    else:
        shifted[:shift] = code[-shift:]
    return shifted


# --- targets ------------------------------------------------------------------------------------


@dataclass
class TargetTable:
    table: pd.DataFrame
    model_tracks: np.ndarray  # model output column of each row
    pair_rows: np.ndarray | None  # row of each row's strand partner; None without the column
    collapse: np.ndarray | None  # (rows, collapsed) 0/1 matrix; None without strand pairs
    collapsed_ids: list[str]


def read_target_table(targets_tsv: str | os.PathLike) -> TargetTable:
    """The targets table, its strand partners by row and baskerville's strand-sum matrix.

    A row is unstranded when its ``strand_pair`` is its own index; otherwise its strand is the
    identifier's last character and the rows whose strand is ``-`` are dropped from the
    collapsed list. The matrix is filled like ``dataset.make_strand_transform``: rows go, in
    table order, to the current column, which advances after an unstranded row and after the
    second member of a pair. (For pairs that are not next to each other this adds unrelated
    rows into one column: baskerville's behaviour, kept.)
    """
    table = pd.read_csv(targets_tsv, sep="\t", index_col=0)
    model_tracks = np.array(table.index, dtype=np.int64)
    if "strand_pair" not in table.columns:
        return TargetTable(table, model_tracks, None, None, list(table.identifier))
    row_of = {name: row for row, name in enumerate(table.index)}
    pair_rows = np.array([row_of[partner] for partner in table.strand_pair], dtype=np.int64)

    keep = []
    for name, identifier, partner in zip(
        table.index, table.identifier, table.strand_pair, strict=True
    ):
        strand = "." if partner == name else identifier[-1]
        keep.append(strand != "-")
    collapsed_ids = [i for i, k in zip(table.identifier, keep, strict=True) if k]

    collapse = np.zeros((len(table), len(collapsed_ids)))
    column = 0
    first_members: set = set()
    for row, (name, partner) in enumerate(zip(table.index, table.strand_pair, strict=True)):
        if column >= len(collapsed_ids):
            raise ValueError(f"{targets_tsv}: strand pairs do not fit the collapsed targets")
        collapse[row, column] = 1.0
        if partner == name or partner in first_members:
            column += 1
        else:
            first_members.add(name)
    return TargetTable(table, model_tracks, pair_rows, collapse, collapsed_ids)


def untransform_prediction(
    preds: np.ndarray, table: pd.DataFrame, unscale: bool = False, old: bool = False
) -> np.ndarray:
    """Undo the targets' squashing on one (bins, tracks) prediction, in float64.

    baskerville's ``untransform_preds``: above ``clip_soft`` a value v becomes
    ``clip_soft - 1 + (v - clip_soft + 1) ** 2``; tracks whose ``sum_stat`` contains ``_sqrt``
    then map v to ``(v + 1) ** 2 - 1``; with ``unscale`` every track is divided by its
    ``scale``. ``old`` (hound_snp ``-u``, ``untransform_preds1``): v / scale; above
    ``clip_soft`` ``clip_soft + (v - clip_soft) ** 2``; ``_sqrt`` tracks to the power 4/3;
    times the scale unless ``unscale``.
    """
    clip_soft = np.asarray(table.clip_soft, dtype=np.float64)
    scale = np.asarray(table.scale, dtype=np.float64)
    out = np.zeros(preds.shape, dtype=np.float64)
    for track in range(preds.shape[1]):
        cs = clip_soft[track]
        squared = "_sqrt" in str(table.sum_stat.iloc[track])
        for row in range(preds.shape[0]):
            value = np.float64(preds[row, track])
            if old:
                value = value / scale[track]
            if value > cs:
                above = value - cs + (0 if old else 1)
                value = (cs if old else cs - 1) + above * above  # x * x: numpy's ** 2
            if squared:
                value = value ** (4 / 3) if old else (value + 1) * (value + 1) - 1
            if unscale != old:  # new: divide only with unscale; old: scale back without it
                value = value / scale[track] if unscale else value * scale[track]
            out[row, track] = value
    return out


# --- predictions --------------------------------------------------------------------------------


def _run_model(model: Callable, code: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(np.ascontiguousarray(code, dtype=np.float32)[None])
    with torch.no_grad():
        y = model(x)
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    return np.asarray(y, dtype=np.float32)[0]


def predict(
    model: Callable,
    code: np.ndarray,
    model_tracks: np.ndarray,
    pair_rows: np.ndarray | None,
    rc: bool,
) -> np.ndarray:
    """(bins, rows) float32 prediction on the targets' rows, with the rc ensemble when asked.

    baskerville slices the model to the targets' tracks first, then builds the ensemble on
    the sliced model: the reverse member sees the input with the base axis and the length
    axis reversed (A<->T, C<->G), its output is reversed along the length and its tracks are
    gathered by strand partner (``out[:, j] = rc_out[:, pair[j]]``); Keras' Average then adds
    the forward and reverse outputs and divides by 2, in float32.
    """
    forward = _run_model(model, code)[:, model_tracks]
    if not rc:
        return forward
    reverse = _run_model(model, code[::-1, ::-1])[:, model_tracks][::-1]
    if pair_rows is not None:
        reverse = reverse[:, pair_rows]
    return (forward + reverse) / np.float32(2)


def stitch(preds: Sequence[np.ndarray], n_shifts: int, at_bin: int) -> list[np.ndarray]:
    """Per shift, the plain run's bins before ``at_bin`` and the compensated run's from it.

    Python slicing, as in baskerville: a negative ``at_bin`` counts from the end.
    """
    stitched = []
    for index in range(n_shifts):
        plain, compensated = preds[2 * index], preds[2 * index + 1]
        stitched.append(np.concatenate([plain[:at_bin], compensated[at_bin:]], axis=0))
    return stitched


# --- statistics ---------------------------------------------------------------------------------


def _log(x: np.ndarray) -> np.ndarray:
    return np.log2(x + 1)


def _collapse_tracks(values: np.ndarray, collapse: np.ndarray | None, squares: bool) -> np.ndarray:
    """Sum each collapsed target's member tracks (last axis), in float64; for the L2 stats
    the root of the summed squares (squared in the score's own precision first)."""
    if collapse is None:
        return values
    n_rows, n_out = collapse.shape
    out = np.zeros(values.shape[:-1] + (n_out,), dtype=np.float64)
    for column in range(n_out):
        for row in range(n_rows):
            if collapse[row, column]:
                member = values[..., row]
                out[..., column] += (member * member if squares else member).astype(np.float64)
    return np.sqrt(out) if squares else out


def _half(values: np.ndarray) -> np.ndarray:
    return np.clip(values, HALF_MIN, HALF_MAX).astype(np.float16)


def _per_track_stat(stat: str, ref: np.ndarray, alt: np.ndarray, track: int):
    """One track's unclipped score from (shifts, length, tracks) ref and alt predictions."""
    n_shifts = ref.shape[0]
    transform = {"log": _log, "sqrt": np.sqrt}
    if stat in ("SUM", "logSUM", "sqrtSUM"):
        f = transform.get(stat.removesuffix("SUM"), lambda x: x)
        ref_total = sum(f(ref[s, :, track]).sum() for s in range(n_shifts))
        alt_total = sum(f(alt[s, :, track]).sum() for s in range(n_shifts))
        return alt_total / n_shifts - ref_total / n_shifts
    if stat == "logSED":
        ref_mean = np.mean([np.log2(ref[s, :, track].sum() + 1) for s in range(n_shifts)])
        alt_mean = np.mean([np.log2(alt[s, :, track].sum() + 1) for s in range(n_shifts)])
        return alt_mean - ref_mean
    if stat == "SAX":
        picks = []
        for s in range(n_shifts):
            diff = alt[s, :, track] - ref[s, :, track]
            picks.append(diff[int(np.argmax(np.abs(diff)))])  # first of tied maxima
        return np.mean(picks)
    if stat in ("D1", "logD1", "sqrtD1", "D2", "logD2", "sqrtD2"):
        f = transform.get(stat[:-2], lambda x: x)
        norms = []
        for s in range(n_shifts):
            diff = f(alt[s, :, track]) - f(ref[s, :, track])
            norms.append(np.abs(diff).sum() if stat.endswith("1") else np.sqrt((diff**2).sum()))
        return np.mean(norms)
    if stat == "JS":
        # baskerville adds a (shifts, tracks) pseudocount to (shifts, length, tracks) arrays,
        # which broadcasts only with one shift; with several this does what it means: each
        # shift's own 25th percentile (over length) of the reference, each shift normalised
        # over length. "JS" is half the symmetrised KL divergence of the two profiles.
        # (The same broadcast fails in hound_snp for an uncompensated indel, whose 2 * shifts
        # rows meet a 2 * shifts pseudocount: the error is lost in its writer thread and every
        # statistic of that record stays 0 in scores.h5. This scores such records.)
        divergences = []
        for s in range(n_shifts):
            r, a = ref[s, :, track], alt[s, :, track]
            pseudo = np.percentile(r, 25)
            r_norm = (r + pseudo) / (r + pseudo).sum()
            a_norm = (a + pseudo) / (a + pseudo).sum()
            forward, backward = rel_entr(r_norm, a_norm).sum(), rel_entr(a_norm, r_norm).sum()
            divergences.append((forward + backward) / 2)
        return np.mean(divergences)
    if stat == "logJS":
        # baskerville's percentile and normalisation run over axis 0, the shift axis: per bin,
        # the pseudocount is the 25th percentile across shifts of log2(ref + 1) and each
        # profile is divided by its sum across shifts (with one shift every value becomes 1
        # and the score 0); the divergence then sums over length per shift, averaged.
        r_log, a_log = _log(ref[:, :, track]), _log(alt[:, :, track])  # (shifts, length)
        pseudo = np.percentile(r_log, 25, axis=0)  # one per bin
        r_norm = (r_log + pseudo) / (r_log + pseudo).sum(axis=0)
        a_norm = (a_log + pseudo) / (a_log + pseudo).sum(axis=0)
        divergences = [
            (rel_entr(r_norm[s], a_norm[s]).sum() + rel_entr(a_norm[s], r_norm[s]).sum()) / 2
            for s in range(n_shifts)
        ]
        return np.mean(divergences)
    raise ValueError(f"unknown statistic {stat!r}")


def score_stats(
    ref: np.ndarray,
    alt: np.ndarray,
    stats: Sequence[str],
    collapse: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """``compute_scores`` for one variant: (shifts, length, tracks) ref and alt predictions.

    Track statistics come back as float16 (collapsed tracks,); REF and ALT as float16
    (shifts, length, collapsed tracks), the two strands of a pair summed per bin (hound_snp
    itself cannot write REF/ALT with strand pairs: its dataset has the collapsed width).
    """
    ref, alt = np.asarray(ref), np.asarray(alt)
    dtype = np.result_type(ref, alt)
    n_tracks = ref.shape[2]
    scores = {}
    for stat in stats:
        if stat in PREDICTION_STATS:
            preds = ref if stat == "REF" else alt
            scores[stat] = _half(_collapse_tracks(preds, collapse, squares=False))
            continue
        values = np.array(
            [_per_track_stat(stat, ref, alt, track) for track in range(n_tracks)], dtype=dtype
        )
        squares = stat in ("D2", "logD2", "sqrtD2")
        scores[stat] = _half(_collapse_tracks(values, collapse, squares=squares))
    return scores


# --- the whole run ------------------------------------------------------------------------------


def bundle_model(bundle_path: str | os.PathLike) -> tuple[Callable, dict[str, int]]:
    """A kennel model bundle as a callable, and its geometry as ``hound_scores`` keywords."""
    from kennel.models.bundle import build_model, load_bundle

    bundle = load_bundle(bundle_path)
    model = build_model(bundle).eval()
    meta = bundle["metadata"]
    seq_len, stride = int(meta["seq_len"]), int(meta["bin_size"])
    crop = (seq_len - int(meta["target_length"]) * stride) // 2
    return model, {"seq_len": seq_len, "stride": stride, "crop": crop}


def hound_scores(
    vcf_path: str | os.PathLike,
    genome_fasta: str | os.PathLike,
    model: Callable,
    targets_tsv: str | os.PathLike,
    *,
    seq_len: int,
    stride: int,
    crop: int,
    cluster_pct: float = 0.0,
    rc: bool = False,
    shifts: Sequence[int] = (0,),
    stats: Sequence[str] = ("logSUM",),
    untransform: bool = True,
    untransform_old: bool = False,
    unscale: bool = False,
    indel_stitch: bool = False,
    flip: bool = True,
) -> dict:
    """Score every VCF record like baskerville's ``hound_snp`` (see the module docstring).

    ``model`` maps a float32 tensor (1, seq_len, 4) to (1, bins, model tracks); ``crop`` is
    the bases cut from each side before the first bin. Returns the per-record columns
    ``snp``, ``chr``, ``pos``, ``ref_allele``, ``alt_allele`` (the VCF's), ``flipped``, each
    statistic (float16, (records, collapsed tracks); REF/ALT (records, shifts, bins,
    collapsed tracks)) and ``target_ids`` (the collapsed targets' identifiers).
    """
    shifts = [int(s) for s in shifts]
    n_shifts = len(shifts)
    targets = read_target_table(targets_tsv)
    records = read_records(vcf_path)
    clustered = cluster_pct > 0
    if clustered:
        check_sorted(records)

    def run(code: np.ndarray, shift: int) -> np.ndarray:
        preds = predict(
            model, shift_one_hot(code, shift), targets.model_tracks, targets.pair_rows, rc
        )
        if not untransform:
            return preds
        return untransform_prediction(preds, targets.table, unscale, untransform_old)

    results: list[dict | None] = [None] * len(records)
    with pysam.FastaFile(str(genome_fasta)) as fasta:
        check_and_flip(records, fasta, flip)
        for window in make_windows(records, seq_len, cluster_pct):
            text = window_text(fasta, window.chrom, window.start, seq_len)
            for index in window.members:
                record = records[index]
                offset = record.pos - 1 - window.start
                if text[offset : offset + len(record.ref)] != record.ref:
                    raise ValueError(f"{record.rsid}: REF does not match its window")
            ref_code = one_hot(text)
            singleton = len(window.members) == 1

            ref_shifts = list(shifts)
            first_indel = records[window.members[0]].indel_size
            if singleton and first_indel < 0:
                ref_shifts = [t for s in shifts for t in (s, s + first_indel)]
            ref_runs = [run(ref_code, s) for s in ref_shifts]

            for index in window.members:
                record = records[index]
                indel = record.indel_size
                alt_code = alt_one_hot(
                    ref_code, record.pos - 1 - window.start, record.ref, record.alt
                )
                compensate = indel > 0 if singleton else indel != 0
                alt_shifts = [t for s in shifts for t in (s, s - indel)] if compensate else shifts
                alt_runs = [run(alt_code, s) for s in alt_shifts]
                ref_use = ref_runs

                if indel != 0 and indel_stitch:
                    # the 1-based position here, unlike the window row (pos - 1 - start)
                    at_bin = (record.pos - window.start - crop) // stride
                    if singleton and indel < 0:
                        ref_use = stitch(ref_runs, n_shifts, at_bin)
                    else:
                        alt_runs = stitch(alt_runs, n_shifts, at_bin)

                ref_preds, alt_preds = np.array(ref_use), np.array(alt_runs)
                if indel != 0 and not indel_stitch:
                    if singleton and indel < 0:
                        alt_preds = np.repeat(alt_preds, 2, axis=0)
                    else:
                        ref_preds = np.repeat(ref_preds, 2, axis=0)
                if record.flipped:
                    ref_preds, alt_preds = alt_preds, ref_preds

                scores = score_stats(ref_preds, alt_preds, stats, targets.collapse)
                if indel != 0 and not indel_stitch:
                    for stat in PREDICTION_STATS:
                        if stat in scores:
                            scores[stat] = scores[stat][0::2]
                results[index] = scores

    n_out = len(targets.collapsed_ids)
    out: dict = {
        "snp": np.array([r.rsid for r in records], dtype=str),
        "chr": np.array([r.chrom for r in records], dtype=str),
        "pos": np.array([r.pos for r in records], dtype=np.uint32),
        "ref_allele": np.array([r.vcf_ref for r in records], dtype=str),
        "alt_allele": np.array([r.vcf_alt for r in records], dtype=str),
        "flipped": np.array([r.flipped for r in records], dtype=bool),
        "target_ids": np.array(targets.collapsed_ids, dtype=str),
    }
    n_bins = (seq_len - 2 * crop) // stride
    for stat in stats:
        shape = (n_shifts, n_bins, n_out) if stat in PREDICTION_STATS else (n_out,)
        rows = [result[stat] for result in results]
        out[stat] = np.stack(rows) if rows else np.zeros((0, *shape), dtype=np.float16)
    return out


def hound_percentiles(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """baskerville's ``write_pct``: the ``percentiles`` grid (float steps of 0.001 below 0.1
    and from 0.9, 0.01 between) and one stat's ``{stat}_pct`` ``(tracks, grid)``: numpy's
    percentiles of the stored float16 scores over the variants, cast to float16."""
    grid = np.concatenate(
        [np.arange(0.001, 0.1, 0.001), np.arange(0.1, 0.9, 0.01), np.arange(0.9, 1, 0.001)]
    )
    return grid, np.percentile(scores, 100 * grid, axis=0).T.astype("float16")
