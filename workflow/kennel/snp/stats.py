"""Variant-effect statistics from reference and alternate predictions, as hound_snp computes them.

With ``R`` and ``A`` the (untransformed) reference and alternate predictions over shifts ``s``,
bins ``l`` and tracks, and ``f`` one of ``x``, ``log2(x + 1)``, ``sqrt(x)``:

- ``SUM``, ``logSUM``, ``sqrtSUM``: ``mean_s sum_l f(A) - mean_s sum_l f(R)``
- ``logSED``: ``mean_s log2(sum_l A + 1) - mean_s log2(sum_l R + 1)``
- ``SAX``: ``mean_s (A - R)`` at the bin where ``|A - R|`` is largest (the first such bin)
- ``D1``, ``logD1``, ``sqrtD1``: ``mean_s ||f(A) - f(R)||_1`` over ``l``; ``D2``, ``logD2``,
  ``sqrtD2`` the same with the L2 norm
- ``JS``: per shift, both profiles plus the reference's 25th percentile over bins, normalised
  over bins; the mean over shifts of the symmetrised Kullback-Leibler divergence (natural log)
- ``logJS``: the same on ``log2(x + 1)`` as baskerville computes it: percentile and normalisation
  run over the *shift* axis, so with one shift it is 0 (NaN where both predictions are 0)
- ``REF``, ``ALT``: the predictions themselves, ``(shifts, bins, tracks)`` per variant
- ``logFC`` (kennel's own, not a hound_snp stat): ``log2(mean_s sum_l A + 1) - log2(... R ...)``
  with a strand pair's coverage summed inside the log.

A strand pair becomes one track as baskerville's strand transform makes it: each stat is
computed per track, then the pair's two values are added, except the L2 stats, which combine
as ``sqrt(a**2 + b**2)`` after the mean over shifts; ``REF``/``ALT`` add the pair bin by bin.

Everything is computed in float64: with identical reference and alternate predictions every
difference is exactly zero, and no thread split or vector/scalar code path can leave a score
that is not. Scores are clipped to the float16 range, stored as float16, and -0 is stored as 0.
"""

from __future__ import annotations

import numpy as np
import torch

from kennel.snp.stat_names import HOUND_STATS, STATS

_TRANSFORMS = {
    "": lambda x: x,
    "log": lambda x: torch.log2(x + 1),
    "sqrt": torch.sqrt,
}
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


def check_stats(stats) -> None:
    unknown = [stat for stat in stats if stat not in STATS]
    if unknown:
        raise ValueError(f"unknown stat(s) {', '.join(unknown)} (known: {', '.join(STATS)})")


def compute_stats(
    ref: torch.Tensor,
    alt: torch.Tensor,
    stats: tuple[str, ...] = HOUND_STATS,
    strand_to: torch.Tensor | None = None,
    n_collapsed: int | None = None,
    profile_step: int = 1,
) -> dict[str, torch.Tensor]:
    """Scores ``(..., tracks')`` (``REF``/``ALT``: ``(..., shifts, bins, tracks')``) from
    predictions ``(..., shifts, bins, tracks)``; ``ref`` broadcasts against ``alt``.

    ``strand_to`` (:func:`strand_map`) sends each track to one of ``n_collapsed`` collapsed
    tracks; None keeps the tracks as they are. ``profile_step`` 2 keeps every other shift row for
    ``REF``/``ALT`` (an indel's un-compensated shifts). Float64, not clipped.
    """
    check_stats(stats)
    ref, alt = ref.double(), alt.double()
    n_shifts = alt.shape[-3]
    wanted = set(stats)

    def collapse(score: torch.Tensor, l2: bool = False) -> torch.Tensor:
        if strand_to is None:
            return score
        if l2:
            score = score * score
        collapsed = score.new_zeros((*score.shape[:-1], n_collapsed))
        collapsed.index_add_(-1, strand_to, score)
        return collapsed.sqrt() if l2 else collapsed

    scores: dict[str, torch.Tensor] = {}
    for prefix, transform in _TRANSFORMS.items():
        names = {f"{prefix}SUM", f"{prefix}D1", f"{prefix}D2"} & wanted
        if not names:
            continue
        ref_f, alt_f = transform(ref), transform(alt)
        if f"{prefix}SUM" in names:
            mean_sum = alt_f.sum(-2).sum(-2) / n_shifts - ref_f.sum(-2).sum(-2) / n_shifts
            scores[f"{prefix}SUM"] = collapse(mean_sum)
        if names & {f"{prefix}D1", f"{prefix}D2"}:
            difference = alt_f - ref_f
            if f"{prefix}D1" in names:
                scores[f"{prefix}D1"] = collapse(difference.abs().sum(-2).mean(-2))
            if f"{prefix}D2" in names:
                norm = (difference * difference).sum(-2).sqrt().mean(-2)
                scores[f"{prefix}D2"] = collapse(norm, l2=True)
        del ref_f, alt_f
    if "logSED" in wanted:
        sed = torch.log2(alt.sum(-2) + 1).mean(-2) - torch.log2(ref.sum(-2) + 1).mean(-2)
        scores["logSED"] = collapse(sed)
    if "SAX" in wanted:
        difference = alt - ref
        at = difference.abs().argmax(-2, keepdim=True)  # the first bin of the largest change
        scores["SAX"] = collapse(difference.gather(-2, at).squeeze(-2).mean(-2))
    if "JS" in wanted:
        pseudocount = _quantile(ref, 0.25, dim=-2)
        scores["JS"] = collapse(_symmetric_kl(ref, alt, pseudocount, dim=-2).mean(-2))
    if "logJS" in wanted:
        ref_log, alt_log = torch.log2(ref + 1), torch.log2(alt + 1)
        pseudocount = _quantile(ref_log, 0.25, dim=-3)
        scores["logJS"] = collapse(_symmetric_kl(ref_log, alt_log, pseudocount, dim=-3).mean(-2))
    for name, predictions in (("REF", ref), ("ALT", alt)):
        if name in wanted:
            scores[name] = collapse(predictions[..., ::profile_step, :, :])
    if "logFC" in wanted:
        alt_sum = collapse(alt.sum(-2).sum(-2) / n_shifts)
        ref_sum = collapse(ref.sum(-2).sum(-2) / n_shifts)
        scores["logFC"] = torch.log2(alt_sum + 1) - torch.log2(ref_sum + 1)
    return {stat: scores[stat] for stat in stats}


