"""Merge per-slice ``scores.h5`` files into one per job, and draw its report.

Slices are concatenated in the order given (the VCF's), after checking that every slice is
complete and was scored against the same targets with the same options; quantiles are then
recomputed over all variants, since a slice's own quantiles describe only that slice.

A job's scores grow with variants x tracks (200k variants x 7,611 Borzoi tracks is 3 GB of
float16 per stat) while the merge job asks a few GB, so scores are copied, histogrammed and
ranked a block of variants at a time, never read whole.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

import h5py
import numpy as np

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.snp.scores_file import SCORES_FORMAT, write_quantiles
from kennel.snp.stat_names import PROFILE_STATS

VARIANT_FIELDS = ("snp", "chr", "pos", "ref_allele", "alt_allele", "allele", "flipped")
TARGET_FIELDS = ("target_ids", "target_labels")
_BLOCK_VALUES = 1 << 24  # scores read at a time: 32 MiB of float16, 64 as float32
HISTOGRAM_BINS = 60


def variant_blocks(dataset: h5py.Dataset, axis: int = 0) -> Iterator[tuple[slice, np.ndarray]]:
    """``dataset`` a block of variants (its ``axis``) at a time: (the variants, their values)."""
    n = dataset.shape[axis]
    per_variant = max(1, int(np.prod(dataset.shape, dtype=np.int64)) // max(1, n))
    step = max(1, _BLOCK_VALUES // per_variant)
    for first in range(0, n, step):
        rows = slice(first, min(n, first + step))
        yield rows, dataset[(slice(None),) * axis + (rows,)]


def _check_slice(path: Path, handle: h5py.File, first: h5py.File | None, first_path: Path) -> None:
    if handle.attrs.get("format") != SCORES_FORMAT:
        raise KennelError(f"{path}: not a kennel scores file")
    if handle.attrs.get("status") != "complete":
        raise KennelError(f"{path}: scoring did not finish (status {handle.attrs.get('status')!r})")
    if first is None:
        return
    for name in TARGET_FIELDS:
        if not np.array_equal(handle[name][:], first[name][:]):
            raise KennelError(f"{path}: {name} differ from those of {first_path}")
    for name in ("stats", "options", "seq_len"):
        if handle.attrs[name] != first.attrs[name]:
            raise KennelError(
                f"{path}: scored with {name} {handle.attrs[name]} but {first_path} with "
                f"{first.attrs[name]}"
            )


@dataclass(frozen=True)
class MergedScores:
    """Rows written, and what the VCF held that was flipped or got no row."""

    variants: int
    flipped: int
    ref_mismatch_skipped: int
    unscored_alleles: int

    @classmethod
    def of(cls, scores: h5py.File) -> MergedScores:
        """The counts a scores file records (slices older than a count have none of it)."""
        return cls(
            variants=scores["snp"].shape[0],
            flipped=int(scores.attrs.get("flipped", 0)),
            ref_mismatch_skipped=int(scores.attrs.get("ref_mismatch_skipped", 0)),
            unscored_alleles=int(scores.attrs.get("unscored_alleles", 0)),
        )

    @classmethod
    def total(cls, parts: Sequence[MergedScores]) -> MergedScores:
        return cls(*map(sum, zip(*map(astuple, parts), strict=True)))

    def not_scored(self) -> dict[str, int]:
        """What the VCF held that got no row: every record is accounted for."""
        return {
            "REF mismatches": self.ref_mismatch_skipped,
            "ALTs with no sequence": self.unscored_alleles,
        }

    def __str__(self) -> str:
        not_scored = ", ".join(f"{count} {what}" for what, count in self.not_scored().items())
        return f"{self.variants} variants ({self.flipped} flipped); not scored: {not_scored}"


def merge_scores(
    slices: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    plot: str | os.PathLike | None = None,
    table: str | os.PathLike | None = None,
    top: int = 20,
) -> MergedScores:
    """Concatenate ``slices`` into ``out`` (and draw the report); returns what it holds."""
    if not slices:
        raise KennelError("merge-scores: no slices given")
    paths = [Path(p) for p in slices]
    for path in paths:
        if not path.is_file():
            raise KennelError(f"{path}: scores file not found")
    handles = []
    try:
        for path in paths:
            try:
                handles.append(h5py.File(path, "r"))
            except OSError as error:
                raise KennelError(f"{path}: not a readable HDF5 file ({error})") from None
            _check_slice(path, handles[-1], handles[0] if len(handles) > 1 else None, paths[0])
        outputs = [Path(out), *(Path(p) for p in (plot, table) if p is not None)]
        with atomic_outputs(*outputs) as temporaries:
            merged_scores = _write_merged(temporaries[0], handles)
            extra = iter(temporaries[1:])
            if plot is not None or table is not None:
                with h5py.File(temporaries[0], "r") as merged:
                    if plot is not None:
                        plot_distributions(merged, next(extra))
                    if table is not None:
                        write_top_table(merged, next(extra), top)
    finally:
        for handle in handles:
            handle.close()
    return merged_scores


def _write_merged(path: Path, handles: list[h5py.File]) -> MergedScores:
    first = handles[0]
    stats = json.loads(first.attrs["stats"])
    n_variants = sum(handle["snp"].shape[0] for handle in handles)
    per_model = [f"per_model/{stat}" for stat in stats if f"per_model/{stat}" in first]
    with h5py.File(path, "w") as merged:
        for name in VARIANT_FIELDS:
            merged.create_dataset(name, data=np.concatenate([h[name][:] for h in handles]))
        for name in TARGET_FIELDS:
            merged.create_dataset(name, data=first[name][:])
        for name in [*stats, *per_model]:
            axis = 1 if name.startswith("per_model/") else 0  # the variant axis
            shape = list(first[name].shape)
            shape[axis] = n_variants
            dataset = merged.create_dataset(
                name, shape=tuple(shape), dtype=np.float16, chunks=first[name].chunks
            )
            row = 0
            for handle in handles:
                for rows, block in variant_blocks(handle[name], axis):
                    where = (slice(None),) * axis + (slice(row + rows.start, row + rows.stop),)
                    dataset[where] = block
                row += handle[name].shape[axis]
        merged_scores = MergedScores.total([MergedScores.of(handle) for handle in handles])
        merged.attrs.update({key: first.attrs[key] for key in first.attrs})
        merged.attrs.update(
            {
                "slices": len(handles),
                "ref_mismatch_skipped": merged_scores.ref_mismatch_skipped,
                "flipped": merged_scores.flipped,
                "unscored_alleles": merged_scores.unscored_alleles,
                "clusters_total": sum(int(h.attrs["clusters_total"]) for h in handles),
                "clusters_done": sum(int(h.attrs["clusters_done"]) for h in handles),
                "rows_done": n_variants,
                "fingerprint": "",
            }
        )
        write_quantiles(merged, stats)
    return merged_scores


def _score_stats(scores: h5py.File) -> list[str]:
    """The per-track stats (the REF/ALT profiles are not scores to rank or histogram)."""
    return [stat for stat in json.loads(scores.attrs["stats"]) if stat not in PROFILE_STATS]


def draw_histogram(axis, dataset: h5py.Dataset | None) -> None:
    """A stat's histogram on ``axis``, the bars matplotlib's ``hist`` draws of every value."""
    histogram = None if dataset is None else score_histogram(dataset)
    if histogram is None:
        axis.text(0.5, 0.5, "no variants", ha="center", va="center", transform=axis.transAxes)
        return
    counts, edges = histogram
    axis.hist(edges[:-1], bins=edges, weights=counts, color="#4c72b0")
    axis.set_yscale("log")


def plot_distributions(scores: h5py.File, path: str | os.PathLike) -> None:
    """One histogram per stat of every (variant, track) score, log-scaled counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = _score_stats(scores) or ["REF/ALT profiles only"]
    columns = min(4, len(stats))
    rows = -(-len(stats) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False)
    for axis, stat in zip(axes.flat, stats, strict=False):
        draw_histogram(axis, scores.get(stat))
        axis.set_title(stat)
        axis.set_xlabel("score")
    for axis in list(axes.flat)[len(stats) :]:
        axis.axis("off")
    axes[0][0].set_ylabel("variant x track")
    counts = MergedScores.of(scores)
    shown = [f"{count} {what}" for what, count in counts.not_scored().items() if count]
    figure.suptitle(
        f"{counts.variants} variants x {scores['target_ids'].shape[0]} tracks"
        + (f"; not scored: {', '.join(shown)}" if shown else "")
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100, format="png")
    plt.close(figure)


