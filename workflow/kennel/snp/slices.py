"""Split a VCF into slices, one scoring job each, without splitting a cluster.

A slice boundary falls only where the scorer's clustering starts a new cluster anyway (and
between records), so each variant gets the same window, and the same scores, whatever the
number of slices.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence

import numpy as np
from pysam.libcbgzf import BGZFile

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.snp.clusters import cluster_starts
from kennel.snp.vcf import iter_variants, numbered_lines


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
    # one pass over the VCF keeps, per variant, its record and whether it starts a cluster
    # (9 bytes, and ~8 a cluster below; the variants themselves would be ~0.5 kB each)
    records, starts = array("q"), array("b")
    for variant, starts_cluster in cluster_starts(iter_variants(vcf, alts), seq_len, cluster_pct):
        records.append(variant.record)
        starts.append(starts_cluster)
    records, starts = np.frombuffer(records, np.int64), np.frombuffer(starts, np.int8).astype(bool)
    # a cluster boundary inside a record (cluster_pct 0) is no place to cut a VCF
    starts[1:] &= records[1:] != records[:-1]
    firsts = np.flatnonzero(starts)  # each group's first variant
    sizes = np.diff(np.append(firsts, len(records)))
    bounds = slice_boundaries(sizes.tolist(), len(outputs))
    counts = [int(sizes[bounds[n] : bounds[n + 1]].sum()) for n in range(len(outputs))]
    # each non-empty slice from its first record on; records with no scored allele go with the
    # record before them (and records before any variant with the first slice)
    first_records = [(int(records[firsts[bounds[n]]]), n) for n in range(len(outputs)) if counts[n]]
    # Lines are copied as text: a slice holds the VCF's header and records byte for byte (a
    # file in hound_snp's looser form, as numbered_lines makes it a VCF), and records on
    # contigs the header does not declare (the Borzoi tutorials' VCFs have no ##contig lines)
    # need no header that htslib could write them under.
    with atomic_outputs(*outputs) as temporaries:
        writers = [BGZFile(str(path), "wb") for path in temporaries]
        try:
            slice_number, upcoming = 0, first_records
            for number, line in numbered_lines(vcf):
                if number == 0:  # the header goes into every slice
                    for writer in writers:
                        writer.write(line)
                    continue
                # a record with no scored allele goes with the one before it, and that slice's
                # scorer counts it
                while upcoming and number >= upcoming[0][0]:
                    slice_number = upcoming.pop(0)[1]
                writers[slice_number].write(line)
        finally:
            for writer in writers:
                writer.close()
    return counts
