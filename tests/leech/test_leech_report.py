"""A leech binary model's reads in the summary and the report: it calls nothing (per-chunk
``MP``/``ML`` tags, no ``aa``/``ac``/``am``), so the report plots the distribution of its
``ML`` probabilities where a caller's confidence and margin would be, with the model's two
class names, instead of empty axes. Read from `leech predict`'s own BAM of the Gly_Phe pair."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from collections import Counter

import pysam
import pytest
from kennel.commands.trna_report import _class_names
from kennel.trna import summary
from kennel.trna.summary import BINARY_SCORED, summarize_sample, trna_report
from leech_reference import PAIR_BUNDLE, PREDICTIONS, require_leech_shared

LEECH_PAIR_BAM = PREDICTIONS["gly_phe_pair.default"]
PLOTS = ("composition", "fates", "confidence", "charging")


def _rows(path):
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.fixture(scope="module")
def binary_summary(tmp_path_factory):
    """`kennel summarize` of leech predict's BAM of the Gly_Phe pair, as a sample's merged BAM
    (every record of it is one leech scored)."""
    require_leech_shared()
    directory = tmp_path_factory.mktemp("binary_summary")
    with pysam.AlignmentFile(str(LEECH_PAIR_BAM)) as bam:
        records = sum(1 for _ in bam.fetch(until_eof=True))
    counts = directory / "shard_counts.tsv"
    counts.write_text(f"kind\tname\trecords\tsignal_samples\ntotal\tinput\t{records}\t\n")
    tables = {name: directory / f"{name}.tsv" for name in ("counts", "classes", "distributions")}
    merged = directory / "fx.bam"  # indexed, as a merged BAM is
    shutil.copyfile(LEECH_PAIR_BAM, merged)
    pysam.index(str(merged))
    summarize_sample(
        "fx", merged, counts, [],
        tables["counts"], tables["classes"], tables["distributions"],
    )  # fmt: skip
    return tables


def test_the_chunk_probabilities_are_leechs_ml_tags_counted_one_chunk_at_a_time(binary_summary):
    expected: Counter = Counter()
    reads = 0
    with pysam.AlignmentFile(str(LEECH_PAIR_BAM)) as bam:
        for record in bam.fetch(until_eof=True):
            assert not record.has_tag("aa")
            if not record.has_tag("MP"):  # no chunk of it was scored
                continue
            reads += 1
            for level in record.get_tag("ML"):
                expected[("chunk_probability", BINARY_SCORED, level)] += 1
    written = Counter(
        {(r["measure"], r["label"], int(r["level"])): int(r["reads"])
         for r in _rows(binary_summary["distributions"])}
    )  # fmt: skip
    assert written == expected
    assert sum(written.values()) >= reads > 0  # a chunk per read here (leech's one-chunk reads)
    classes = _rows(binary_summary["classes"])
    assert [(r["label"], int(r["reads"])) for r in classes] == [(BINARY_SCORED, reads)]


def _figure_texts(monkeypatch) -> dict:
    """Every text drawn on each plot the report writes, by plot (it writes them to temporary
    names, in the order of PLOTS)."""
    drawn = {}
    write = summary._figure_out

    def capture(figure, path):
        texts = [figure._suptitle.get_text()] if figure._suptitle else []
        for axis in figure.axes:
            texts += [axis.get_title(), axis.get_xlabel(), axis.get_ylabel()]
            texts += [text.get_text() for text in axis.texts]
            texts += [text.get_text() for text in axis.get_yticklabels()] if axis.axison else []
            legend = axis.get_legend()
            texts += [text.get_text() for text in legend.get_texts()] if legend else []
            texts += ["<line>"] * (len(axis.lines) + len(axis.patches))
        drawn[PLOTS[len(drawn)]] = [text for text in texts if text]
        write(figure, path)

    monkeypatch.setattr(summary, "_figure_out", capture)
    return drawn


def test_the_report_plots_the_probabilities_with_the_models_class_names(
    binary_summary, tmp_path, monkeypatch
):
    drawn = _figure_texts(monkeypatch)
    outputs = {name: tmp_path / f"{name}.png" for name in PLOTS}
    asked = []
    trna_report(
        [binary_summary["classes"]], [binary_summary["distributions"]],
        [binary_summary["counts"]], tmp_path / "table.tsv", *outputs.values(),
        binary_classes=lambda: asked.append(1) or ("Gly", "Phe"),
    )  # fmt: skip
    for path in outputs.values():
        assert path.read_bytes()[:4] == b"\x89PNG", path
    assert asked == [1]
    confidence = " | ".join(drawn["confidence"])
    assert "Gly vs Phe" in confidence and "P(Phe)" in confidence, confidence
    # the share above 0.5 in the legend is the ML tags' own (ML = int(P * 255))
    levels = [
        (int(r["level"]), int(r["reads"]))
        for r in _rows(binary_summary["distributions"])
        if r["measure"] == "chunk_probability"
    ]
    above = sum(n for level, n in levels if level >= 128) / sum(n for _, n in levels)
    assert f"P(Phe) > 0.5: {above:.1%}" in confidence, confidence
    assert "<line>" in drawn["confidence"]
    # the reads it scored are not "called" among the records' fates
    assert "classified: scored (MP/ML), no call" in drawn["fates"], drawn["fates"]
    assert "classified: called" not in drawn["fates"]


def test_a_report_without_called_reads_says_so_instead_of_empty_axes(
    binary_summary, tmp_path, monkeypatch
):
    drawn = _figure_texts(monkeypatch)
    empty = tmp_path / "distributions.tsv"
    empty.write_text("sample\tmeasure\tlabel\tlevel\treads\n")
    outputs = {name: tmp_path / f"{name}.png" for name in PLOTS}
    trna_report(
        [binary_summary["classes"]], [empty], [binary_summary["counts"]],
        tmp_path / "table.tsv", *outputs.values(),
    )  # fmt: skip
    assert drawn["confidence"] == ["no called reads: no confidence or margin (ac/am tags) to plot"]


def test_the_command_names_the_classes_of_the_pair_it_was_run_as(binary_summary, tmp_path):
    """`kennel trna-report --bundle B --pair P`, as the workflow runs it for a leech model."""
    outputs = [f"--{name}={tmp_path / name}.png" for name in PLOTS]
    result = subprocess.run(
        [sys.executable, "-m", "kennel.cli", "trna-report",
         "--classes", str(binary_summary["classes"]),
         "--distributions", str(binary_summary["distributions"]),
         "--counts", str(binary_summary["counts"]), "--table", str(tmp_path / "table.tsv"),
         *outputs, "--bundle", str(PAIR_BUNDLE), "--pair", "Gly_Phe"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "confidence.png").stat().st_size > 10_000
    # the names it gives the plot: the pair's, in the order of P(second class) = ML
    assert _class_names(PAIR_BUNDLE, "Gly_Phe") == ("Gly", "Phe")
