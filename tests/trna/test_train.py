"""Training: a stratified, hash-based held-out split; deterministic weights; a bundle that carries
its contract; ≥ 95% held-out accuracy on the demo simulation and near chance for the control."""

from __future__ import annotations

import csv
import hashlib

import numpy as np
import pytest
import torch
from kennel.cli import main
from kennel.errors import KennelError
from kennel.models.bundle import load_bundle
from kennel.sim.trna import TrnaSimulation, simulate_trna
from kennel.trna.features import FeatureFile, FeatureSpec
from kennel.trna.kennel_classify import load_classifier
from kennel.trna.shard import shard_sample
from kennel.trna.train import (
    heldout_mask,
    offset_view,
    read_truth,
    train_bundle,
)

from tests.conftest import extract_shards, shard_outputs

# a small model and two epochs: enough to exercise everything, seconds on one core
TINY = {"channels": 8, "base_channels": 8, "hidden": 16, "dilations": [1, 2]}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def demo_training_data(tmp_path_factory) -> dict:
    """The demo-sized simulation (3000 reads), sharded into one shard and extracted, once."""
    out = tmp_path_factory.mktemp("train_sim")
    sim = simulate_trna(out, TrnaSimulation(samples=("train",), reads=3000, seed=7))
    outputs = shard_outputs(out / "shards", 1)
    shard_sample(sim["train.bam"], [sim["train.pod5"]], sim["reference"], outputs)
    (features,), _ = extract_shards(outputs, sim, out / "features")
    return {"features": features, "truth": sim["train.truth.tsv"]}


@pytest.fixture(scope="session")
def tiny_bundle(features, trna_sim, tmp_path_factory) -> tuple:
    output = tmp_path_factory.mktemp("tiny_bundle") / "tiny.pt"
    metrics = train_bundle(
        features,
        [trna_sim["s1.truth.tsv"]],
        output,
        epochs=2,
        seed=5,
        hyperparameters=TINY,
        threads=1,
    )
    return output, metrics


def test_heldout_split_is_stratified_and_order_free():
    ids = [f"read-{i:04d}" for i in range(1000)]
    labels = np.array(["Ala", "Gly", "Leu", "Phe"])[np.arange(1000) % 4]
    mask = heldout_mask(ids, labels, 0.2)
    for label in np.unique(labels):
        assert mask[labels == label].sum() == 50
    # the held-out reads of a class are those with the smallest salted hashes, whatever the order
    digest = {r: hashlib.sha256(f"kennel-trna-holdout:{r}".encode()).hexdigest() for r in ids}
    ala = [r for r, label in zip(ids, labels, strict=True) if label == "Ala"]
    held_ala = {r for r, m, label in zip(ids, mask, labels, strict=True) if m and label == "Ala"}
    assert held_ala == set(sorted(ala, key=digest.get)[:50])
    order = np.random.default_rng(0).permutation(1000)
    shuffled = heldout_mask([ids[i] for i in order], labels[order], 0.2)
    assert np.array_equal(shuffled, mask[order])


