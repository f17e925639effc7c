"""hound_snp's ensembles over one sequence's predictions: the shifts each sequence is predicted
at (an indel's compensation among them), shifted inputs, the reverse complement turned back and
averaged with the forward strand, and an indel's plain and compensated shifts stitched at its
bin."""

from __future__ import annotations

from collections.abc import Sequence

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


def plan_shifts(
    base: Sequence[int], indels: Sequence[int], singleton: bool
) -> tuple[list[list[int]], list[str | None], list[tuple[int, int]]]:
    """The shifts each sequence of a cluster is predicted at: ``[reference, *alternates]``;
    which side of each alternate is compensated (None, ``"ref"`` or ``"alt"``); and each
    alternate's reference rows as ``(first, count)``.

    hound_snp's compensation: an indel moves everything after it, so one side is predicted a
    second time shifted by the indel's size to re-align it (each base shift followed by its
    compensated copy). A deletion of a record alone in its window (``singleton``) shifts the
    reference; any other indel shifts its alternate. Each ALT of a lone multi-allelic record is
    scored as hound_snp scores it as the first, each deletion size with its own compensated
    reference rows.
    """
    base = list(base)
    reference_shifts: list[int] = []
    blocks: dict[int, tuple[int, int]] = {}  # compensation (0: none) -> reference rows

    def reference_block(indel: int) -> tuple[int, int]:
        if indel not in blocks:
            rows = [t for s in base for t in (s, s + indel)] if indel else base
            blocks[indel] = (len(reference_shifts), len(rows))
            reference_shifts.extend(rows)
        return blocks[indel]

    alternate_shifts, compensated, reference_rows = [], [], []
    for indel in indels:
        side = None if indel == 0 else "ref" if singleton and indel < 0 else "alt"
        reference_rows.append(reference_block(indel if side == "ref" else 0))
        alternate_shifts.append(
            [t for s in base for t in (s, s - indel)] if side == "alt" else base
        )
        compensated.append(side)
    return [reference_shifts, *alternate_shifts], compensated, reference_rows


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
