"""The split of classification into a GPU job that writes the model's outputs (``kennel
classify --outputs``) and a CPU job that tags the BAM from them (``kennel tag``): the tag job's
thresholds act on the stored outputs exactly (checked by a plain loop over them), and a tag
job given the wrong outputs or bundle stops in one line, writing nothing. That the split
reproduces leech's tags for every bundle is checked in tests/leech (test_leech_made runs the
workflow's own commands)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pysam
import pytest
from kennel.cli import main
from kennel.errors import KennelError
from kennel.trna.model_job import ClassifySettings
from kennel.trna.tag import tag_shard


def _score(sharded, features, bundle, path, shard=1):
    arguments = [
        "classify", "--bam", str(sharded.bams[shard]), "--bundle", str(bundle),
        "--features", str(features[shard]), "--outputs", str(path), "--device", "cpu",
        "--batch-size", "64",
    ]  # fmt: skip
    assert main(arguments) == 0
    return path


def _tag(sharded, outputs, bundle, directory, *options, shard=1) -> list[str]:
    directory.mkdir(exist_ok=True)
    return [
        "tag", "--bam", str(sharded.bams[shard]), "--outputs", str(outputs),
        "--bundle", str(bundle), "--output", str(directory / "t.bam"),
        "--predictions", str(directory / "t.tsv"), "--stats", str(directory / "t.json"),
        "--threads", "2", *options,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def scored(sharded, features, bundle, tmp_path_factory):
    return _score(sharded, features, bundle, tmp_path_factory.mktemp("scored") / "1.h5")


def test_thresholds_act_on_the_stored_outputs(sharded, bundle, scored, tmp_path):
    """The same outputs tagged with and without thresholds: a read is `unc` exactly where its
    stored top probability or margin, on the uint8 scale, is below them (a plain loop here)."""
    with h5py.File(scored) as handle:
        ids = [read_id.decode() for read_id in handle["read_id"][:]]
        scores = handle["scores"][:]
        assert handle.attrs["reads"] == len(ids) > 50
    # thresholds that cut the (briefly trained) bundle's reads near their medians
    ordered = np.sort(scores, axis=1)
    min_confidence = int(np.median(np.round(ordered[:, -1] * 255)))
    min_margin = int(np.quantile(np.round((ordered[:, -1] - ordered[:, -2]) * 255), 0.25))
    expected = {}
    for read_id, row in zip(ids, scores, strict=True):
        top, second = sorted(row, reverse=True)[:2]
        low = round(top * 255) < min_confidence or round((top - second) * 255) < min_margin
        expected[read_id] = low
    assert 0 < sum(expected.values()) < len(expected)  # both kinds of read occur
    plain, strict = tmp_path / "plain", tmp_path / "strict"
    assert main(_tag(sharded, scored, bundle, plain)) == 0
    arguments = ["--min-confidence", str(min_confidence), "--min-margin", str(min_margin)]
    assert main(_tag(sharded, scored, bundle, strict, *arguments)) == 0
    calls = {}
    for directory in (plain, strict):
        with pysam.AlignmentFile(str(directory / "t.bam")) as bam:
            calls[directory] = {
                r.query_name: r.get_tag("aa") for r in bam.fetch(until_eof=True) if r.has_tag("aa")
            }
    assert calls[plain].keys() == calls[strict].keys() == expected.keys()
    assert "unc" not in calls[plain].values()
    for read_id, low in expected.items():
        assert (calls[strict][read_id] == "unc") == low, read_id
        assert low or calls[strict][read_id] == calls[plain][read_id]
    stats = json.loads((strict / "t.json").read_text())
    assert stats["reads_classified"] == stats["reads_scored"] == len(ids)
    assert stats["settings"]["min_confidence"] == min_confidence
    assert stats["tagging"]["reads_per_s"] > 0 and stats["stage_s"]["device"] > 0


def test_outputs_of_another_bundle_are_refused(sharded, bundle, scored, tmp_path, capsys):
    other = tmp_path / "other.pt"
    other.write_bytes(bundle.read_bytes() + b"\0")  # another file: another SHA-256
    assert main(_tag(sharded, scored, other, tmp_path / "out")) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "scored by another bundle than" in error[0], error
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "damage", ["truncated", "not outputs", "another shard", "another version", "no scores"]
)
def test_bad_outputs_are_one_line_and_no_output(sharded, bundle, scored, tmp_path, damage):
    outputs = tmp_path / "outputs.h5"
    shard = 1
    if damage == "truncated":
        outputs.write_bytes(scored.read_bytes()[:5000])
        expected = "not a complete kennel classify outputs file"
    elif damage == "not outputs":
        outputs.write_bytes(sharded.bams[1].read_bytes())
        expected = "not a complete kennel classify outputs file"
    elif damage == "another shard":
        outputs, shard = scored, 0  # shard 1's outputs beside shard 0's BAM
        expected = "prediction has no record at or after the current position"
    else:
        outputs.write_bytes(scored.read_bytes())
        with h5py.File(outputs, "a") as handle:
            if damage == "another version":  # a settings field this kennel does not know
                settings = json.loads(handle.attrs["settings"])
                handle.attrs["settings"] = json.dumps({**settings, "renamed_option": 1})
                expected = "classify settings this kennel does not read .*rerun classify"
            else:
                del handle["scores"]
                expected = "not a complete kennel classify outputs file"
    with pytest.raises(KennelError, match=expected) as raised:
        tag_shard(
            sharded.bams[shard], outputs, bundle, tmp_path / "o/t.bam", tmp_path / "o/t.tsv",
            tmp_path / "o/t.json", ClassifySettings(),
        )  # fmt: skip
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_classify_takes_outputs_or_a_tagged_bam_not_both(
    sharded, features, bundle, tmp_path, capsys
):
    base = [
        "classify", "--bam", str(sharded.bams[1]), "--bundle", str(bundle),
        "--features", str(features[1]), "--device", "cpu",
    ]  # fmt: skip
    both = ["--outputs", str(tmp_path / "o.h5"), "--output", str(tmp_path / "o.bam")]
    half = ["--output", str(tmp_path / "o.bam"), "--stats", str(tmp_path / "o.json")]
    # the tag job decides the thresholds: given to a classify that only scores, they would vanish
    thresholds = ["--outputs", str(tmp_path / "o.h5"), "--min-margin", "5", "--raw-tags"]
    for extra in (both, half, [], thresholds):
        assert main(base + extra) != 0
    assert "--min-margin, --raw-tags: give tag options to `kennel tag`" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_outputs_hold_every_scored_row_as_the_writer_got_it(sharded, features, bundle, scored):
    """One row per classifiable read (kennel's bundle scores a read once), in the features
    file's order, probabilities summing to one."""
    with h5py.File(features[1]) as handle:
        feature_ids = handle["read_id"][:]
    with h5py.File(scored) as handle:
        assert list(handle["read_id"][:]) == list(feature_ids)
        scores = handle["scores"][:]
        assert scores.dtype == np.float64
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-5)
        assert "signal" not in handle and "bases" not in handle  # model inputs stay out