@pytest.mark.parametrize(
    "offset, seen",
    [(0, None), (9, (6, 12)), (-9, (-12, -6)), (8, (4, 12)), (12, (12, 12)), (1, (-10, 12))],
)
def test_offset_view_positions(offset, seen):
    spec = FeatureSpec()
    view = offset_view(spec, offset)
    if seen is None:
        assert view is None
        return
    relative = [i - spec.upstream for i in range(*view)]
    assert (relative[0], relative[-1]) == seen
    assert relative[len(relative) // 2] == offset  # centred on anchor + offset


def test_offset_outside_the_window_is_refused():
    with pytest.raises(KennelError, match="leaves the feature window"):
        offset_view(FeatureSpec(), 13)


def test_training_is_deterministic(tiny_bundle, features, trna_sim, tmp_path):
    first, _ = tiny_bundle
    again = tmp_path / "again.pt"
    train_bundle(
        features,
        [trna_sim["s1.truth.tsv"]],
        again,
        epochs=2,
        seed=5,
        hyperparameters=TINY,
        threads=1,
    )
    a, b = load_bundle(first)["state_dict"], load_bundle(again)["state_dict"]
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = tmp_path / "other-seed.pt"
    train_bundle(
        features, [trna_sim["s1.truth.tsv"]], other, epochs=1, seed=6, hyperparameters=TINY
    )
    c = load_bundle(other)["state_dict"]
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_bundle_carries_its_contract(tiny_bundle, features, trna_sim):
    path, metrics = tiny_bundle
    bundle = load_bundle(path)
    metadata, provenance = bundle["metadata"], bundle["provenance"]
    with FeatureFile(features[0]) as handle:
        spec = handle.spec
    assert metadata["class_names"] == ["Ala", "Gly", "Leu", "Phe"]
    assert FeatureSpec.from_json(metadata["feature_spec"]) == spec
    assert metadata["heldout_metrics"]["heldout_accuracy"] == metrics["heldout_accuracy"]
    assert metadata["input_normalisation"]["dwell"] == "log1p"
    assert metadata["charging_head"] is True
    assert bundle["hyperparameters"]["dilations"] == [1, 2]
    assert "kernel_size" in bundle["hyperparameters"]  # defaults recorded too
    assert provenance["seed"] == 5
    hashes = {entry["path"]: entry["sha256"] for entry in provenance["training_files"]}
    for file in [*features, trna_sim["s1.truth.tsv"]]:
        assert hashes[str(file)] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert not any(key.startswith("_orig_mod.") for key in bundle["state_dict"])
    model, loaded = load_classifier(path, spec, features[0])
    assert not model.training and loaded["architecture"] == "trna_tcn"


def test_spec_mismatch_names_both_files_and_fields(tiny_bundle, features):
    path, _ = tiny_bundle
    with FeatureFile(features[0]) as handle:
        spec = handle.spec
    other = FeatureSpec(**{**spec.__dict__, "chunk_length": 256, "justify": "start"})
    with pytest.raises(KennelError) as error:
        load_classifier(path, other, "shard.features.h5")
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and "shard.features.h5" in message
    assert "chunk_length: 512 != 256" in message and "justify: 'center' != 'start'" in message


def test_a_bundle_of_another_architecture_is_refused(tiny_bundle, features, tmp_path):
    path, _ = tiny_bundle
    bundle = load_bundle(path)
    bundle["architecture"] = "motif_coverage"
    renamed = tmp_path / "motif.pt"
    torch.save(bundle, renamed)
    with FeatureFile(features[0]) as handle:
        spec = handle.spec
    with pytest.raises(KennelError, match="'motif_coverage' is not a tRNA classifier"):
        load_classifier(renamed, spec)


def test_reads_without_truth_are_an_error(features, trna_sim, tmp_path):
    truth = tmp_path / "partial.tsv"
    with open(trna_sim["s1.truth.tsv"]) as source, open(truth, "w") as target:
        lines = source.readlines()
        target.writelines(lines[: len(lines) // 2])
    with pytest.raises(KennelError, match="have no label in"):
        train_bundle(features, [truth], tmp_path / "x.pt", epochs=1, hyperparameters=TINY)
    assert not (tmp_path / "x.pt").exists()


def test_truth_reader_skips_unlabelled_rows(trna_sim):
    truth = read_truth([trna_sim["s1.truth.tsv"]])
    with open(trna_sim["s1.truth.tsv"]) as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    labelled = [r for r in rows if r["label"]]
    assert len(truth) == len(labelled)
    assert all(truth[r["read_id"]] == (r["label"], float(r["charging"])) for r in labelled)


def test_cli_trains_and_prints_metrics(features, trna_sim, tmp_path, capsys):
    output = tmp_path / "cli.pt"
    argv = ["train", "--features", *map(str, features), "--truth", str(trna_sim["s1.truth.tsv"])]
    argv += ["--output", str(output), "--epochs", "1", "--channels", "8", "--seed", "3"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "held-out accuracy" in printed and "charging MAE" in printed
    assert load_bundle(output)["provenance"]["command"].startswith("kennel train")
    assert main(["bundle-info", str(output)]) == 0
    assert "trna_tcn" in capsys.readouterr().out
    assert main([*argv[:-4], "--window-offset", "13"]) == 2
    assert "leaves the feature window" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_accuracy_and_negative_control(demo_training_data, tmp_path):
    features, truth = [demo_training_data["features"]], [demo_training_data["truth"]]
    bundle = tmp_path / "demo.pt"
    metrics = train_bundle(features, truth, bundle, epochs=5, seed=1, threads=1)
    assert metrics["n_heldout"] >= 500
    assert metrics["heldout_accuracy"] >= 0.95
    assert metrics["heldout_charging_mae"] < 0.08  # predicting the mean scores ~0.125

    # the recorded accuracy, recomputed from the bundle on the held-out reads
    with FeatureFile(features[0]) as handle:
        spec = handle.spec
        batch = next(handle.batches(len(handle)))
    model, loaded = load_classifier(bundle, spec)
    labels_by_read = read_truth(truth)
    ids = [r.decode() for r in batch.read_id]
    labels = np.array([labels_by_read[r][0] for r in ids])
    heldout = heldout_mask(ids, labels, 0.2)
    with torch.no_grad():
        logits, _ = model(
            torch.from_numpy(batch.signal[heldout]), torch.from_numpy(batch.bases[heldout])
        )
    predicted = np.array(loaded["metadata"]["class_names"])[logits.argmax(1).numpy()]
    assert np.mean(predicted == labels[heldout]) == pytest.approx(metrics["heldout_accuracy"])

    control = train_bundle(
        features, truth, tmp_path / "control.pt", epochs=5, seed=1, window_offset=9, threads=1
    )
    assert control["bases_seen"] == [6, 12] and not control["uses_signal"]
    assert control["heldout_accuracy"] < 0.40