def _quantile(values: torch.Tensor, q: float, dim: int) -> torch.Tensor:
    """numpy's default (linear) percentile along ``dim``, kept as a size-1 dim; unlike
    ``torch.quantile`` it has no input size limit (a Borzoi profile is 47M values)."""
    n = values.shape[dim]
    position = q * (n - 1)
    low = int(np.floor(position))
    fraction = position - low
    below = values.kthvalue(low + 1, dim=dim, keepdim=True).values
    if fraction == 0:
        return below
    above = values.kthvalue(low + 2, dim=dim, keepdim=True).values
    return below + (above - below) * fraction


def _symmetric_kl(ref, alt, pseudocount, dim: int) -> torch.Tensor:
    """``(KL(r || a) + KL(a || r)) / 2`` summed over bins, with ``r``/``a`` the pseudocounted
    profiles normalised over ``dim``; scipy's ``rel_entr`` conventions (0 log 0 = 0)."""
    ref_norm = ref + pseudocount
    ref_norm = ref_norm / ref_norm.sum(dim, keepdim=True)
    alt_norm = alt + pseudocount
    alt_norm = alt_norm / alt_norm.sum(dim, keepdim=True)
    return (_rel_entr(ref_norm, alt_norm).sum(-2) + _rel_entr(alt_norm, ref_norm).sum(-2)) / 2


def _rel_entr(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """scipy.special.rel_entr: ``x log(x / y)`` for positive x and y, 0 at x = 0 <= y, else
    inf (NaN stays NaN)."""
    positive = (x > 0) & (y > 0)
    value = torch.where(positive, x * torch.log(x / y), torch.full_like(x, torch.inf))
    value = torch.where((x == 0) & (y >= 0), torch.zeros_like(x), value)
    return torch.where(torch.isnan(x) | torch.isnan(y), torch.full_like(x, torch.nan), value)


def to_float16(scores: np.ndarray | torch.Tensor) -> np.ndarray:
    """Clip to the float16 range and convert, so a huge score saturates instead of becoming inf;
    -0 becomes 0 (a zero is a zero, whichever side it was rounded from)."""
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    converted = np.clip(scores, -FLOAT16_MAX, FLOAT16_MAX).astype(np.float16)
    converted += np.float16(0)
    return converted


def quantile_grid() -> np.ndarray:
    """0.001-0.099 by 0.001, 0.10-0.89 by 0.01, 0.900-0.999 by 0.001 (fine in both tails).

    Built with float steps as hound_snp builds its ``percentiles``, so the grid and the
    quantiles are its to the last bit (``k / 1000`` differs from the stepped values in the
    16th digit, and that moves a few float16 quantiles).
    """
    fine, coarse = 0.001, 0.01
    return np.concatenate(
        [np.arange(fine, 0.1, fine), np.arange(0.1, 0.9, coarse), np.arange(0.9, 1, fine)]
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
        # the stored float16 scores as they are: hound_snp takes percentiles of the dataset
        block = np.asarray(scores[:, first : first + step])
        result[first : first + step] = np.percentile(block, 100 * grid, axis=0).T
    return result
