"""Fixtures of the tRNA arm: one simulated sample sharded and extracted once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from kennel.trna.extract import extract_shard
from kennel.trna.shard import ShardOutputs, shard_sample


def shard_outputs(directory: Path, n_shards: int) -> ShardOutputs:
    return ShardOutputs(
        pod5s=[directory / f"{i:03d}.pod5" for i in range(n_shards)],
        bams=[directory / f"{i:03d}.bam" for i in range(n_shards)],
        passthrough=directory / "passthrough.bam",
        counts=directory / "counts.tsv",
    )


@pytest.fixture(scope="session")
def sharded(trna_sim, tmp_path_factory) -> ShardOutputs:
    outputs = shard_outputs(tmp_path_factory.mktemp("shards"), 3)
    shard_sample(trna_sim["s1.bam"], [trna_sim["s1.pod5"]], trna_sim["reference"], outputs)
    return outputs


@pytest.fixture(scope="session")
def features(trna_sim, sharded, tmp_path_factory) -> list[Path]:
    """Features of every shard (shard 0 with two worker processes, to cover the pool path)."""
    directory = tmp_path_factory.mktemp("features")
    paths = []
    for index, (bam, pod5) in enumerate(zip(sharded.bams, sharded.pod5s, strict=True)):
        path = directory / f"{index:03d}.features.h5"
        extract_shard(
            bam,
            [pod5],
            trna_sim["reference"],
            trna_sim["kmer_table"],
            path,
            threads=2 if index == 0 else 1,
        )
        paths.append(path)
    return paths
