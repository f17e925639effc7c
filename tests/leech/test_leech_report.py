"""A leech binary model's reads in the summary and the report: it calls nothing (per-chunk
``MP``/``ML`` tags, no ``aa``/``ac``/``am``), so the report plots the distribution of its
``ML`` probabilities where a caller's confidence and margin would be, with the model's two
class names, instead of empty axes. Read from `leech predict`'s own BAM of the Gly_Phe pair."""

from __future__ import annotations

import csv
import shutil
from collections import Counter

import numpy as np
import pysam
import pytest
from kennel import cli
from kennel.trna import report
from kennel.trna.report import trna_report
from kennel.trna.summary import BINARY_SCORED, summarize_sample
from leech_reference import PAIR_BUNDLE, PREDICTIONS, require_leech_shared
from matplotlib.patches import Rectangle

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


def _leechs_ml_levels() -> np.ndarray:
    """Every ML value in leech predict's BAM, one per scored chunk."""
    with pysam.AlignmentFile(str(LEECH_PAIR_BAM)) as bam:
        return np.array(
            [
                level
                for r in bam.fetch(until_eof=True)
                if r.has_tag("ML")
                for level in r.get_tag("ML")
            ]
        )


def _figure_texts(monkeypatch) -> dict:
    """Every text drawn on each plot the report writes, by plot (it writes them to temporary
    names, in the order of PLOTS), under "<steps>" the heights of the stairs drawn and under
    "<bars>" those of the last axes' bars."""
    drawn = {}
    write = report._figure_out

    def capture(figure, path):
        texts = [figure._suptitle.get_text()] if figure._suptitle else []
        steps = []
        for axis in figure.axes:
            texts += [axis.get_title(), axis.get_xlabel(), axis.get_ylabel()]
            texts += [text.get_text() for text in axis.texts]
            texts += [text.get_text() for text in axis.get_yticklabels()] if axis.axison else []
            legend = axis.get_legend()
            texts += [text.get_text() for text in legend.get_texts()] if legend else []
            steps += [
                patch.get_data().values for patch in axis.patches if hasattr(patch, "get_data")
            ]
            bars = [patch.get_height() for patch in axis.patches if isinstance(patch, Rectangle)]
        name = PLOTS[len([key for key in drawn if key in PLOTS])]
        drawn[name] = [text for text in texts if text]
        drawn[f"{name} <steps>"] = steps
        drawn[f"{name} <bars>"] = bars
        drawn[f"{name} <ticks>"] = [text.get_text() for text in figure.axes[-1].get_xticklabels()]
        write(figure, path)

    monkeypatch.setattr(report, "_figure_out", capture)
    return drawn


def _report(tables, directory, distributions=None, classes=None, **options) -> dict:
    outputs = {name: directory / f"{name}.png" for name in PLOTS}
    trna_report(
        [classes or tables["classes"]], [distributions or tables["distributions"]],
        [tables["counts"]], directory / "table.tsv", *outputs.values(), **options,
    )  # fmt: skip
    for path in outputs.values():
        assert path.read_bytes()[:4] == b"\x89PNG", path
    return outputs


def test_the_report_plots_leechs_probabilities_with_the_models_class_names(
    binary_summary, tmp_path, monkeypatch
):
    drawn = _figure_texts(monkeypatch)
    asked = []
    _report(binary_summary, tmp_path, binary_classes=lambda: asked.append(1) or ("Gly", "Phe"))
    assert asked == [1]
    confidence = " | ".join(drawn["confidence"])
    assert "Gly vs Phe" in confidence and "P(Phe)" in confidence, confidence
    # the plot against leech's own tags: the share of chunks per twentieth of P (ML / 255)
    # and, in the legend, the share leech wrote ML >= 128 for (P >= 128/255, as it truncates)
    levels = _leechs_ml_levels()
    # (edges on the ML scale, 255/20 = 12.75 apart: exact in binary, unlike k/20 * 255)
    expected, _ = np.histogram(levels, bins=np.arange(21) * 12.75)
    [steps] = drawn["confidence <steps>"]
    np.testing.assert_allclose(steps, expected / len(levels))
    assert f"P(Phe) ≥ 0.502: {np.mean(levels >= 128):.1%}" in confidence, confidence
    # the composition: the share of chunks leaning to each class, as leech's tags say
    composition = " | ".join(drawn["composition"])
    assert "Gly vs Phe" in composition and "no calls" in composition, composition
    leaning = np.mean(levels >= 128)
    np.testing.assert_allclose(drawn["composition <bars>"], [1 - leaning, leaning])
    assert f"{leaning:.1%}" in composition and f"{1 - leaning:.1%}" in composition
    # the reads it scored are not "called" among the records' fates
    assert "classified: scored (MP/ML), no call" in drawn["fates"], drawn["fates"]
    assert "classified: called" not in drawn["fates"]


