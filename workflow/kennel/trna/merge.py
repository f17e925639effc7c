"""``kennel merge-bam``: classified shards + passthrough → one indexed BAM per sample.

The shard step stamped every input record with its ordinal in the input BAM (tag ``ko``); the
merge is a k-way merge on that ordinal, so the output holds the input's records in the input's
order (coordinate-sorted, as the input was), whatever the shard count, with tags where they
were classified. Every ordinal must appear exactly once, and the counts from shard, extract and
classify must add up; anything else is a hard error and no output is left behind.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pysam

from kennel import __version__
from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.io.bam import open_alignments, with_program
from kennel.progress import Progress
from kennel.trna.shard import ORDINAL_TAG, read_counts

logger = logging.getLogger(__name__)


def _ordered(path: Path):
    with open_alignments(path) as bam:
        previous = -1
        for record in bam.fetch(until_eof=True):
            if not record.has_tag(ORDINAL_TAG):
                raise KennelError(f"{path}: record {record.query_name}: no {ORDINAL_TAG} tag")
            ordinal = record.get_tag(ORDINAL_TAG)
            if ordinal <= previous:
                raise KennelError(f"{path}: record {record.query_name}: ordinals out of order")
            previous = ordinal
            yield ordinal, record


def merge_sample(
    shard_bams: Sequence[str | os.PathLike],
    passthrough: str | os.PathLike,
    shard_counts: str | os.PathLike,
    classify_stats: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    threads: int = 1,
) -> dict[str, int]:
    """Merge and verify; returns the counts (input, merged, classified, skipped, passthrough)."""
    inputs = [Path(p) for p in [*shard_bams, passthrough]]
    rows = read_counts(shard_counts)
    expected_total = next(int(r["records"]) for r in rows if r["kind"] == "total")
    fates = {r["name"]: int(r["records"]) for r in rows if r["kind"] == "fate"}
    classified = skipped = 0
    markers: set[str] = set()  # the tag every classified record carries (aa, or a binary MP)
    for path in classify_stats:
        with open(path) as handle:
            stats = json.load(handle)
        classified += stats["reads_classified"]
        markers.add(stats.get("marker_tag", "aa"))
        skipped += sum(stats["skipped"].values())

    # the first classified shard's header: the input's, plus classify's @PG line
    with open_alignments(inputs[0]) as template:
        header_dict = with_program(
            template.header,
            {"ID": "kennel-merge", "PN": "kennel", "VN": __version__, "CL": "kennel merge-bam"},
        )
    header = pysam.AlignmentHeader.from_dict(header_dict)
    output = Path(output)
    merged = tagged = 0
    with atomic_outputs(output, Path(f"{output}.bai")) as (tmp_bam, tmp_bai):
        with pysam.AlignmentFile(str(tmp_bam), "wb", header=header, threads=threads) as out:
            streams = [_ordered(path) for path in inputs]
            progress = Progress(logger, "records merged", total=expected_total)
            for ordinal, record in heapq.merge(*streams, key=lambda pair: pair[0]):
                progress.add(1)
                if ordinal != merged:
                    raise KennelError(
                        f"{output}: record {record.query_name}: input record #{merged} is "
                        f"{'missing' if ordinal > merged else 'duplicated'} among the shards"
                    )
                record.set_tag(ORDINAL_TAG, None)
                tagged += any(record.has_tag(tag) for tag in markers)
                out.write(record)
                merged += 1
            progress.finish()
        accounting = {
            "input": expected_total,
            "merged": merged,
            "classified": classified,
            "skipped": skipped,
            "passthrough": expected_total - fates.get("classifiable", 0),
        }
        problems = []
        if merged != expected_total:
            problems.append(f"merged {merged} records but the input had {expected_total}")
        if tagged != classified:
            problems.append(f"{tagged} records carry tags but classify reported {classified}")
        if classified + skipped + accounting["passthrough"] != expected_total:
            problems.append(
                f"classified {classified} + skipped {skipped} + passthrough "
                f"{accounting['passthrough']} != input {expected_total}"
            )
        if problems:
            raise KennelError(f"{output}: accounting mismatch: {'; '.join(problems)}")
        pysam.index(str(tmp_bam), str(tmp_bai))
    return accounting
