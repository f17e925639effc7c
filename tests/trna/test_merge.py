"""Merge: every input record exactly once, in input order, tags where classified; a shard
count does not change the output; accounting mismatches are hard errors."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import kennel
import pysam
import pytest
from kennel.errors import KennelError
from kennel.trna.classify import ClassifySettings
from kennel.trna.merge import merge_sample
from kennel.trna.shard import ORDINAL_TAG, shard_sample

from tests.conftest import classify_and_merge, extract_shards, require_tool, shard_outputs

TAGS = ("aa", "ac", "am", "pn", "pp", "pc")


def _lines(path, strip_tags=()):
    out = []
    with pysam.AlignmentFile(str(path), check_sq=False) as bam:
        for record in bam.fetch(until_eof=True):
            for tag in strip_tags:
                record.set_tag(tag, None)
            out.append(record.to_string())
    return out


@pytest.fixture(scope="session")
def merged(sharded, classified, tmp_path_factory):
    bams, stats = classified
    path = tmp_path_factory.mktemp("merged") / "sample.bam"
    accounting = merge_sample(bams, sharded.passthrough, sharded.counts, stats, path, threads=2)
    return path, accounting


def test_merged_is_the_input_plus_tags(trna_sim, merged):
    path, accounting = merged
    original = _lines(trna_sim["s1.bam"])
    assert _lines(path, strip_tags=TAGS) == original
    assert accounting["merged"] == accounting["input"] == len(original)
    with pysam.AlignmentFile(str(path)) as bam:
        assert bam.check_index()
        records = list(bam.fetch(until_eof=True))
        assert not any(r.has_tag(ORDINAL_TAG) for r in records)
        programs = bam.header.to_dict()["PG"]
    tagged = sum(r.has_tag("aa") for r in records)
    assert tagged == accounting["classified"] > 0
    assert tagged + accounting["skipped"] + accounting["passthrough"] == len(original)
    # samtools' convention: one @PG per program that touched the file, each naming the one before
    with pysam.AlignmentFile(str(trna_sim["s1.bam"])) as bam:
        input_programs = bam.header.to_dict().get("PG", [])
    assert programs[: len(input_programs)] == input_programs
    classify, merge = programs[len(input_programs) :]
    assert classify["ID"] == "kennel-classify" and merge["ID"] == "kennel-merge"
    assert merge["PP"] == classify["ID"]
    if input_programs:
        assert classify["PP"] == input_programs[-1]["ID"]


def test_merged_header_names_the_bundle_and_thresholds(trna_sim, bundle, tmp_path):
    """What made the tags, read back from the header as a user would (samtools view -H)."""
    samtools = require_tool("samtools")
    outputs = shard_outputs(tmp_path, 1)
    shard_sample(trna_sim["s1.bam"], [trna_sim["s1.pod5"]], trna_sim["reference"], outputs)
    features, _ = extract_shards(outputs, trna_sim, tmp_path / "features")
    settings = ClassifySettings(device="cpu", min_confidence=17, min_margin=9, raw_tags=True)
    merged, _, _ = classify_and_merge(outputs, features, bundle, tmp_path, settings)
    header = subprocess.run(
        [samtools, "view", "-H", str(merged)], check=True, capture_output=True, text=True
    ).stdout
    programs = [
        dict(field.split(":", 1) for field in line.split("\t")[1:])
        for line in header.splitlines()
        if line.startswith("@PG\t")
    ]
    classify = [fields for fields in programs if fields["ID"] == "kennel-classify"]
    assert len(classify) == 1
    fields = classify[0]
    description = dict(item.split("=", 1) for item in fields["DS"].split(" "))
    assert fields["PN"] == "kennel" and fields["VN"] == kennel.__version__
    assert description == {
        "bundle": str(bundle),
        "bundle_sha256": hashlib.sha256(Path(bundle).read_bytes()).hexdigest(),
        "min_confidence": "17",
        "min_margin": "9",
        "tags": "raw",
    }
    assert "--min-confidence 17" in fields["CL"] and "--raw-tags" in fields["CL"]


def test_samtools_accepts_the_output(trna_sim, merged):
    samtools = require_tool("samtools")
    path, _ = merged
    subprocess.run([samtools, "quickcheck", str(path)], check=True)
    count = subprocess.run(
        [samtools, "view", "-c", str(path)], check=True, capture_output=True, text=True
    )
    expected = subprocess.run(
        [samtools, "view", "-c", str(trna_sim["s1.bam"])],
        check=True,
        capture_output=True,
        text=True,
    )
    assert int(count.stdout) == int(expected.stdout) > 0


def test_one_shard_gives_the_same_merged_bam(trna_sim, bundle, merged, tmp_path):
    outputs = shard_outputs(tmp_path, 1)
    shard_sample(trna_sim["s1.bam"], [trna_sim["s1.pod5"]], trna_sim["reference"], outputs)
    features, _ = extract_shards(outputs, trna_sim, tmp_path / "features")
    settings = ClassifySettings(device="cpu", batch_size=1024)  # not the fixture's 128 either
    single, _, _ = classify_and_merge(outputs, features, bundle, tmp_path, settings)
    assert _lines(single) == _lines(merged[0])


def test_a_missing_shard_is_a_hard_error_and_leaves_nothing(sharded, classified, tmp_path):
    bams, stats = classified
    out = tmp_path / "m.bam"
    with pytest.raises(KennelError, match="is missing among the shards"):
        merge_sample(bams[:2], sharded.passthrough, sharded.counts, stats, out)
    assert not list(tmp_path.iterdir())


def test_a_classify_report_that_does_not_add_up_is_a_hard_error(sharded, classified, tmp_path):
    bams, stats = classified
    out = tmp_path / "m.bam"
    with pytest.raises(KennelError, match="accounting mismatch"):
        merge_sample(bams, sharded.passthrough, sharded.counts, stats[:2], out)
    assert not list(tmp_path.iterdir())