def test_a_sample_with_no_scored_chunk_keeps_its_place_in_the_composition(
    binary_summary, tmp_path, monkeypatch
):
    drawn = _figure_texts(monkeypatch)
    rows = _rows(binary_summary["counts"])
    counts = tmp_path / "counts.tsv"
    with open(counts, "w") as handle:  # a second sample, every record passed through
        writer = csv.DictWriter(handle, rows[0].keys(), delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        writer.writerow({**rows[0], "sample": "other", "fate": "input", "reason": "all"})
    tables = {**binary_summary, "counts": counts}
    _report(tables, tmp_path, binary_classes=lambda: ("Gly", "Phe"))
    leaning = np.mean(_leechs_ml_levels() >= 128)
    np.testing.assert_allclose(drawn["composition <bars>"], [1 - leaning, 0, leaning, 0])
    assert "other\n(no scored chunks)" in drawn["composition <ticks>"]


def test_a_summary_from_before_the_ml_distributions_asks_for_a_rerun(
    binary_summary, tmp_path, monkeypatch
):
    """Summaries written before they kept a binary model's ML (Snakemake does not rerun a job
    for a change of kennel's code): the plot says how to get it."""
    drawn = _figure_texts(monkeypatch)
    empty = tmp_path / "distributions.tsv"
    empty.write_text("sample\tmeasure\tlabel\tlevel\treads\n")
    _report(binary_summary, tmp_path, distributions=empty)
    for plot in ("confidence", "composition"):  # not one bar of every read as "MP/ML"
        [note] = drawn[plot]
        assert "rerun with --forcerun summarize" in note


def test_a_report_without_called_reads_says_so_instead_of_empty_axes(
    binary_summary, tmp_path, monkeypatch
):
    drawn = _figure_texts(monkeypatch)
    empty = tmp_path / "distributions.tsv"
    empty.write_text("sample\tmeasure\tlabel\tlevel\treads\n")
    classes = tmp_path / "classes.tsv"
    classes.write_text(
        "sample\tlabel\treads\tfraction\tmean_charging\tmean_confidence\tmean_margin\n"
    )
    _report(binary_summary, tmp_path, distributions=empty, classes=classes)
    assert drawn["confidence"] == ["no called reads: no confidence or margin (ac/am tags) to plot"]
    assert drawn["composition"] == [
        "no classified reads in any sample: no class composition to plot"
    ]


def _command(tables, directory, *model: str) -> int:
    """`kennel trna-report` as the workflow runs it for a leech model."""
    return cli.main(
        ["trna-report", "--classes", str(tables["classes"]),
         "--distributions", str(tables["distributions"]), "--counts", str(tables["counts"]),
         "--table", str(directory / "table.tsv"),
         *(f"--{name}={directory / name}.png" for name in PLOTS), *model]
    )  # fmt: skip


def test_the_command_names_the_classes_of_the_pair_it_was_run_as(
    binary_summary, tmp_path, monkeypatch
):
    drawn = _figure_texts(monkeypatch)
    assert (
        _command(binary_summary, tmp_path, "--bundle", str(PAIR_BUNDLE), "--pair", "Gly_Phe") == 0
    )
    assert any("Binary model Gly vs Phe" in text for text in drawn["confidence"]), drawn
    # a bundle moved since the run only loses the names: the report is still written
    drawn.clear()
    missing = tmp_path / "moved.pt"
    assert _command(binary_summary, tmp_path, "--bundle", str(missing), "--pair", "Gly_Phe") == 0
    assert any("Binary model label 0 vs label 1" in text for text in drawn["confidence"]), drawn
