"""The classify runner: tags, thresholds, batch-size and fused/decoupled identity, compile,
a failing writer, and bad inputs — each a one-line error with no partial output."""

from __future__ import annotations

import array
import json
import threading

import kennel.trna.classify as classify_module
import numpy as np
import pysam
import pytest
import torch
from kennel.cli import main
from kennel.errors import KennelError
from kennel.gpu import GpuMonitor
from kennel.io.bam import PREDICTION_TAGS
from kennel.models.trna_classifier import TrnaTcn
from kennel.trna.classify import classify_shard
from kennel.trna.extract import spec_for
from kennel.trna.model_job import (
    ClassifySettings,
    FusedExtraction,
    TaggingWriter,
    call_classes,
    decode_tags,
    encode_tags,
)

CLASSES = ["Ala", "Gly", "Leu", "Phe"]


def _classify(sharded, features, bundle, out, shard=1, **settings):
    stats = classify_shard(
        sharded.bams[shard],
        bundle,
        out / "c.bam",
        out / "c.tsv",
        out / "c.json",
        ClassifySettings(**{"device": "cpu", **settings}),
        features=features[shard],
    )
    return stats, out / "c.bam"


def _sam_lines(path):
    with pysam.AlignmentFile(str(path)) as bam:
        return [record.to_string() for record in bam.fetch(until_eof=True)]


def test_every_record_comes_back_with_tags_where_classified(sharded, features, bundle, tmp_path):
    stats, out = _classify(sharded, features, bundle, tmp_path)
    source = _sam_lines(sharded.bams[1])
    tagged = _sam_lines(out)
    assert len(tagged) == len(source) == stats["records_written"]
    n_tagged = 0
    for before, after in zip(source, tagged, strict=True):
        assert after.startswith(before)  # the record itself is unchanged; tags are appended
        n_tagged += "\taa:Z:" in after
    assert n_tagged == stats["reads_classified"] > 0
    assert pysam.AlignmentFile(str(out)).check_index()
    predictions = (tmp_path / "c.tsv").read_text().splitlines()
    assert len(predictions) == stats["reads_classified"] + 1
    assert stats["compilations"] == 0 and not stats["compiled"]


def test_a_run_shorter_than_one_nvml_sample_still_reports_the_gpu_busy_fraction(
    sharded, features, bundle, tmp_path, monkeypatch
):
    """The stats read NVML's fraction once the monitor has stopped, so a run that ends before
    the first sample gets NVML's last period (NVML faked; the forward runs on the CPU)."""
    readings = iter([0.7, 0.3])  # construction reads once; the run's end reads 0.3
    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: 100 * next(readings))
    monkeypatch.setattr(
        classify_module, "GpuMonitor", lambda device: GpuMonitor(torch.device("cuda"), 60.0)
    )
    stats, _ = _classify(sharded, features, bundle, tmp_path)
    assert stats["gpu_busy_fraction_nvml"] == pytest.approx(0.3)
    written = json.loads((tmp_path / "c.json").read_text())
    assert written["gpu_busy_fraction_nvml"] == pytest.approx(0.3)


def test_batch_size_does_not_change_a_single_tag(sharded, features, bundle, tmp_path):
    small, out_small = _classify(sharded, features, bundle, tmp_path / "a", batch_size=64)
    large, out_large = _classify(sharded, features, bundle, tmp_path / "b", batch_size=1024)
    assert small["batches"] > 1 and large["batches"] == 1
    assert _sam_lines(out_small) == _sam_lines(out_large)


def test_fused_equals_decoupled(trna_sim, sharded, features, bundle, tmp_path):
    decoupled, out_decoupled = _classify(sharded, features, bundle, tmp_path / "d")
    spec = spec_for(trna_sim["kmer_table"])
    (tmp_path / "f").mkdir()
    fused = classify_shard(
        sharded.bams[1],
        bundle,
        tmp_path / "f/c.bam",
        tmp_path / "f/c.tsv",
        tmp_path / "f/c.json",
        ClassifySettings(device="cpu"),
        fused=FusedExtraction(
            [sharded.pod5s[1]], trna_sim["reference"], trna_sim["kmer_table"], 2, spec
        ),
    )
    assert fused["fused"] and fused["reads_classified"] == decoupled["reads_classified"]
    assert fused["skipped"] == decoupled["skipped"]
    assert fused["extraction"] == decoupled["extraction"] and decoupled["extraction"]
    assert _sam_lines(tmp_path / "f/c.bam") == _sam_lines(out_decoupled)


