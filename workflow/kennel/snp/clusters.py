"""Variant clusters that share one reference window, and the alternate windows built from it.

Clustering follows hound_snp: walking sorted variants, one joins the current cluster when it is
on the same chromosome and ``pos < first_pos + int(seq_len * cluster_pct)``; the cluster's window
of ``seq_len`` bases starts (0-based) at ``(min_pos + max_pos) // 2 - seq_len // 2`` of the
members' 1-based VCF positions, exactly as hound_snp places it, so one reference prediction
serves every member (a lone variant sits at window index ``seq_len // 2 - 1``). Bases outside
the chromosome are N.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pysam
import torch

from kennel.errors import KennelError
from kennel.snp.vcf import Variant


@dataclass(frozen=True)
class Cluster:
    """Variants (indices into the variant list, in VCF order) that share one window."""

    chrom: str
    start: int  # 0-based first base of the window; negative near the chromosome start
    members: tuple[int, ...]

    def offset(self, variant: Variant) -> int:
        """Where ``variant`` sits in the window (0-based)."""
        return variant.pos0 - self.start


def cluster_starts(
    variants: Iterable[Variant], seq_len: int, cluster_pct: float
) -> Iterator[tuple[Variant, bool]]:
    """Each of the sorted ``variants`` with whether it starts a new cluster, one at a time (the
    VCF slicer streams a whole VCF through this)."""
    if not 0 <= cluster_pct < 1:  # at 1 a cluster can span the window and lose its last member
        raise KennelError(f"cluster_pct={cluster_pct}: must be within [0, 1)")
    return _starts(variants, int(seq_len * cluster_pct))


def _starts(variants: Iterable[Variant], reach: int) -> Iterator[tuple[Variant, bool]]:
    first: Variant | None = None
    for variant in variants:
        starts = not (
            first is not None and variant.chrom == first.chrom and variant.pos < first.pos + reach
        )
        if starts:
            first = variant
        yield variant, starts


def cluster_variants(
    variants: Sequence[Variant], seq_len: int, cluster_pct: float
) -> list[Cluster]:
    """Group sorted variants into clusters and centre each cluster's window."""
    groups: list[list[int]] = []
    for index, (_, starts) in enumerate(cluster_starts(variants, seq_len, cluster_pct)):
        if starts:
            groups.append([])
        groups[-1].append(index)
    clusters = []
    for members in groups:
        positions = [variants[i].pos for i in members]  # 1-based: hound_snp's midpoint
        centre = (min(positions) + max(positions)) // 2
        clusters.append(
            Cluster(
                chrom=variants[members[0]].chrom,
                start=centre - seq_len // 2,
                members=tuple(members),
            )
        )
    return clusters


def fetch_window(fasta: pysam.FastaFile, chrom: str, start: int, seq_len: int) -> str:
    """``seq_len`` bases of ``chrom`` from 0-based ``start``, N where the chromosome ends."""
    length = fasta.get_reference_length(chrom)
    inside = fasta.fetch(chrom, max(0, start), max(0, min(length, start + seq_len)))
    return "N" * max(0, -start) + inside + "N" * (seq_len - max(0, -start) - len(inside))


def alt_window(ref_window: str, offset: int, ref: str, alt: str) -> str:
    """The alternate window, by definition: REF replaced by ALT at ``offset``.

    Same length as the reference window: a deletion shifts what follows to the left and pads the
    right end with N; an insertion shifts it to the right and truncates the right end.
    """
    seq_len = len(ref_window)
    alternate = ref_window[:offset] + alt + ref_window[offset + len(ref) :]
    return (alternate + "N" * seq_len)[:seq_len]


def alt_one_hot(
    ref_1hot: torch.Tensor, offset: int, ref_len: int, alt_1hot: torch.Tensor
) -> torch.Tensor:
    """:func:`alt_window` on one-hot tensors, made where they are (on the device, from the
    uploaded reference and allele): no re-encoding of the whole window per allele."""
    seq_len = len(ref_1hot)
    placed = alt_1hot[: seq_len - offset]
    after = offset + len(placed)
    tail = ref_1hot[offset + ref_len :][: seq_len - after]
    pad = ref_1hot.new_zeros((seq_len - after - len(tail), *ref_1hot.shape[1:]))
    return torch.cat([ref_1hot[:offset], placed, tail, pad])
