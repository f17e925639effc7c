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

    wanted = set(stats)
    # sums over length, per shift and track; reduced first, so the large tensors are walked
    # once per quantity and everything after is on (..., shifts, tracks)
    sums: dict[str, torch.Tensor] = {}
    if wanted & {"SUM", "logFC"}:
        sums["alt"], sums["ref"] = alt.sum(-2), ref.sum(-2)
    if wanted & {"logSUM", "logD1", "logD2"}:
        alt_log, ref_log = torch.log2(alt + 1), torch.log2(ref + 1)
        if "logSUM" in wanted:
            sums["alt_log"], sums["ref_log"] = alt_log.sum(-2), ref_log.sum(-2)
        if wanted & {"logD1", "logD2"}:
            difference = alt_log - ref_log
            sums["logD1"] = difference.abs().sum(-2)
            sums["logD2"] = (difference * difference).sum(-2)
    if wanted & {"D1", "D2"}:
        difference = alt - ref
        sums["D1"] = difference.abs().sum(-2)
        sums["D2"] = (difference * difference).sum(-2)
    shape = np.broadcast_shapes(*(tuple(value.shape) for value in sums.values()))
    stacked = torch.stack([value.expand(shape) for value in sums.values()])
    if to is not None:  # a strand pair is one track of both strands' lengths
        collapsed = stacked.new_zeros((*stacked.shape[:-1], n_collapsed))
        stacked = collapsed.index_add_(-1, to, stacked)
    per_shift = dict(zip(sums, stacked.unbind(0), strict=True))
    mean = dict(zip(sums, stacked.mean(-2).unbind(0), strict=True))
    scores: dict[str, torch.Tensor] = {}
    if "alt" in mean:
        scores["SUM"] = mean["alt"] - mean["ref"]
        scores["logFC"] = torch.log2(mean["alt"] + 1) - torch.log2(mean["ref"] + 1)
    if "alt_log" in mean:
        scores["logSUM"] = mean["alt_log"] - mean["ref_log"]
    for name in ("D1", "logD1"):
        if name in mean:
            scores[name] = mean[name]
    for name in ("D2", "logD2"):
        if name in per_shift:
            scores[name] = per_shift[name].sqrt().mean(-2)
    return {stat: scores[stat] for stat in stats}


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