@pytest.mark.parametrize("raw", [False, True])
def test_tags_round_trip(raw):
    probabilities = np.array([0.7, 0.2, 0.06, 0.04])
    header = pysam.AlignmentHeader.from_dict({"SQ": [{"SN": "c", "LN": 10}]})
    record = pysam.AlignedSegment(header)
    record.query_name = "r"
    record.set_tags([("aa", "Gly"), ("pc", 9), ("pp", array.array("f", [1.0]))])  # stale tags
    (tags,) = encode_tags(["Ala"], [0.7], [0.5], probabilities[None], [0.83], CLASSES, raw)
    for name, value, kind in tags:
        record.set_tag(name, value, kind)
    assert sorted(name for name, _ in record.get_tags()) == sorted(PREDICTION_TAGS)
    decoded = decode_tags(pysam.AlignedSegment.fromstring(record.to_string(), header))
    tolerance = 1e-6 if raw else 0.5 / 255
    assert decoded["label"] == "Ala" and decoded["class_names"] == CLASSES
    assert decoded["confidence"] == pytest.approx(0.7, abs=tolerance)
    assert decoded["margin"] == pytest.approx(0.5, abs=tolerance)
    assert decoded["charging"] == pytest.approx(0.83, abs=tolerance)
    np.testing.assert_allclose(decoded["probabilities"], probabilities, atol=tolerance)


def test_uint8_encoding_clamps_and_rounds():
    encoded = encode_tags(
        ["Ala", "Arg"], [1.2, 0.302], [-0.1, 0.0], np.array([[0.5, 0.5], [1.0, 0.0]]),
        [0.002, 0.5], CLASSES[:2], False,
    )  # fmt: skip
    first, second = ({name: value for name, value, _ in tags} for tags in encoded)
    assert first["ac"] == 255 and first["am"] == 0 and first["pc"] == 1
    assert list(first["pp"]) == [128, 128] and list(second["pp"]) == [255, 0]
    assert second["aa"] == "Arg" and second["ac"] == 77 and second["pc"] == 128
    (without_charging,) = encode_tags(["Ala"], [1.0], [1.0], np.eye(2)[:1], None, CLASSES[:2], 0)
    assert ("pc", None, None) in without_charging  # removes a stale pc


def test_thresholds_produce_unc():
    probabilities = np.array(
        [[0.9, 0.05, 0.03, 0.02], [0.4, 0.35, 0.15, 0.1], [0.3, 0.3, 0.2, 0.2]]
    )
    labels, top, margin = call_classes(probabilities, CLASSES, ClassifySettings())
    assert labels == ["Ala", "Ala", "Ala"]
    labels, _, _ = call_classes(probabilities, CLASSES, ClassifySettings(min_confidence=200))
    assert labels == ["Ala", "unc", "unc"]
    labels, _, _ = call_classes(probabilities, CLASSES, ClassifySettings(min_margin=10))
    assert labels == ["Ala", "Ala", "unc"]
    np.testing.assert_allclose(margin, [0.85, 0.05, 0.0])


def _kennel_threads():
    return [t for t in threading.enumerate() if t.name.startswith("kennel-")]


def test_failing_writer_is_an_error_with_no_output_and_no_thread_left(
    sharded, features, bundle, tmp_path, monkeypatch
):
    def broken(self, item):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TaggingWriter, "write", broken)
    with pytest.raises(OSError, match="No space left"):
        _classify(sharded, features, bundle, tmp_path, batch_size=16)
    assert not list(tmp_path.iterdir())
    assert not _kennel_threads()


