"""``kennel summarize``: what happened to every read of a sample, and the calls.

From the merged BAM's tags and the shard/classify accounting: records by fate and reason, class
counts with mean charging, and the exact distributions of confidence, margin and charging per
called class (for a leech binary model, which calls nothing, of its per-chunk ``ML``
probabilities instead). ``kennel trna-report`` (:mod:`kennel.trna.report`) draws them.
"""

from __future__ import annotations

import array
import csv
import json
import os
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from kennel.io.atomic import atomic_outputs
from kennel.io.bam import (
    CLASSIFIABLE,
    LEECH_BINARY_PROBABILITIES,
    LEECH_BINARY_TAG,
    open_alignments,
)
from kennel.trna.model_job import decode_tags, to_uint8
from kennel.trna.shard import read_counts

# chunk_probability: a leech binary model's ML tag, P(second class), one value per scored chunk
# (its rows in the distributions table count chunks, not reads)
MEASURES = ("confidence", "margin", "charging", "chunk_probability")
LEVELS = 256  # the tags' uint8 scale: a histogram on it is exact for uint8 tags
BINARY_SCORED = "MP/ML"  # the "class" of reads a leech binary model scored
BINARY_CATEGORY = "classified: scored (MP/ML), no call"  # their fate: a binary model calls none


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
    # a binary model's ML, one byte per chunk as the tag holds it (a sample may have millions)
    ml_levels = array.array("B")
    with open_alignments(merged_bam) as bam:
        for record in bam.fetch(until_eof=True):
            if not record.has_tag("aa"):
                # a leech binary model's reads carry per-chunk MP/ML, no call
                if record.has_tag(LEECH_BINARY_TAG) and record.has_tag(LEECH_BINARY_PROBABILITIES):
                    labels[BINARY_SCORED] += 1
                    ml_levels.extend(record.get_tag(LEECH_BINARY_PROBABILITIES))
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
            # the shard step's reasons, in its order (they depend on the bundle's kind)
            for reason, n in fates.items():
                if reason != CLASSIFIABLE:
                    writer.writerow([sample, "passthrough", reason, n])
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
                        f"{np.mean(confidence[label]):.6f}" if confidence[label] else "",
                        f"{np.mean(margin[label]):.6f}" if margin[label] else "",
                    ]
                )
        with open(dist, "w", newline="") as handle:
            # one row per (measure, class, uint8 level) that occurs: the whole distribution,
            # so the report can draw any tail without re-reading the BAM
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["sample", "measure", "label", "level", "reads"])
            per_read = {"confidence": confidence, "margin": margin, "charging": charging}
            levels_of = {m: {label: to_uint8(v) for label, v in values.items()}
                         for m, values in per_read.items()}  # fmt: skip
            if ml_levels:  # uint8 levels already
                levels_of["chunk_probability"] = {BINARY_SCORED: np.frombuffer(ml_levels, np.uint8)}
            for measure in MEASURES:
                for label, levels in sorted(levels_of.get(measure, {}).items()):
                    histogram = np.bincount(levels, minlength=LEVELS)
                    for level in np.flatnonzero(histogram):
                        writer.writerow([sample, measure, label, level, int(histogram[level])])
    return dict(labels)
