"""Clusters, windows and alternate sequences against their plain definitions."""

from __future__ import annotations

import random

import numpy as np
import pysam
import pytest
import torch
from kennel.errors import KennelError
from kennel.snp.clusters import (
    Cluster,
    alt_one_hot,
    alt_window,
    cluster_variants,
    fetch_window,
)
from kennel.snp.onehot import dna_1hot
from kennel.snp.vcf import Variant


def variant(chrom: str, pos: int, ref: str = "A", alt: str = "C", record: int = 1) -> Variant:
    return Variant(id=f"{chrom}:{pos}", chrom=chrom, pos=pos, ref=ref, alt=alt, record=record)


def plain_clusters(variants, seq_len, cluster_pct):
    """hound_snp's rule, written as a loop over (chromosome, first position) pairs."""
    distance = int(seq_len * cluster_pct)
    clusters = []
    for index, v in enumerate(variants):
        last = clusters[-1] if clusters else None
        if last and v.chrom == last["chrom"] and v.pos < last["first"] + distance:
            last["members"].append(index)
        else:
            clusters.append({"chrom": v.chrom, "first": v.pos, "members": [index]})
    return [(c["chrom"], tuple(c["members"])) for c in clusters]


def test_clustering_matches_the_rule_and_windows_are_centred():
    rng = random.Random(3)
    for _ in range(200):
        variants = []
        for chrom in rng.sample(["chr1", "chr2", "chr3"], rng.randint(1, 3)):
            positions = sorted(rng.randint(1, 5000) for _ in range(rng.randint(1, 25)))
            variants += [variant(chrom, pos) for pos in positions]
        seq_len, pct = rng.choice([512, 2048]), rng.choice([0.0, 0.05, 0.1, 0.5, 0.999])
        clusters = cluster_variants(variants, seq_len, pct)
        assert [(c.chrom, c.members) for c in clusters] == plain_clusters(variants, seq_len, pct)
        for cluster in clusters:
            # hound_snp's SNPCluster.delimit: the midpoint of 1-based VCF positions, then a
            # 0-based window start (its get_1hots fetches [start, start + seq_len))
            positions = [variants[i].pos for i in cluster.members]
            centre = (min(positions) + max(positions)) // 2
            assert cluster.start == centre - seq_len // 2
            for i in cluster.members:
                assert 0 <= cluster.offset(variants[i]) < seq_len


def test_the_widest_cluster_still_fits_its_window():
    ends = [variant("chr1", 1000), variant("chr1", 999 + int(2048 * 0.999))]
    (cluster,) = cluster_variants(ends, 2048, 0.999)  # both ends in one cluster
    # start (1000 + 3044) // 2 - 1024 = 998 on 1-based positions, as hound_snp
    assert [cluster.offset(v) for v in ends] == [1, 2045]
    # at 1 the last member could fall one past the window (hound_snp allows it; we refuse)
    with pytest.raises(KennelError, match=r"cluster_pct=1: must be within \[0, 1\)"):
        cluster_variants([variant("chr1", 1000)], 2048, 1)


def test_a_lone_variant_sits_just_left_of_the_window_centre():
    # hound_snp: start = pos - seq_len // 2 with pos 1-based, so the base (0-based pos - 1)
    # sits at seq_len // 2 - 1
    (cluster,) = cluster_variants([variant("chr1", 1001)], 2048, 0.1)
    assert cluster == Cluster("chr1", 1001 - 1024, (0,))
    assert cluster.offset(variant("chr1", 1001)) == 1023


def test_windows_are_n_padded_past_the_chromosome(snp_sim):
    with pysam.FastaFile(str(snp_sim["genome"])) as fasta:
        chromosome = fasta.fetch("chr1")
        length = len(chromosome)
        for start, seq_len in [(-100, 256), (length - 50, 256), (-10, length + 20), (500, 64)]:
            expected = "".join(
                chromosome[i] if 0 <= i < length else "N" for i in range(start, start + seq_len)
            )
            assert fetch_window(fasta, "chr1", start, seq_len) == expected


def test_alt_window_definition():
    window = "AAAACCCCGGGG"
    assert alt_window(window, 4, "C", "T") == "AAAATCCCGGGG"
    assert alt_window(window, 4, "CCC", "C") == "AAAACCGGGGNN"  # deletion: shift left, pad N
    assert alt_window(window, 4, "C", "CTT") == "AAAACTTCCCGG"  # insertion: shift right, cut
    assert alt_window(window, 10, "G", "GTTTTT") == "AAAACCCCGGGT"


def test_alt_one_hot_equals_encoding_the_alt_window():
    rng = random.Random(11)
    for _ in range(1000):
        seq_len = rng.randint(8, 80)
        window = "".join(rng.choices("ACGTN", k=seq_len))
        offset = rng.randint(0, seq_len - 1)
        ref = window[offset : offset + rng.randint(1, 6)]
        alt = "".join(rng.choices("ACGTN", k=rng.randint(1, 8)))
        expected = dna_1hot(alt_window(window, offset, ref, alt))
        # float, as the engine builds it on the device
        reference, allele = (torch.from_numpy(dna_1hot(s)).float() for s in (window, alt))
        actual = alt_one_hot(reference, offset, len(ref), allele)
        assert np.array_equal(actual.numpy(), expected.astype(np.float32)), (
            window,
            offset,
            ref,
            alt,
        )
