"""Split a VCF into slices, one scoring job each, without splitting a cluster.

A slice boundary falls only where the scorer's clustering starts a new cluster anyway (and
between records), so each variant gets the same window, and the same scores, whatever the
number of slices.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from pysam.libcbgzf import BGZFile

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.snp.clusters import cluster_variants
from kennel.snp.vcf import numbered_lines, read_variants


def slice_boundaries(cluster_sizes: Sequence[int], n_slices: int) -> list[int]:
    """Split clusters (given their variant counts) into ``n_slices`` runs of near-equal counts.

    Returns ``n_slices + 1`` cluster indices; slice ``i`` holds clusters
    ``[bounds[i], bounds[i + 1])``. Each inner boundary is the cluster boundary whose cumulative
    count is nearest to ``i * total / n_slices``; slices are empty when clusters run out.
    """
    if n_slices < 1:
        raise KennelError(f"slices: {n_slices} is less than 1")
    cumulative = np.concatenate([[0], np.cumsum(cluster_sizes, dtype=np.int64)])
    total = int(cumulative[-1])
    bounds = [0]
    for slice_number in range(1, n_slices):
        ideal = slice_number * total / n_slices
        nearest = int(np.argmin(np.abs(cumulative - ideal)))
        bounds.append(max(nearest, bounds[-1]))
    bounds.append(len(cluster_sizes))
    return bounds


def slice_vcf(
    vcf: str | os.PathLike,
    outputs: Sequence[str | os.PathLike],
    seq_len: int,
    cluster_pct: float,
    alts: str = "all",
) -> list[int]:
    """Write ``len(outputs)`` bgzipped VCF slices; returns the number of variants in each.

    ``seq_len``, ``cluster_pct`` and ``alts`` must be the scorer's: they decide where clusters
    end.
    """
    if not outputs:
        raise KennelError("slice-vcf: no output slices named")
    variants = read_variants(vcf, alts).variants
    clusters = cluster_variants(variants, seq_len, cluster_pct)
    # a cluster boundary inside a record (cluster_pct 0) is no place to cut a VCF
    record_clusters: list[list[int]] = []
    for cluster in clusters:
        first_record = variants[cluster.members[0]].record
        if record_clusters and variants[record_clusters[-1][-1]].record == first_record:
            record_clusters[-1].extend(cluster.members)
        else:
            record_clusters.append(list(cluster.members))
    bounds = slice_boundaries([len(members) for members in record_clusters], len(outputs))
    slice_of_record: dict[int, int] = {}
    counts = []
    for number in range(len(outputs)):
        groups = record_clusters[bounds[number] : bounds[number + 1]]
        members = [index for group in groups for index in group]
        counts.append(len(members))
        for index in members:
            slice_of_record[variants[index].record] = number

    # Lines are copied as text: a slice holds the VCF's header and records byte for byte (a
    # file in hound_snp's looser form, as numbered_lines makes it a VCF), and records on
    # contigs the header does not declare (the Borzoi tutorials' VCFs have no ##contig lines)
    # need no header that htslib could write them under.
    with atomic_outputs(*outputs) as temporaries:
        writers = [BGZFile(str(path), "wb") for path in temporaries]
        try:
            slice_number = 0
            for number, line in numbered_lines(vcf):
                if number == 0:  # the header goes into every slice
                    for writer in writers:
                        writer.write(line)
                    continue
                # a record with no scored allele goes with the one before it, and that slice's
                # scorer counts it
                slice_number = slice_of_record.get(number, slice_number)
                writers[slice_number].write(line)
        finally:
            for writer in writers:
                writer.close()
    return counts
