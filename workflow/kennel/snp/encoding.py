"""A cluster's window as one-hot bases: the reference, then every scored alternate allele's
bases (run on the engine's prefetch thread, one cluster ahead of the device).

Alternate windows are not made here: each is the reference with one allele spliced in, built
row by row where the batch is assembled (:func:`kennel.snp.clusters.alt_one_hot`), so a cluster
costs one window and its alleles, not one window per variant. A dense VCF puts hundreds of
variants in one cluster (at 524 kb and the default ``cluster_pct``, a variant every 100 bp is
~520), which as whole windows would be 2 MiB each as bool and 8 MiB as float.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from kennel.snp.clusters import Cluster, alt_one_hot, fetch_window
from kennel.snp.onehot import dna_1hot
from kennel.snp.prepare import Prepared


@dataclass(frozen=True)
class Splice:
    """Where one alternate allele goes: at ``offset`` of the window in place of ``ref_len``
    reference bases; its bases are rows ``start:start + length`` of the cluster's ``bases``."""

    offset: int
    ref_len: int
    start: int
    length: int


@dataclass
class EncodedCluster:
    number: int
    cluster: Cluster
    members: list[int]  # scored variant indices
    # (seq_len + allele bases, 4) bool: the reference window, then each scored allele's bases
    bases: np.ndarray | None
    splices: list[Splice] = field(default_factory=list)  # per member
    staged: torch.Tensor | None = None  # on the CPU, ``bases`` as float (made off the loop)


def scored_members(prepared: Prepared, cluster: Cluster) -> list[int]:
    return [i for i in cluster.members if prepared.keep[i]]


def _in_window(cluster: Cluster, variant, seq_len: int) -> str:
    """The placed allele's bases that land in the window (an insertion pushes the rest out)."""
    return variant.placed[1][: seq_len - cluster.offset(variant)]


def allele_bases(prepared: Prepared, cluster: Cluster, seq_len: int) -> int:
    """Rows the cluster's alleles take after its reference window in ``bases``."""
    variants = prepared.variants
    return sum(
        len(_in_window(cluster, variants[i], seq_len)) for i in scored_members(prepared, cluster)
    )


def encode_cluster(
    fasta, prepared: Prepared, number: int, cluster: Cluster, seq_len: int
) -> EncodedCluster:
    """Fetch the cluster's window and one-hot code it and each scored alternate allele."""
    members = scored_members(prepared, cluster)
    if not members:
        return EncodedCluster(number, cluster, members, None)
    bases = np.empty((seq_len + allele_bases(prepared, cluster, seq_len), 4), dtype=bool)
    bases[:seq_len] = dna_1hot(fetch_window(fasta, cluster.chrom, cluster.start, seq_len))
    splices, start = [], seq_len
    for index in members:
        variant = prepared.variants[index]
        genome_allele = variant.placed[0]  # a flipped variant places its REF
        placed = _in_window(cluster, variant, seq_len)
        bases[start : start + len(placed)] = dna_1hot(placed)
        splices.append(Splice(cluster.offset(variant), len(genome_allele), start, len(placed)))
        start += len(placed)
    return EncodedCluster(number, cluster, members, bases, splices)


def upload_rows(prepared: Prepared, seq_len: int) -> int:
    """Rows of the largest cluster's ``bases``: the size of a reused upload buffer."""
    clusters = prepared.clusters
    return seq_len + max((allele_bases(prepared, c, seq_len) for c in clusters), default=0)


def cluster_window(
    bases: torch.Tensor, splices: list[Splice], seq_len: int, sequence: int
) -> torch.Tensor:
    """A cluster's sequence ``sequence`` (0: the reference window, k: its k-th scored
    alternate) from its ``bases``, made where they are (on the device on a GPU)."""
    reference = bases[:seq_len]
    if sequence == 0:
        return reference
    splice = splices[sequence - 1]
    allele = bases[splice.start : splice.start + splice.length]
    return alt_one_hot(reference, splice.offset, splice.ref_len, allele)
