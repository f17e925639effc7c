"""The whole tRNA chain on reads simulated from the real yeast reference and RNA004 9-mer table."""

from __future__ import annotations

import csv

import pysam
import pytest
from kennel.sim.trna import TrnaSimulation, simulate_trna
from kennel.trna.shard import shard_sample
from kennel.trna.train import train_bundle

from tests.conftest import (
    REAL_KMER_TABLE,
    REAL_REFERENCE,
    classify_and_merge,
    extract_shards,
    require_real_data,
    shard_outputs,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_pair(tmp_path_factory):
    require_real_data()
    out = tmp_path_factory.mktemp("realism")
    return out, simulate_trna(
        out / "sim",
        TrnaSimulation(
            samples=("train", "test"),
            reads=700,
            seed=21,
            reference=REAL_REFERENCE,
            kmer_table=REAL_KMER_TABLE,
        ),
    )


def _chain_to_features(sim, sample, out, n_shards):
    outputs = shard_outputs(out / sample, n_shards)
    shard_sample(sim[f"{sample}.bam"], [sim[f"{sample}.pod5"]], sim["reference"], outputs)
    features, _ = extract_shards(outputs, sim, out / sample)
    return outputs, features


def test_real_reference_chain_classifies_unseen_reads(real_pair):
    out, sim = real_pair
    _, train_features = _chain_to_features(sim, "train", out, 1)
    bundle = out / "bundle.pt"
    train_bundle(train_features, [sim["train.truth.tsv"]], bundle, epochs=4, seed=1, threads=2)

    outputs, features = _chain_to_features(sim, "test", out, 2)
    merged, accounting, _ = classify_and_merge(outputs, features, bundle, out / "test")
    assert accounting["merged"] == accounting["input"]

    with open(sim["test.truth.tsv"]) as handle:
        truth = {row["read_id"]: row["label"] for row in csv.DictReader(handle, delimiter="\t")}
    calls = {
        record.query_name: record.get_tag("aa")
        for record in pysam.AlignmentFile(str(merged)).fetch(until_eof=True)
        if record.has_tag("aa")
    }
    assert len(calls) >= 0.85 * sum(1 for label in truth.values() if label)
    accuracy = sum(truth[read_id] == label for read_id, label in calls.items()) / len(calls)
    assert accuracy >= 0.9, accuracy
