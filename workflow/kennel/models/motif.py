"""A tiny sequence-to-coverage model whose weights are written down, not trained.

It stands in for Borzoi/Enformer in the SNP arm's demo and tests: same input and output layout
(one-hot ``(batch, seq_len, 4)`` in, ``(batch, bins, tracks)`` coverage out, +/- strand track
pairs), but every number it predicts can be checked by hand. Each motif occurrence covers the
bases it spans with 1.0 on its strand's track, so a variant that breaks or creates an exact
occurrence moves the summed coverage by the motif's length, and any other variant moves nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kennel.errors import KennelError
from kennel.models.bundle import register_architecture

ALPHABET = "ACGT"
# Non-palindromic (each differs from its reverse complement), so the two strands differ.
DEFAULT_MOTIFS = ("TGACTCAG", "GGGAATTCC")
_COMPLEMENT = str.maketrans("ACGTNacgtn", "TGCANtgcan")


def reverse_complement(sequence: str) -> str:
    """Reverse complement of a DNA string (keeps case and N)."""
    return sequence.translate(_COMPLEMENT)[::-1]


def _inverse_softplus(value: float) -> float:
    return math.log(math.expm1(value))


@register_architecture("motif_coverage")
class MotifCoverage(nn.Module):
    """Exact-motif detector that pools its hits into binned, stranded coverage.

    Tracks come in strand pairs ``[motif0+, motif0-, motif1+, motif1-, ...]``; the + track
    counts ``motifs[i]`` read on the given strand, the - track its reverse complement.
    A window scores +1 per matching base, -1 per mismatch and 0 per N, and fires
    ``(score - (len - threshold)) / threshold`` when positive: with ``threshold <= 1`` only
    exact matches fire (a mismatch costs 2, an N 1), each contributing 1.0 per covered base.
    """

    def __init__(
        self,
        seq_len: int,
        bin_size: int,
        crop_bins: int,
        motifs: list[str],
        threshold: float = 1.0,
        baseline: float = 0.05,
    ) -> None:
        super().__init__()
        _check_hyperparameters(seq_len, bin_size, crop_bins, motifs, threshold, baseline)
        self.seq_len = seq_len
        self.bin_size = bin_size
        self.crop_bins = crop_bins
        self.motifs = [motif.upper() for motif in motifs]
        self.target_length = seq_len // bin_size - 2 * crop_bins
        patterns = [p for motif in self.motifs for p in (motif, reverse_complement(motif))]
        width = max(len(p) for p in patterns)

        self.match = nn.Conv1d(len(ALPHABET), len(patterns), kernel_size=width)
        # Spreads each hit over the bases its motif covers; fixed, so a buffer.
        self.register_buffer("footprint", torch.zeros(len(patterns), 1, width))
        self.baseline_logit = nn.Parameter(
            torch.full((len(patterns),), _inverse_softplus(baseline))
        )
        with torch.no_grad():
            self.match.weight.zero_()
            for row, pattern in enumerate(patterns):
                for offset, base in enumerate(pattern):
                    self.match.weight[row, :, offset] = -1.0
                    self.match.weight[row, ALPHABET.index(base), offset] = 1.0
                self.match.bias[row] = threshold - len(pattern)
                self.footprint[row, 0, : len(pattern)] = 1.0 / threshold

    @property
    def target_ids(self) -> list[str]:
        """Track identifiers in output order: ``motif0+``, ``motif0-``, ..."""
        return [f"motif{i}{strand}" for i in range(len(self.motifs)) for strand in "+-"]

    @property
    def strand_pair(self) -> list[int]:
        """Index of each track's opposite-strand partner."""
        return [track ^ 1 for track in range(2 * len(self.motifs))]

    def forward(self, one_hot: torch.Tensor) -> torch.Tensor:
        """Map one-hot ``(batch, seq_len, 4)`` to coverage ``(batch, target_length, tracks)``."""
        if one_hot.shape[1:] != (self.seq_len, len(ALPHABET)):
            raise ValueError(
                f"expected input of shape (batch, {self.seq_len}, 4), got {tuple(one_hot.shape)}"
            )
        width = self.match.kernel_size[0]
        # Pad both ends alike so a motif overhanging either edge scores the same way,
        # which keeps the model exactly reverse-complement equivariant.
        sequence = F.pad(one_hot.transpose(1, 2), (width - 1, width - 1))
        hits = torch.relu(self.match(sequence))
        spread = F.conv_transpose1d(hits, self.footprint, groups=hits.shape[1])
        coverage = spread[..., width - 1 : width - 1 + self.seq_len]
        binned = coverage.unflatten(-1, (-1, self.bin_size)).sum(-1)
        n_bins = binned.shape[-1]
        cropped = binned[..., self.crop_bins : n_bins - self.crop_bins]
        baseline = F.softplus(self.baseline_logit)[None, :, None]
        return (cropped + baseline).transpose(1, 2)


def make_motif_model(
    seq_len: int,
    bin_size: int = 32,
    crop_bins: int | None = None,
    motifs: tuple[str, ...] | list[str] = DEFAULT_MOTIFS,
    threshold: float = 1.0,
    baseline: float = 0.05,
) -> tuple[MotifCoverage, dict[str, Any]]:
    """Build the analytic motif model and the hyperparameters that rebuild it from a bundle.

    ``crop_bins`` defaults to an eighth of the bins on each side, like Borzoi's cropping.
    """
    if crop_bins is None:
        crop_bins = seq_len // bin_size // 8 if bin_size > 0 else 0
    hyperparameters = {
        "seq_len": int(seq_len),
        "bin_size": int(bin_size),
        "crop_bins": int(crop_bins),
        "motifs": [str(motif).upper() for motif in motifs],
        "threshold": float(threshold),
        "baseline": float(baseline),
    }
    return MotifCoverage(**hyperparameters).eval(), hyperparameters


def _check_hyperparameters(
    seq_len: int,
    bin_size: int,
    crop_bins: int,
    motifs: list[str],
    threshold: float,
    baseline: float,
) -> None:
    if bin_size <= 0:
        raise KennelError(f"bin_size={bin_size}: must be positive")
    if seq_len <= 0 or seq_len % bin_size:
        raise KennelError(f"seq_len={seq_len}: must be a positive multiple of bin_size={bin_size}")
    if crop_bins < 0 or seq_len // bin_size - 2 * crop_bins <= 0:
        raise KennelError(
            f"crop_bins={crop_bins}: must leave at least one of the {seq_len // bin_size} bins"
        )
    if not motifs:
        raise KennelError("motifs: need at least one motif")
    for motif in motifs:
        if not motif or set(motif.upper()) - set(ALPHABET):
            raise KennelError(f"motifs: {motif!r} is not a non-empty ACGT string")
    if threshold <= 0:
        raise KennelError(f"threshold={threshold}: must be positive")
    if baseline <= 0:
        raise KennelError(f"baseline={baseline}: must be positive (coverage is never zero)")
