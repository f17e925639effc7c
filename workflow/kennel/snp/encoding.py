"""A cluster's windows as one-hot arrays: the reference, then each scored alternate (run on
the engine's prefetch thread, one cluster ahead of the device)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kennel.snp.clusters import Cluster, alt_one_hot, fetch_window
from kennel.snp.onehot import dna_1hot
from kennel.snp.prepare import Prepared


@dataclass
class EncodedCluster:
    number: int
    cluster: Cluster
    members: list[int]  # scored variant indices
    sequences: np.ndarray | None  # (1 + len(members), seq_len, 4) bool: reference, then alts
    staged: torch.Tensor | None = None  # on the CPU, the same as float (made off the loop)


def encode_cluster(
    fasta, prepared: Prepared, number: int, cluster: Cluster, seq_len: int
) -> EncodedCluster:
    """Fetch the cluster's window and one-hot code it and each scored alternate allele."""
    members = [i for i in cluster.members if prepared.keep[i]]
    if not members:
        return EncodedCluster(number, cluster, members, None)
    reference = dna_1hot(fetch_window(fasta, cluster.chrom, cluster.start, seq_len))
    sequences = np.empty((1 + len(members), seq_len, 4), dtype=bool)
    sequences[0] = reference
    for slot, index in enumerate(members, start=1):
        variant = prepared.variants[index]
        genome_allele, placed = variant.placed  # a flipped variant places its REF
        alt_one_hot(
            reference,
            cluster.offset(variant),
            len(genome_allele),
            dna_1hot(placed),
            out=sequences[slot],
        )
    return EncodedCluster(number, cluster, members, sequences)