def test_warm_up_and_every_batch_run_on_the_one_device_thread(
    sharded, features, bundle, tmp_path, monkeypatch
):
    # CUDA graphs are recorded per thread: a warm-up on another thread would record again
    threads = []
    original = TrnaTcn.forward

    def recording(self, *args):
        threads.append(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(TrnaTcn, "forward", recording)
    # compiled runs warm up (here inductor is left out: the graph is the module itself)
    monkeypatch.setattr(classify_module, "compile_for", lambda module, *args, **kwargs: module)
    stats, _ = _classify(sharded, features, bundle, tmp_path / "c", batch_size=16, compile="on")
    assert len(threads) == stats["batches"] + 1  # the warm-up, then each batch
    assert len(set(threads)) == 1 and threads[0].startswith("kennel-device")
    # an eager CPU run has nothing to warm up: a forward on zeros would only cost time
    threads.clear()
    stats, _ = _classify(sharded, features, bundle, tmp_path / "e", batch_size=16, compile="off")
    assert len(threads) == stats["batches"] and set(threads) == {threads[0]}


@pytest.mark.slow
def test_compile_takes_effect_once_and_agrees_with_eager(sharded, features, bundle, tmp_path):
    torch._dynamo.reset()
    eager, _ = _classify(sharded, features, bundle, tmp_path / "e", batch_size=64, compile="off")
    compiled, _ = _classify(sharded, features, bundle, tmp_path / "c", batch_size=64, compile="on")
    assert compiled["compiled"] and compiled["batches"] > 1  # ragged: 161 reads in 64s
    assert compiled["compilations"] == 1
    assert eager["compilations"] == 0
    tables = []
    for name in ("e", "c"):
        rows = (tmp_path / name / "c.tsv").read_text().splitlines()[1:]
        tables.append([row.split("\t") for row in rows])
    for row_eager, row_compiled in zip(*tables, strict=True):
        assert row_eager[0] == row_compiled[0] and row_eager[1] == row_compiled[1]
        np.testing.assert_allclose(
            np.array(row_eager[5:], float), np.array(row_compiled[5:], float), atol=1e-3
        )


def _cli(sharded, features, bundle, out, *extra, shard=1):
    return main(
        [
            "classify",
            "--bam", str(sharded.bams[shard]),
            "--bundle", str(bundle),
            "--features", str(features[shard]),
            "--output", str(out / "c.bam"),
            "--predictions", str(out / "c.tsv"),
            "--stats", str(out / "c.json"),
            *extra,
        ]
    )  # fmt: skip


def _edited_bundle(bundle, tmp_path, **changes):
    content = torch.load(bundle, weights_only=True)
    for key, value in changes.items():
        if key == "feature_spec_chunk":
            spec = json.loads(content["metadata"]["feature_spec"])
            spec["chunk_length"] = value
            content["metadata"]["feature_spec"] = json.dumps(spec, sort_keys=True)
        else:
            content[key] = value
    path = tmp_path / "edited.pt"
    torch.save(content, path)
    return path


class _Payload:
    def __reduce__(self):
        return (print, ("never",))


@pytest.mark.parametrize(
    "case, message",
    [
        ("spec", "different feature spec"),
        ("architecture", "unknown architecture"),
        ("version", "format version 7 is not supported"),
        ("pickle", "refusing to load a bundle that needs code execution"),
        ("truncated", "features"),
        ("cuda", "device: 'cuda' was requested"),
    ],
)
def test_bad_inputs_one_line_no_partial_bam(
    sharded, features, bundle, tmp_path, capsys, case, message
):
    out = tmp_path / "out"
    out.mkdir()
    extra: list[str] = []
    feature_files = list(features)
    if case == "spec":
        bundle = _edited_bundle(bundle, tmp_path, feature_spec_chunk=256)
    elif case == "architecture":
        bundle = _edited_bundle(bundle, tmp_path, architecture="transformer9000")
    elif case == "version":
        bundle = _edited_bundle(bundle, tmp_path, format_version=7)
    elif case == "pickle":
        bundle = tmp_path / "evil.pt"
        torch.save({"format": "kennel-bundle", "x": _Payload()}, bundle)
    elif case == "truncated":
        truncated = tmp_path / "truncated.h5"
        truncated.write_bytes(features[1].read_bytes()[:20_000])
        feature_files[1] = truncated
    elif case == "cuda":
        if torch.cuda.is_available():
            pytest.skip("CUDA is present: 'device: cuda' is valid here")
        extra = ["--device", "cuda"]
    assert _cli(sharded, feature_files, bundle, out, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not list(out.iterdir())
    assert not _kennel_threads()


def test_settings_are_checked():
    with pytest.raises(KennelError, match="batch size must be positive"):
        ClassifySettings(batch_size=0).check()
    with pytest.raises(KennelError, match="min_margin must be within 0-255"):
        ClassifySettings(min_margin=300).check()
    ClassifySettings(copy_tags=("qs", "RG", "X1")).check()
    for tag in ("q", "1s", "qs,"):
        with pytest.raises(KennelError, match=f"copy tag {tag!r} is not a SAM tag name"):
            ClassifySettings(copy_tags=(tag,)).check()


def test_out_of_memory_halves_the_batch_with_identical_tags_or_is_one_line(
    sharded, features, bundle, tmp_path, monkeypatch, caplog
):
    """The one out-of-memory policy (kennel.feed.BatchRunner, shared with score-snps), on the
    CPU by injecting the error: above ``limit`` rows per forward the model runs out of memory."""
    reference, reference_bam = _classify(sharded, features, bundle, tmp_path / "r", batch_size=64)
    original = TrnaTcn.forward
    limit = {"rows": 20}
    shapes = []

    def short_of_memory(self, signal, bases):
        shapes.append(signal.shape[0])
        if signal.shape[0] > limit["rows"]:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return original(self, signal, bases)

    monkeypatch.setattr(TrnaTcn, "forward", short_of_memory)
    with caplog.at_level("WARNING", logger="kennel.feed"):
        stats, out = _classify(sharded, features, bundle, tmp_path / "a", batch_size=64)
    assert "out of cpu memory; running this and later batches in pieces of 32 rows" in caplog.text
    assert "in pieces of 16 rows" in caplog.text
    assert stats["rows_per_forward"] == 16 and stats["out_of_memory_halvings"] == 2
    assert max(shapes[-3:]) == 16  # later batches keep the smaller size
    assert _sam_lines(out) == _sam_lines(reference_bam)
    assert stats["labels"] == reference["labels"]

    limit["rows"] = 0  # not even one row fits: one line, no output
    with pytest.raises(
        KennelError,
        # the job is named by its shard
        match=rf"classify {sharded.bams[1].name}: out of cpu memory even one row at a time "
        r"\(batch size 64; ",
    ):
        _classify(sharded, features, bundle, tmp_path / "b", batch_size=64)
    assert not list((tmp_path / "b").glob("**/*"))  # no output (nor its directory)
    assert not _kennel_threads()
