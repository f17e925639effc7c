"""hound_snp's ensembles over one sequence's predictions: shifted inputs, the reverse
complement turned back and averaged with the forward strand, and an indel's plain and
compensated shifts stitched at its bin."""

from __future__ import annotations

import torch

# shifted-in bases are all-zero rows: hound_snp shifts a boolean one-hot, whose pad is 0
SHIFT_PAD = 0.0


def shifted(one_hot: torch.Tensor, shift: int) -> torch.Tensor:
    """``(length, 4)`` one-hot moved ``shift`` bases right (left when negative), the length
    kept: bases pushed past an end are dropped and the gap is padded, as baskerville's
    ``shift_sequence`` does."""
    if shift > 0:
        pad = one_hot.new_full((shift, 4), SHIFT_PAD)
        return torch.cat([pad, one_hot[:-shift]])
    if shift < 0:
        pad = one_hot.new_full((-shift, 4), SHIFT_PAD)
        return torch.cat([one_hot[-shift:], pad])
    return one_hot


def mean_orientations(rows: torch.Tensor, strand_swap: torch.Tensor) -> torch.Tensor:
    """Predictions ``(rows, orientations, bins, tracks)`` -> ``(rows, bins, tracks)`` float64.

    The reverse complement's prediction is turned back (bins flipped, strand-paired tracks
    swapped) and averaged with the forward one in float32, as hound_snp's Keras ``Average``
    does, before anything else goes to float64: averaging in float64 can land a score on the
    other side of a float16 rounding boundary.
    """
    rows = rows.float()
    if rows.shape[1] == 1:
        return rows[:, 0].double()
    reverse = rows[:, 1].flip(-2).index_select(-1, strand_swap)
    return ((rows[:, 0] + reverse) / 2).double()


def stitch(predictions: torch.Tensor, at: int) -> torch.Tensor:
    """hound_snp's ``stitch_preds``: from each (plain, compensated) pair of shift rows, the
    plain one's bins before ``at`` and the compensated one's from ``at`` on (Python slicing, so
    a negative ``at`` counts from the end as it does there)."""
    pairs = predictions.unflatten(0, (-1, 2))
    return torch.stack([torch.cat([pair[0][:at], pair[1][at:]]) for pair in pairs])
