"""The scorer on the demo's inputs: effects, an independent recomputation, resume, feeding."""

from __future__ import annotations

import dataclasses
import logging
import threading

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from kennel import feed
from kennel.errors import KennelError
from kennel.models.bundle import load_bundle
from kennel.snp import engine, ensemble
from kennel.snp.scoring import ScoreOptions, partial_path, prepare, score_in_memory, score_snps
from snp_helpers import OPTIONS, SEQ_LEN, assert_same_scores, read_scores, row_ids

# --- the demo's motif effects -----------------------------------------------------------------


def test_motif_breaking_variants_rank_top_by_abs_logsum(snp_sim, one_slice):
    truth = pd.read_csv(snp_sim["truth"], sep="\t")
    scores = read_scores(one_slice["merged"])["data"]
    rows = list(zip(scores["snp"].astype(str), scores["alt_allele"].astype(str), strict=True))
    assert rows == list(zip(row_ids(truth["id"]), truth["alt"], strict=True))
    assert len(set(scores["snp"])) == len(scores["snp"])  # one id per row
    log_sum = scores["logSUM"].astype(np.float64)
    strength = np.abs(log_sum).max(axis=1)
    effect = truth["effect"].to_numpy()
    breaking, neutral = effect == "motif_break", effect == "neutral"
    assert strength[breaking].min() > strength[neutral].max()
    ranked = np.argsort(-strength, kind="stable")
    assert set(ranked[: (~neutral).sum()]) == set(np.flatnonzero(~neutral))
    assert (log_sum[breaking].sum(axis=1) < 0).all()
    assert (log_sum[effect == "motif_create"].sum(axis=1) > 0).all()
    # the motif model is exact: a neutral substitution changes no prediction, so every stat is
    # 0; a neutral indel moves the window's far end (hound_snp re-aligns one side only), which
    # the demo's untransform amplifies, but stays below every motif effect (asserted above)
    substitution = (truth["ref"].str.len() == truth["alt"].str.len()).to_numpy()
    for stat in OPTIONS.stats:
        assert not scores[stat][neutral & substitution].any(), stat


# The independent recomputation (hound_snp's code paths, every stat) is test_hound_equivalence.py.


# --- resuming a killed run -----------------------------------------------------------------------


class Killed(Exception):
    pass


def kill_after(clusters: int):
    def progress(done: int, total: int) -> None:
        if done >= clusters:
            raise Killed(f"killed after {done} of {total}")

    return progress


