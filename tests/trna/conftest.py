"""Fixtures of the tRNA arm: one simulated sample sharded and extracted once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from kennel.trna.extract import extract_shard
from kennel.trna.shard import ShardOutputs, shard_sample
from kennel.trna.train import train_bundle


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


@pytest.fixture(scope="session")
def bundle(trna_sim, features, tmp_path_factory):
    """A small bundle trained briefly on shards 0 and 2 (accuracy is not the point here)."""
    path = tmp_path_factory.mktemp("bundle") / "bundle.pt"
    train_bundle(
        [features[0], features[2]], [trna_sim["s1.truth.tsv"]], path, epochs=1, seed=3, threads=1
    )
    return path


@pytest.fixture(scope="session")
def classified(sharded, features, bundle, tmp_path_factory):
    """Every shard classified (CPU, eager): (bams, stats jsons)."""
    from kennel.trna.classify import ClassifySettings, classify_shard

    directory = tmp_path_factory.mktemp("classified")
    bams, stats = [], []
    for index, (bam, feature_file) in enumerate(zip(sharded.bams, features, strict=True)):
        out = directory / f"{index:03d}"
        classify_shard(
            bam,
            bundle,
            f"{out}.bam",
            f"{out}.tsv",
            f"{out}.json",
            ClassifySettings(device="cpu", batch_size=128),
            features=feature_file,
        )
        bams.append(Path(f"{out}.bam"))
        stats.append(Path(f"{out}.json"))
    return bams, stats
