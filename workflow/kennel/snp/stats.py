"""Variant-effect statistics from reference and alternate predictions, as hound_snp defines them.

With ``R`` and ``A`` the reference and alternate predictions over shifts ``s`` and length ``l``:

- ``SUM    = mean_s sum_l A - mean_s sum_l R``
- ``logSUM = mean_s sum_l log2(A + 1) - mean_s sum_l log2(R + 1)``
- ``logFC  = log2(mean_s sum_l A + 1) - log2(mean_s sum_l R + 1)``
- ``D1     = mean_s ||A - R||_1`` and ``D2 = mean_s ||A - R||_2`` over ``l``
- ``logD1``, ``logD2``: the same on ``log2(x + 1)``.

A strand pair is collapsed into one track whose length is both strands' lengths together: sums
and L1 norms add, L2 norms become the square root of the summed squares (within each shift, before
the mean), and logFC is taken of the summed coverage. Scores are clipped to the float16 range
and stored as float16.
"""

from __future__ import annotations

import numpy as np
import torch

STATS = ("SUM", "logSUM", "logFC", "D1", "D2", "logD1", "logD2")
FLOAT16_MAX = float(np.finfo(np.float16).max)


def strand_map(strand_rows, strand_partners, n_tracks: int) -> torch.Tensor:
    """For each track, the collapsed track it adds into (see :func:`compute_stats`)."""
    rows = torch.as_tensor(strand_rows).tolist()
    partners = torch.as_tensor(strand_partners).tolist()
    target = [-1] * n_tracks
    for collapsed, (row, partner) in enumerate(zip(rows, partners, strict=True)):
        target[row] = target[partner] = collapsed
    if -1 in target:
        raise ValueError(f"track {target.index(-1)} belongs to no collapsed track")
    return torch.tensor(target)


def _collapse(per_track: torch.Tensor, to: torch.Tensor | None, n_collapsed: int) -> torch.Tensor:
    """Add each track into its collapsed track (last axis)."""
    if to is None:
        return per_track
    collapsed = per_track.new_zeros((*per_track.shape[:-1], n_collapsed))
    return collapsed.index_add_(-1, to, per_track)


def compute_stats(
    ref: torch.Tensor,
    alt: torch.Tensor,
    stats: tuple[str, ...] = STATS,
    strand_rows: torch.Tensor | np.ndarray | None = None,
    strand_partners: torch.Tensor | np.ndarray | None = None,
    strand_to: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Scores ``(..., tracks')`` from predictions ``(..., shifts, length, tracks)``.

    ``ref`` broadcasts against ``alt`` (one reference for a stack of alternates). With
    ``strand_rows``/``strand_partners`` (see :class:`kennel.snp.targets.Targets`) the kept
    tracks absorb their partners; ``strand_to`` is :func:`strand_map` of them, precomputed on
    the device by callers that score many times. Computed in the inputs' dtype; not clipped.
    """
    unknown = [stat for stat in stats if stat not in STATS]
    if unknown:
        raise ValueError(f"unknown stat(s) {', '.join(unknown)} (known: {', '.join(STATS)})")
    to, n_collapsed = None, 0
    if strand_rows is not None:
        n_collapsed = len(strand_rows)
        to = strand_to
        if to is None:
            to = strand_map(strand_rows, strand_partners, alt.shape[-1]).to(alt.device)

    def collapse(per_track):
        return _collapse(per_track, to, n_collapsed)

    wanted = set(stats)
    scores: dict[str, torch.Tensor] = {}
    if wanted & {"SUM", "logFC"}:
        ref_sum = collapse(ref.sum(-2)).mean(-2)
        alt_sum = collapse(alt.sum(-2)).mean(-2)
        scores["SUM"] = alt_sum - ref_sum
        scores["logFC"] = torch.log2(alt_sum + 1) - torch.log2(ref_sum + 1)
    if wanted & {"logSUM", "logD1", "logD2"}:
        ref_log = torch.log2(ref + 1)
        alt_log = torch.log2(alt + 1)
        if "logSUM" in wanted:
            alt_log_sum = collapse(alt_log.sum(-2)).mean(-2)
            scores["logSUM"] = alt_log_sum - collapse(ref_log.sum(-2)).mean(-2)
        if wanted & {"logD1", "logD2"}:
            scores.update(_distances(alt_log - ref_log, collapse, prefix="log"))
    if wanted & {"D1", "D2"}:
        scores.update(_distances(alt - ref, collapse, prefix=""))
    return {stat: scores[stat] for stat in stats}


def _distances(difference: torch.Tensor, collapse, prefix: str) -> dict[str, torch.Tensor]:
    l1 = collapse(difference.abs().sum(-2)).mean(-2)
    l2 = collapse((difference**2).sum(-2)).sqrt().mean(-2)
    return {f"{prefix}D1": l1, f"{prefix}D2": l2}


def to_float16(scores: np.ndarray | torch.Tensor) -> np.ndarray:
    """Clip to the float16 range and convert, so a huge score saturates instead of becoming inf."""
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    return np.clip(scores, -FLOAT16_MAX, FLOAT16_MAX).astype(np.float16)


def quantile_grid() -> np.ndarray:
    """0.001-0.099 by 0.001, 0.10-0.89 by 0.01, 0.900-0.999 by 0.001 (fine in both tails)."""
    return np.concatenate(
        [np.arange(1, 100) / 1000, np.arange(10, 90) / 100, np.arange(900, 1000) / 1000]
    )


def score_quantiles(scores, grid: np.ndarray | None = None, chunk_bytes: int = 256 << 20):
    """Per-track quantiles ``(tracks, len(grid))`` of scores ``(variants, tracks)``, as float16.

    ``scores`` may be an h5py dataset: it is read a block of tracks at a time. With no variants
    every quantile is NaN.
    """
    grid = quantile_grid() if grid is None else grid
    n_variants, n_tracks = scores.shape
    result = np.full((n_tracks, len(grid)), np.nan, dtype=np.float16)
    if n_variants == 0:
        return result
    step = max(1, chunk_bytes // (4 * n_variants))
    for first in range(0, n_tracks, step):
        block = np.asarray(scores[:, first : first + step], dtype=np.float32)
        result[first : first + step] = np.percentile(block, 100 * grid, axis=0).T
    return result
