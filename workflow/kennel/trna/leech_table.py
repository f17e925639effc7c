"""The table ``leech predict`` writes instead of a BAM (``-o calls.tsv[.gz]``, leech 0.16.0,
multiclass models only), row for row: a sample's rows are its classify jobs' per-shard tables
(:class:`~kennel.trna.leech_classify.LeechTaggingWriter` writes them for every multiclass leech
model), joined by :func:`merge_tables`.

One row per read that was scored, from its first chunk: ``read_name``, ``ref_name``, each class's
probability (``prob_<class>``), ``predicted_aa``, ``confidence`` and ``margin`` (6 decimals),
``predicted_cl`` where the model has a charging-level head, ``junction_indel``,
``junction_mapped`` (``True``/``False``), then one ``tag_<XX>`` column per copied tag (the value
as Python's ``str`` writes pysam's, empty where the record has none). The table applies one
option, as leech's does: with ``abstain_on_junction_indel``, ``predicted_aa`` is ``unc`` where
the junction is disrupted and the margin, in 0-255 units, is below ``min_margin``; the other
thresholds leave it alone.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pysam

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.progress import Progress
from kennel.trna.leech_tags import (
    BELOW_THRESHOLD,
    TagOptions,
    junction_disrupted,
    margin_of,
    to_uint8,
)

FIRST_COLUMN = "read_name"
PROGRESS_STEP = 65536
logger = logging.getLogger(__name__)


def table_columns(class_names: Sequence[str], charging: bool, copy_tags: Sequence[str]):
    """The header of leech's table for a model with these classes (and a charging head)."""
    return [
        FIRST_COLUMN,
        "ref_name",
        *(f"prob_{name}" for name in class_names),
        "predicted_aa",
        "confidence",
        "margin",
        *(["predicted_cl"] if charging else []),
        "junction_indel",
        "junction_mapped",
        *(f"tag_{tag}" for tag in copy_tags),
    ]


def table_row(
    record: pysam.AlignedSegment,
    call: str,
    probabilities: Sequence[float],
    *,
    charging: float | None,
    junction_indel: int | None,
    junction_mapped: bool,
    options: TagOptions,
    copy_tags: Sequence[str],
) -> list[str]:
    """One read's row; ``record`` as it came in (copied tags are the input's)."""
    margin = margin_of(probabilities)
    if (
        options.abstain_on_junction_indel
        and junction_disrupted(junction_indel, junction_mapped)
        and to_uint8(margin) < options.min_margin
    ):
        call = BELOW_THRESHOLD
    return [
        record.query_name,
        record.reference_name or "",
        *(f"{p:.6f}" for p in probabilities),
        call,
        f"{max(probabilities):.6f}",
        f"{margin:.6f}",
        *([] if charging is None else [f"{charging:.6f}"]),
        "" if junction_indel is None else str(int(junction_indel)),
        str(bool(junction_mapped)),
        *(str(record.get_tag(tag)) if record.has_tag(tag) else "" for tag in copy_tags),
    ]


def merge_tables(
    tables: Sequence[str | os.PathLike],
    merged_bam: str | os.PathLike,
    output: str | os.PathLike,
    bundle: str = "the bundle",
    threads: int = 1,
) -> int:
    """A sample's per-shard tables as one, gzipped when ``output`` ends in ``.gz``, its rows in
    the order of their records in the sample's merged BAM (leech writes them in its input BAM's
    order: the same for a coordinate-sorted BAM). Each shard's rows come in its records' order,
    so the rows waiting at the shards' heads are looked up by read name as the merged BAM is
    read: memory is one row per shard. Refused, in one line, where a shard's table is not
    leech's (a model other than multiclass), the shards' headers differ, a row has no record or
    a scored record no row. The rows written."""
    header = None
    handles = [open(table, newline="") for table in tables]  # noqa: SIM115 (closed below)
    try:
        for table, handle in zip(tables, handles, strict=True):
            first = handle.readline()
            if not first.startswith(FIRST_COLUMN + "\t"):
                # the workflow refuses the models leech writes no table for before they run
                raise KennelError(
                    f"{table}: not leech predict's table rows ({bundle} scored these reads "
                    "before kennel wrote them, or is not a multiclass model): rerun classify "
                    "(snakemake --forcerun classify)"
                )
            if header is not None and first != header:
                raise KennelError(
                    f"{table}: its columns differ from {tables[0]}'s (shards classified with "
                    "other settings?)"
                )
            header = first
        waiting: dict[str, tuple[int, str]] = {}

        def advance(index: int) -> None:
            line = handles[index].readline()
            if line:
                waiting[line.split("\t", 1)[0]] = (index, line)

        for index in range(len(handles)):
            advance(index)
        rows = 0
        gzipped = str(output).endswith(".gz")
        with (
            atomic_outputs(output) as (temporary,),
            _text_output(temporary, compress=gzipped) as out,
            pysam.AlignmentFile(str(merged_bam), check_sq=False, threads=threads) as bam,
        ):
            out.write(header)  # --tables takes one table at least
            progress = Progress(logger, "merged BAM records read")
            records = 0
            for record in bam.fetch(until_eof=True):
                records += 1
                if records % PROGRESS_STEP == 0:  # a clock read per record would cost more
                    progress.add(PROGRESS_STEP)
                if not record.has_tag("aa"):  # not scored: passed through, or a read's
                    continue  # secondary or supplementary record
                found = waiting.pop(record.query_name, None)
                if found is None:  # every scored read has its row: none is left out
                    raise KennelError(
                        f"{merged_bam}: read {record.query_name} was scored but no table holds "
                        "its row next (tables and BAM are not from the same run?)"
                    )
                out.write(found[1])
                rows += 1
                advance(found[0])
            progress.add(records % PROGRESS_STEP)
            progress.finish()
            if waiting:
                index, line = next(iter(waiting.values()))
                raise KennelError(
                    f"{tables[index]}: read {line.split(chr(9), 1)[0]} has no record in "
                    f"{merged_bam} (tables and BAM are not from the same run?)"
                )
        return rows
    finally:
        for handle in handles:
            handle.close()


@contextlib.contextmanager
def _text_output(path: Path, compress: bool):
    """A text file to write, gzipped without the temporary's name or the time in its header,
    so the same rows give the same bytes."""
    if not compress:
        with open(path, "w", newline="") as text:
            yield text
        return
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed,
        io.TextIOWrapper(packed, newline="") as text,
    ):
        yield text
