"""``kennel summarize`` and ``kennel trna-report``: what happened to every read, and the calls.

Per sample, from the merged BAM's tags and the shard/classify accounting: records by fate and
reason, class counts with mean charging, confidence and margin histograms. Across samples: one
table and three plots (class composition, confidence, charging per class) for
``snakemake --report``.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from kennel.io.atomic import atomic_outputs
from kennel.io.bam import PASSTHROUGH_REASONS, open_alignments
from kennel.trna.classify import decode_tags
from kennel.trna.shard import read_counts

HISTOGRAM_BINS = np.linspace(0.0, 1.0, 21)


def summarize_sample(
    sample: str,
    merged_bam: str | os.PathLike,
    shard_counts: str | os.PathLike,
    classify_stats: Sequence[str | os.PathLike],
    counts_out: str | os.PathLike,
    classes_out: str | os.PathLike,
    distributions_out: str | os.PathLike,
) -> dict:
    """Write the sample's three tables; returns the class counts."""
    rows = read_counts(shard_counts)
    fates = {r["name"]: int(r["records"]) for r in rows if r["kind"] == "fate"}
    total = next(int(r["records"]) for r in rows if r["kind"] == "total")
    skipped: Counter[str] = Counter()
    for path in classify_stats:
        with open(path) as handle:
            skipped.update(json.load(handle)["skipped"])

    labels: Counter[str] = Counter()
    charging: dict[str, list[float]] = defaultdict(list)
    confidence: dict[str, list[float]] = defaultdict(list)
    margin: dict[str, list[float]] = defaultdict(list)
    with open_alignments(merged_bam) as bam:
        for record in bam.fetch(until_eof=True):
            if not record.has_tag("aa"):
                continue
            tags = decode_tags(record)
            label = tags["label"]
            labels[label] += 1
            confidence[label].append(tags["confidence"])
            margin[label].append(tags["margin"])
            if tags["charging"] is not None:
                charging[label].append(tags["charging"])

    with atomic_outputs(counts_out, classes_out, distributions_out) as (counts, classes, dist):
        with open(counts, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["sample", "fate", "reason", "records"])
            writer.writerow([sample, "input", "all", total])
            for label, n in sorted(labels.items()):
                writer.writerow([sample, "classified", label, n])
            for reason, n in sorted(skipped.items()):
                writer.writerow([sample, "skipped", reason, n])
            for reason in PASSTHROUGH_REASONS:
                writer.writerow([sample, "passthrough", reason, fates.get(reason, 0)])
        with open(classes, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(
                ["sample", "label", "reads", "fraction", "mean_charging", "mean_confidence",
                 "mean_margin"]
            )  # fmt: skip
            n_called = sum(labels.values())
            for label, n in sorted(labels.items()):
                writer.writerow(
                    [
                        sample,
                        label,
                        n,
                        f"{n / n_called:.6f}",
                        f"{np.mean(charging[label]):.6f}" if charging[label] else "",
                        f"{np.mean(confidence[label]):.6f}",
                        f"{np.mean(margin[label]):.6f}",
                    ]
                )
        with open(dist, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["sample", "measure", "bin_start", "bin_end", "reads"])
            for measure, values in (("confidence", confidence), ("margin", margin)):
                pooled = [v for per_label in values.values() for v in per_label]
                counts_per_bin, _ = np.histogram(pooled, bins=HISTOGRAM_BINS)
                for start, end, n in zip(
                    HISTOGRAM_BINS[:-1], HISTOGRAM_BINS[1:], counts_per_bin, strict=True
                ):
                    writer.writerow([sample, measure, f"{start:.2f}", f"{end:.2f}", int(n)])
    return dict(labels)


def _read_tsv(paths: Sequence[str | os.PathLike]) -> list[dict[str, str]]:
    rows = []
    for path in paths:
        with open(path) as handle:
            rows.extend(csv.DictReader(handle, delimiter="\t"))
    return rows


def trna_report(
    classes_tables: Sequence[str | os.PathLike],
    distributions_tables: Sequence[str | os.PathLike],
    table_out: str | os.PathLike,
    composition_png: str | os.PathLike,
    confidence_png: str | os.PathLike,
    charging_png: str | os.PathLike,
) -> None:
    """The cross-sample table and the three report plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = _read_tsv(classes_tables)
    distributions = _read_tsv(distributions_tables)
    samples = sorted({row["sample"] for row in classes} | {r["sample"] for r in distributions})
    labels = sorted({row["label"] for row in classes})
    outputs = [table_out, composition_png, confidence_png, charging_png]
    with atomic_outputs(*outputs) as (table, composition, confidence, charging):
        with open(table, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["label", *samples])
            reads = {(row["sample"], row["label"]): row["reads"] for row in classes}
            for label in labels:
                writer.writerow([label, *(reads.get((s, label), "0") for s in samples)])

        fractions = {(row["sample"], row["label"]): float(row["fraction"]) for row in classes}
        figure, axis = plt.subplots(figsize=(1.5 + 1.2 * len(samples), 4))
        bottom = np.zeros(len(samples))
        for label in labels:
            heights = np.array([fractions.get((s, label), 0.0) for s in samples])
            axis.bar(samples, heights, bottom=bottom, label=label)
            bottom += heights
        axis.set_ylabel("fraction of classified reads")
        axis.set_title("Class composition per sample")
        axis.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize="small")
        figure.savefig(composition, format="png", bbox_inches="tight", dpi=120)
        plt.close(figure)

        figure, axis = plt.subplots(figsize=(6, 4))
        for sample in samples:
            bins = [
                r for r in distributions if r["sample"] == sample and r["measure"] == "confidence"
            ]
            starts = [float(r["bin_start"]) for r in bins]
            axis.step(starts, [int(r["reads"]) for r in bins], where="post", label=sample)
        axis.set_xlabel("confidence (top class probability)")
        axis.set_ylabel("reads")
        axis.set_title("Confidence")
        axis.legend(fontsize="small")
        figure.savefig(confidence, format="png", bbox_inches="tight", dpi=120)
        plt.close(figure)

        figure, axis = plt.subplots(figsize=(1.5 + 0.8 * len(labels), 4))
        width = 0.8 / max(len(samples), 1)
        for index, sample in enumerate(samples):
            means = [
                float(r["mean_charging"] or "nan")
                for label in labels
                for r in classes
                if r["sample"] == sample and r["label"] == label
            ]
            present = [label for label in labels if (sample, label) in fractions]
            positions = np.array([labels.index(label) for label in present]) + index * width
            axis.bar(positions, means, width=width, label=sample)
        axis.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels)
        axis.set_ylim(0, 1)
        axis.set_ylabel("mean charging level")
        axis.set_title("Charging per class")
        axis.legend(fontsize="small")
        figure.savefig(charging, format="png", bbox_inches="tight", dpi=120)
        plt.close(figure)