def _finite(block: np.ndarray) -> np.ndarray:
    values = block.astype(np.float32).ravel()
    return values[np.isfinite(values)]


def score_histogram(dataset: h5py.Dataset) -> tuple[np.ndarray, np.ndarray] | None:
    """``(counts, edges)`` of a stat's finite scores in :data:`HISTOGRAM_BINS` bins over their
    range, as matplotlib's ``hist`` bins them, read a block at a time; None if there are none."""
    low = high = None
    for _, block in variant_blocks(dataset):
        values = _finite(block)
        if values.size:
            low = values.min() if low is None else min(low, values.min())
            high = values.max() if high is None else max(high, values.max())
    if low is None:
        return None
    counts, edges = np.zeros(HISTOGRAM_BINS, dtype=np.int64), None
    for _, block in variant_blocks(dataset):
        # the range as matplotlib passes it (float32 scalars), so the edges are its own
        part, edges = np.histogram(_finite(block), bins=HISTOGRAM_BINS, range=(low, high))
        counts += part
    return counts, edges


def top_variants(scores: h5py.File, top: int = 20) -> list[dict]:
    """The ``top`` variants by their largest |score| over tracks (logSUM, else the first stat)."""
    stats = _score_stats(scores)
    if not stats:
        return []
    ranking_stat = "logSUM" if "logSUM" in stats else stats[0]
    dataset = scores[ranking_stat]
    if dataset.shape[0] == 0 or dataset.shape[1] == 0:
        return []
    best = np.empty(dataset.shape[0], dtype=np.float32)
    best_track = np.empty(dataset.shape[0], dtype=np.int64)
    for rows, block in variant_blocks(dataset):
        magnitude = np.abs(block.astype(np.float32))
        best_track[rows] = magnitude.argmax(axis=1)
        best[rows] = magnitude[np.arange(len(magnitude)), best_track[rows]]
    order = np.argsort(-best, kind="stable")[:top]
    rows = []
    for index in order:  # only the top rows' fields are read
        track = int(best_track[index])
        row = {
            "snp": scores["snp"][index].decode(),
            "chr": scores["chr"][index].decode(),
            "pos": int(scores["pos"][index]),
            "ref": scores["ref_allele"][index].decode(),
            "alt": scores["alt_allele"][index].decode(),
            "track": scores["target_ids"][track].decode(),
        }
        for stat in stats:
            row[stat] = float(scores[stat][index, track])
        rows.append(row)
    return rows


def _cell(value) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else html.escape(str(value))
    return f"<td>{text}</td>"


def write_top_table(scores: h5py.File, path: str | os.PathLike, top: int = 20) -> None:
    """The top variants as a small standalone HTML table."""
    rows = top_variants(scores, top)
    stats = _score_stats(scores)
    header = ["snp", "chr", "pos", "ref", "alt", "track", *stats]
    cells = ["<tr>" + "".join(_cell(row[column]) for column in header) + "</tr>" for row in rows]
    document = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html><head><meta charset="utf-8"><title>top variants</title>',
            "<style>table{border-collapse:collapse;font-family:sans-serif;font-size:13px}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
            f"<p>Top {len(rows)} variants by largest |"
            f"{'logSUM' if 'logSUM' in stats else (stats or ['no stat'])[0]}| over tracks.</p>",
            "<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in header) + "</tr>",
            *cells,
            "</table></body></html>",
        ]
    )
    Path(path).write_text(document + "\n")
