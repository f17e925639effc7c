"""What a classify job is made of, whatever its bundle: settings, the job, the tagging writer.

:mod:`kennel.trna.classify` runs the job; a bundle kind builds it
(:func:`kennel.trna.kennel_classify.kennel_job` for kennel's own,
:func:`kennel.trna.leech_classify.leech_job` for leech's): a :class:`ModelJob` says what rows
feed the device and how, and its :class:`TaggingWriter` turns the probabilities into BAM tags
(:func:`call_classes`, :func:`encode_tags`) on the shard's records, in BAM order.

Tags, as leech writes them: ``aa`` class label (``unc`` below ``min_confidence``/``min_margin``),
``ac`` top probability, ``am`` margin top1 − top2, ``pn`` class names, ``pp`` all
probabilities, ``pc`` charging level — uint8 (round(x·255), clamped) unless ``raw_tags``.
"""

from __future__ import annotations

import array
import contextlib
import csv
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pysam
import torch

from kennel.errors import KennelError
from kennel.io.bam import open_alignments, with_program, write_intermediate_bam
from kennel.models.leech_defaults import AGGREGATIONS
from kennel.pipeline import FixedBatch
from kennel.trna.features import FeatureSpec
from kennel.trna.leech_config import LeechPredictOptions
from kennel.trna.threads import ThreadPlan, plan_threads

UNCLASSIFIED = "unc"


@dataclass(frozen=True)
class ClassifySettings:
    batch_size: int = 1024
    device: str = "auto"
    compile: str = "auto"  # auto | on | off
    compile_threshold: int = 2_000_000  # reads; below it "auto" stays eager
    inductor_cache: str | None = None
    in_flight: int = 3  # batches queued on the device stage
    writer_queue: int = 8  # finished batches waiting for the writer
    writer_timeout: float = 120.0
    min_confidence: int = 0  # 0–255, on the uint8 scale of ``ac``
    min_margin: int = 0  # 0–255, on the uint8 scale of ``am``
    raw_tags: bool = False
    bam_threads: int = 1  # htslib BGZF compression threads
    # leech bundles only (leech predict's --abstain-on-junction-indel, --pair, --aggregation,
    # and the input options an older config may not record)
    abstain_on_junction_indel: bool = False
    pair: str | None = None
    aggregation: str = "naive"
    leech_predict: LeechPredictOptions = field(default_factory=LeechPredictOptions)
    # a multiclass model's per-read table (leech predict's TSV): these input tags as columns
    copy_tags: tuple[str, ...] = ()

    def check(self) -> None:
        if self.batch_size < 1:
            raise KennelError(f"classify: batch size must be positive, got {self.batch_size}")
        for name in ("min_confidence", "min_margin"):
            if not 0 <= getattr(self, name) <= 255:
                raise KennelError(f"classify: {name} must be within 0-255")
        for tag in self.copy_tags:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]", tag):  # the SAM spec's, and the schema's
                raise KennelError(f"classify: copy tag {tag!r} is not a SAM tag name")
        if self.aggregation not in AGGREGATIONS:
            raise KennelError(
                f"classify: aggregation must be one of {', '.join(AGGREGATIONS)}, "
                f"got {self.aggregation!r}"
            )


@dataclass(frozen=True)
class FusedExtraction:
    """Fused mode: extract in this job instead of reading a features file."""

    pod5s: Sequence[Path]
    reference: Path
    kmer_table: Path
    threads: int
    spec: FeatureSpec  # what extraction produces; the bundle must have been trained on it

    def plan(self) -> ThreadPlan:
        """The job's CPUs for extraction in the job, after the feed's reservation (logged)."""
        plan = plan_threads(self.threads, fused=True)
        logging.getLogger("kennel.classify").info(
            "fused extraction: %d workers, %d rayon threads, %d CPUs kept for the feed",
            plan.extraction_workers, plan.rayon_threads, plan.feed_reserve,
        )  # fmt: skip
        return plan


def to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.round(np.asarray(values, np.float64) * 255.0), 0, 255).astype(np.uint8)


