"""Summaries and report plots: the tables agree with a plain pass over the merged BAM, and
every plot is written from them."""

from __future__ import annotations

import csv
from collections import Counter

import pysam
import pytest
from kennel.trna.merge import merge_sample
from kennel.trna.report import trna_report
from kennel.trna.summary import summarize_sample


@pytest.fixture(scope="module")
def summary(sharded, classified, tmp_path_factory):
    bams, stats = classified
    directory = tmp_path_factory.mktemp("summary")
    merged = directory / "s1.bam"
    merge_sample(bams, sharded.passthrough, sharded.counts, stats, merged)
    tables = {name: directory / f"{name}.tsv" for name in ("counts", "classes", "distributions")}
    summarize_sample(
        "s1", merged, sharded.counts, stats,
        tables["counts"], tables["classes"], tables["distributions"],
    )  # fmt: skip
    return merged, tables


def _rows(path):
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_distributions_are_the_tags_counted_one_record_at_a_time(summary):
    merged, tables = summary
    expected: Counter = Counter()
    with pysam.AlignmentFile(str(merged)) as bam:
        for record in bam.fetch(until_eof=True):
            if not record.has_tag("aa"):
                continue
            label = record.get_tag("aa")
            for measure, tag in (("confidence", "ac"), ("margin", "am"), ("charging", "pc")):
                if record.has_tag(tag):  # uint8 tags: the level is the tag's value
                    expected[(measure, label, record.get_tag(tag))] += 1
    written = Counter(
        {(r["measure"], r["label"], int(r["level"])): int(r["reads"])
         for r in _rows(tables["distributions"])}
    )  # fmt: skip
    assert written == expected and sum(written.values()) > 0


def test_counts_account_for_every_record(summary):
    merged, tables = summary
    rows = _rows(tables["counts"])
    total = next(int(r["records"]) for r in rows if r["fate"] == "input")
    with pysam.AlignmentFile(str(merged)) as bam:
        assert total == sum(1 for _ in bam.fetch(until_eof=True))
    assert sum(int(r["records"]) for r in rows if r["fate"] != "input") == total


def test_report_writes_every_plot(summary, tmp_path):
    _, tables = summary
    outputs = {name: tmp_path / f"{name}.png" for name in
               ("composition", "fates", "confidence", "charging")}  # fmt: skip
    trna_report(
        [tables["classes"]], [tables["distributions"]], [tables["counts"]],
        tmp_path / "table.tsv", outputs["composition"], outputs["fates"],
        outputs["confidence"], outputs["charging"], min_confidence=120, min_margin=30,
    )  # fmt: skip
    for path in outputs.values():
        assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000, path
    table = _rows(tmp_path / "table.tsv")
    classes = {r["label"]: r["reads"] for r in _rows(tables["classes"])}
    assert {r["label"]: r["s1"] for r in table} == classes