def test_a_killed_slice_resumes_after_its_last_cluster_with_identical_output(
    snp_sim, four_slices, tmp_path
):
    vcf, reference = four_slices["slices"][0], four_slices["scores"][0]
    inputs = (vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    out = tmp_path / "slice.scores.h5"
    partial = partial_path(out)

    # a partial file from other options is not resumed ...
    other = dataclasses.replace(OPTIONS, stats=("SUM",))
    with pytest.raises(Killed):
        score_snps(*inputs, out, other, progress=kill_after(3), commit_seconds=0)
    # ... this run starts over, and is killed after 7 clusters
    with pytest.raises(Killed):
        score_snps(*inputs, out, OPTIONS, progress=kill_after(7), commit_seconds=0)
    assert not out.exists() and partial.exists()
    with h5py.File(partial, "r") as handle:
        assert handle.attrs["status"] == "partial" and handle.attrs["clusters_done"] == 7

    seen: list[int] = []
    report = score_snps(
        *inputs, out, OPTIONS, progress=lambda d, t: seen.append(d), commit_seconds=0
    )
    assert report.resumed_clusters == 7 and seen[0] == 8 and seen[-1] == report.clusters
    assert not partial.exists()
    assert_same_scores(out, reference)


# --- how the model is fed -------------------------------------------------------------------------


class Recording(torch.nn.Module):
    """Wraps a model: records input shapes, and fails like CUDA when a batch is too big."""

    def __init__(self, inner, max_rows: int | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.max_rows = max_rows
        self.shapes: list[tuple[int, ...]] = []

    def forward(self, x):
        self.shapes.append(tuple(x.shape))
        if self.max_rows is not None and x.shape[0] > self.max_rows:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.inner(x)


def reference_rows(one_slice, n_rows: int) -> dict[str, np.ndarray]:
    data = read_scores(one_slice["merged"])["data"]
    return {stat: data[stat][:n_rows] for stat in OPTIONS.stats}


def prepared_subset(snp_sim, small_vcf, **changes):
    options = dataclasses.replace(OPTIONS, **changes)
    inputs = (small_vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    return prepare(*inputs, options)


def assert_equal_scores(actual: dict, expected: dict) -> None:
    for stat, values in expected.items():
        assert np.array_equal(actual[stat], values), stat


def test_prefetch_thread_fixed_batches_and_no_cache_flush(
    snp_sim, small_vcf, one_slice, monkeypatch
):
    threads: list[str] = []
    encode = engine.encode_cluster

    def recording_encode(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return encode(*args, **kwargs)

    def forbidden():
        raise AssertionError("the CUDA cache must not be emptied")

    monkeypatch.setattr(engine, "encode_cluster", recording_encode)
    monkeypatch.setattr(torch.cuda, "empty_cache", forbidden)
    prepared = prepared_subset(snp_sim, small_vcf, batch_size=6)
    recorder = Recording(prepared.model.module)
    prepared.model.module = recorder
    scores = score_in_memory(prepared)
    assert threads and set(threads) == {"kennel-prefetch"}
    assert len(threads) == len(prepared.clusters)
    assert len(recorder.shapes) > 3 and set(recorder.shapes) == {(6, SEQ_LEN, 4)}
    assert_equal_scores(scores, reference_rows(one_slice, len(scores["SUM"])))


def test_out_of_memory_retries_in_smaller_batches_with_identical_scores(
    snp_sim, small_vcf, one_slice, caplog
):
    prepared = prepared_subset(snp_sim, small_vcf, batch_size=8)
    prepared.model.module = Recording(prepared.model.module, max_rows=2)
    with caplog.at_level(logging.WARNING, logger="kennel.feed"):
        scores = score_in_memory(prepared)
    assert "out of cpu memory; running this and later batches in pieces of 4 rows" in caplog.text
    assert "in pieces of 2 rows" in caplog.text
    assert_equal_scores(scores, reference_rows(one_slice, len(scores["SUM"])))
    assert set(prepared.model.module.shapes[-3:]) == {(2, SEQ_LEN, 4)}  # the smaller size stays

    prepared.model.module = Recording(prepared.model.module.inner, max_rows=0)
    with pytest.raises(
        KennelError,
        match=r"score-snps model.pt: out of cpu memory even one row at a time "
        r"\(batch size 8; \d+ MiB available\)",
    ):
        score_in_memory(prepared)


@pytest.mark.slow
def test_compile_happens_once_for_the_whole_slice(snp_sim, small_vcf, one_slice, monkeypatch):
    calls = []
    real_compile = torch.compile

    def eager_compile(module, **kwargs):  # dynamo's tracing and guards, without inductor's C++
        calls.append(kwargs)
        return real_compile(module, backend="eager", dynamic=kwargs["dynamic"])

    monkeypatch.setattr(torch, "compile", eager_compile)
    prepared = prepared_subset(snp_sim, small_vcf, compile="on", batch_size=4)
    before = feed.compile_count()
    scores = score_in_memory(prepared)
    assert feed.compile_count() - before == 1
    assert calls == [{"backend": "inductor", "mode": None, "dynamic": False}]
    assert_equal_scores(scores, reference_rows(one_slice, len(scores["SUM"])))


@pytest.mark.slow
def test_the_warm_up_compiles_before_the_first_cluster(
    snp_sim, small_vcf, one_slice, tmp_path, monkeypatch
):
    """The job compiles in its warm-up, outside the forward timer; every cluster then runs on
    that graph (no compilation after it), with the reference run's scores."""
    real_compile = torch.compile
    monkeypatch.setattr(  # dynamo's tracing and guards, without inductor's C++
        torch, "compile", lambda module, **kw: real_compile(module, backend="eager", dynamic=False)
    )
    torch._dynamo.reset()  # an earlier test's graph of this model would serve without compiling
    counts = {}
    real_warm_up = engine.Engine.warm_up

    def warm_up(self):
        counts["before"] = feed.compile_count()
        seconds = real_warm_up(self)
        counts["after"] = feed.compile_count()
        return seconds

    monkeypatch.setattr(engine.Engine, "warm_up", warm_up)
    options = dataclasses.replace(OPTIONS, compile="on", batch_size=4)
    out = tmp_path / "scores.h5"
    report = score_snps(small_vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"], out,
                        options)  # fmt: skip
    assert counts["after"] - counts["before"] == 1 and feed.compile_count() == counts["after"]
    assert report.warmup_seconds > 0
    assert report.steady_variants_per_second > report.variants_per_second
    data = read_scores(out)["data"]
    rows = len(data["SUM"])
    assert_equal_scores(
        {stat: data[stat] for stat in OPTIONS.stats}, reference_rows(one_slice, rows)
    )


def test_auto_compile_stays_off_for_a_small_slice(snp_sim, small_vcf, monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled a small slice"))
    prepared = prepared_subset(snp_sim, small_vcf, compile="auto", compile_threshold=1500)
    assert not engine.Engine(prepared, compile_items=len(prepared.rows)).compiled


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"batch_size": 0}, "batch_size=0"),
        ({"shifts": (0, 0)}, "shifts"),
        ({"stats": ("SUM", "SAD")}, "stats"),
        ({"cluster_pct": 1.5}, "cluster_pct"),
        ({"cluster_pct": 1.0}, "cluster_pct"),
        ({"mix_dtype": "float8"}, "mix_dtype"),
        ({"compile": "maybe"}, "compile"),
        ({"untransform": False, "untransform_old": True}, "untransform_old"),
    ],
)
def test_bad_options_are_one_line(changes, named):
    with pytest.raises(KennelError, match=f"score options: {named}"):
        ScoreOptions(**changes).check()


# --- determinism and replicates -----------------------------------------------------------------


def test_scores_are_bitwise_identical_under_parallel_load(snp_sim, small_vcf, one_slice):
    """The README promises scores independent of how the VCF is sliced. Recompute the first
    slice's variants with two torch threads while another thread keeps both cores busy with
    torch work, three times; every stat must equal the single-threaded whole-VCF run bit for bit
    (neutral variants included, whose every difference is exactly zero)."""
    stop = threading.Event()

    def burn() -> None:
        x = torch.rand(600, 600)
        while not stop.is_set():
            x = torch.tanh(x @ x)

    threads = torch.get_num_threads()
    burner = threading.Thread(target=burn, daemon=True)
    burner.start()
    try:
        torch.set_num_threads(2)
        for _ in range(3):
            scores = score_in_memory(prepared_subset(snp_sim, small_vcf, batch_size=5))
            expected = reference_rows(one_slice, len(scores["SUM"]))
            for stat, values in expected.items():
                assert scores[stat].view(np.uint16).tobytes() == values.view(np.uint16).tobytes()
    finally:
        stop.set()
        burner.join()
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def second_model(snp_sim, tmp_path_factory):
    """A replicate of the demo model that predicts differently: another baseline coverage."""
    from kennel.models.bundle import save_bundle
    from kennel.models.motif import make_motif_model

    bundle = load_bundle(snp_sim["model"])
    model, hyperparameters = make_motif_model(**dict(bundle["hyperparameters"], baseline=0.4))
    path = tmp_path_factory.mktemp("replicate") / "model2.pt"
    save_bundle(path, model, hyperparameters, metadata=bundle["metadata"])
    return path


def test_replicates_share_one_encoding_and_average_their_scores(
    snp_sim, small_vcf, second_model, tmp_path, monkeypatch
):
    models = [snp_sim["model"], second_model]
    options = dataclasses.replace(
        OPTIONS, shifts=(0, 1), per_model=True, stats=("SUM", "logSUM", "D2")
    )
    encoded = []
    encode = engine.encode_cluster
    monkeypatch.setattr(
        engine, "encode_cluster", lambda *a, **k: encoded.append(1) or encode(*a, **k)
    )
    out = tmp_path / "scores.h5"
    score_snps(small_vcf, snp_sim["genome"], models, snp_sim["targets"], out, options)
    n_encoded = len(encoded)
    alone = [
        score_in_memory(
            prepare(
                small_vcf,
                snp_sim["genome"],
                model,
                snp_sim["targets"],
                dataclasses.replace(options, per_model=False),
            )
        )
        for model in models
    ]
    with h5py.File(out, "r") as handle:
        assert n_encoded == handle.attrs["clusters_total"]  # each window encoded once
        assert handle.attrs["models"] == 2
        for stat in options.stats:
            per_model = handle[f"per_model/{stat}"][:]
            for index in range(2):  # each model's own scores, bit for bit
                assert np.array_equal(per_model[index], alone[index][stat]), stat
            assert not np.array_equal(alone[0][stat], alone[1][stat])  # they do differ
            mean = (alone[0][stat].astype(np.float64) + alone[1][stat].astype(np.float64)) / 2
            np.testing.assert_allclose(
                handle[stat][:].astype(np.float64), mean, rtol=2e-3, atol=1e-3, err_msg=stat
            )


def test_replicates_must_share_input_length_and_output_layout(snp_sim, small_vcf, tmp_path):
    from kennel.models.bundle import save_bundle
    from kennel.models.motif import make_motif_model

    bundle = load_bundle(snp_sim["model"])
    model, hyperparameters = make_motif_model(**dict(bundle["hyperparameters"], crop_bins=4))
    metadata = dict(bundle["metadata"], target_length=model.target_length)
    other = tmp_path / "cropped.pt"
    save_bundle(other, model, hyperparameters, metadata=metadata)
    with pytest.raises(KennelError, match="replicates must agree"):
        prepare(
            small_vcf, snp_sim["genome"], [snp_sim["model"], other], snp_sim["targets"], OPTIONS
        )


def test_orientations_are_averaged_in_float32_as_hound_snp_averages_them():
    """The forward and reverse-complement predictions meet in float32 (Keras' ``Average`` in
    hound_snp), only then float64: 1 and 1 + 2**-23 average to 1 in float32 but to
    1 + 2**-24 in float64, a difference float16 rounding can expose."""
    from hound_reference import predict

    generator = torch.Generator().manual_seed(3)
    forward = torch.rand(8, 4, generator=generator)
    reverse = torch.rand(8, 4, generator=generator)  # as the model returns it: bins reversed
    forward[2, 0] = 1.0
    reverse[8 - 1 - 2, 1] = 1.0 + 2.0**-23  # turned back: bin 2, and track 1 swaps to 0
    pairs = np.array([1, 0, 2, 3])
    outputs = iter([forward[None], reverse[None]])
    reference = predict(lambda _x: next(outputs), np.zeros((16, 4)), np.arange(4), pairs, rc=True)
    ours = ensemble.mean_orientations(torch.stack([forward, reverse])[None], torch.as_tensor(pairs))
    assert ours.dtype == torch.float64
    np.testing.assert_array_equal(ours[0].numpy(), reference.astype(np.float64))
    assert ours[0, 2, 0].item() == 1.0