def call_classes(
    probabilities: np.ndarray, class_names: Sequence[str], settings: ClassifySettings
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Labels (``unc`` below the thresholds), top probability and margin top1 − top2."""
    order = np.argsort(-probabilities, axis=1, kind="stable")
    rows = np.arange(len(probabilities))
    top = probabilities[rows, order[:, 0]]
    second = probabilities[rows, order[:, 1]]  # bundles have at least two classes
    margin = top - second
    confident = (to_uint8(top) >= settings.min_confidence) & (
        to_uint8(margin) >= settings.min_margin
    )
    labels = [
        class_names[i] if ok else UNCLASSIFIED for i, ok in zip(order[:, 0], confident, strict=True)
    ]
    return labels, top, margin


def encode_tags(
    labels: Sequence[str],
    confidence: np.ndarray,
    margin: np.ndarray,
    probabilities: np.ndarray,
    charging: np.ndarray | None,
    class_names: Sequence[str],
    raw: bool,
) -> list[list[tuple]]:
    """Each read's BAM tags as ``(tag, value, type)`` for ``set_tag`` (uint8-scaled unless
    ``raw``); scaled once per batch. ``pc`` is None without a charging head, which removes a
    stale ``pc`` from an input record."""
    if raw:
        scalar, array_code = "f", "f"
        scale = lambda values: np.asarray(values, np.float64)  # noqa: E731
        probabilities = np.asarray(probabilities, np.float32)
    else:
        scalar, array_code = "C", "B"
        scale = to_uint8
        probabilities = to_uint8(probabilities)
    confidence, margin = scale(confidence).tolist(), scale(margin).tolist()
    levels = [None] * len(labels) if charging is None else scale(charging).tolist()
    names = ",".join(class_names)
    return [
        [
            ("aa", labels[i], "Z"),
            ("ac", confidence[i], scalar),
            ("am", margin[i], scalar),
            ("pn", names, "Z"),
            ("pp", array.array(array_code, probabilities[i].tobytes()), None),
            ("pc", levels[i], None if levels[i] is None else scalar),
        ]
        for i in range(len(labels))
    ]


def decode_tags(record: pysam.AlignedSegment) -> dict:
    """Read back what :func:`encode_tags` wrote, as floats in [0, 1]."""

    def scaled(value):
        return value / 255.0 if isinstance(value, int) else float(value)

    probabilities = np.asarray(record.get_tag("pp"), dtype=np.float64)
    if np.issubdtype(np.asarray(record.get_tag("pp")).dtype, np.integer):
        probabilities = probabilities / 255.0
    return {
        "label": record.get_tag("aa"),
        "confidence": scaled(record.get_tag("ac")),
        "margin": scaled(record.get_tag("am")),
        "class_names": record.get_tag("pn").split(","),
        "probabilities": probabilities,
        "charging": scaled(record.get_tag("pc")) if record.has_tag("pc") else None,
    }


class TaggingWriter:
    """Owned by the writer thread: tags the shard BAM's records in order as predictions arrive."""

    def __init__(
        self, source_bam, output_bam, predictions_tsv, class_names, settings, progress,
        program: dict[str, str] | None = None, columns: Sequence[str] | None = None,
    ):  # fmt: skip
        self._source = open_alignments(source_bam)
        self._records = self._source.fetch(until_eof=True)
        self._source_path = source_bam
        header = self._source.header
        if program is not None:
            header = pysam.AlignmentHeader.from_dict(with_program(header, program))
        self._out = write_intermediate_bam(output_bam, header, settings.bam_threads)
        self._table = open(predictions_tsv, "w", newline="")  # noqa: SIM115 (closed in close())
        self._tsv = csv.writer(self._table, delimiter="\t", lineterminator="\n")
        self._tsv.writerow(
            columns
            or ["read_id", "label", "confidence", "margin", "charging"]
            + [f"p_{name}" for name in class_names]
        )
        self._class_names = list(class_names)
        self._settings = settings
        self._progress = progress
        self.records_written = 0
        self.labels: dict[str, int] = {}

    def write(self, item: tuple[FixedBatch, tuple[np.ndarray, np.ndarray | None]]) -> None:
        batch, (probabilities, charging) = item
        read_ids = batch.arrays["read_id"][: batch.n_real]
        labels, top, margin = call_classes(probabilities, self._class_names, self._settings)
        tags = encode_tags(labels, top, margin, probabilities, charging, self._class_names,
                           self._settings.raw_tags)  # fmt: skip
        for i, read_id in enumerate(read_ids):
            read_id = read_id.decode()
            record = self._advance_to(read_id)
            level = None if charging is None else float(charging[i])
            for name, value, kind in tags[i]:  # replaces a tag the input already carries
                record.set_tag(name, value, kind)
            self._out.write(record)
            self.records_written += 1
            self.labels[labels[i]] = self.labels.get(labels[i], 0) + 1
            self._tsv.writerow(
                [read_id, labels[i], f"{top[i]:.6f}", f"{margin[i]:.6f}",
                 "" if level is None else f"{level:.6f}"]
                + [f"{p:.6f}" for p in probabilities[i]]
            )  # fmt: skip
        self._progress.add(len(read_ids))

    def _advance_to(self, read_id: str) -> pysam.AlignedSegment:
        """Write untagged records until ``read_id``'s; predictions arrive in BAM order."""
        for record in self._records:
            if record.query_name == read_id:
                return record
            self._out.write(record)
            self.records_written += 1
        raise KennelError(
            f"{self._source_path}: read {read_id}: prediction has no record at or after the "
            "current position (features and BAM are not from the same shard?)"
        )

    def close(self) -> None:
        for record in self._records:
            self._out.write(record)
            self.records_written += 1
        self._progress.finish()
        self._out.close()
        self._source.close()
        self._table.close()

    def abandon(self) -> None:
        for handle in (self._out, self._source, self._table):
            # already failing; the outputs are temporaries about to be removed
            with contextlib.suppress(Exception):
                handle.close()


@dataclass
class ModelJob:
    """What differs between kennel's bundles and leech's in a classify job; the feed does not.

    ``source`` yields dicts of row arrays (model inputs and what the writer needs), ``padded``
    names the model inputs and ``module`` maps them (in that order, as tensors on the device)
    to the model's outputs; the other arrays go to the outputs file for the tag job
    (:mod:`kennel.trna.tag`).
    """

    module: torch.nn.Module
    source: Iterator[dict[str, np.ndarray]]
    padded: tuple[str, ...]
    input_dtypes: dict[str, np.dtype]
    input_shapes: dict[str, tuple[int, ...]]
    n_rows: int
    skipped: dict[str, int]
    tallies: dict[str, int]


def count_reasons(counter: dict[str, int], reasons) -> None:
    for reason in reasons:
        reason = reason.decode() if isinstance(reason, bytes) else str(reason)
        counter[reason] = counter.get(reason, 0) + 1


def count_records(bam) -> int:
    with open_alignments(bam) as handle:
        return handle.mapped + handle.unmapped  # from the index: no pass over the records
