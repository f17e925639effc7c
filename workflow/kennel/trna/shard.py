"""``kennel shard``: split a sample into shards balanced by signal, plus a passthrough BAM.

Each classifiable read (for kennel's bundles: primary, mapped forward, with a move table and a
signal; for a leech bundle: the records ``leech predict`` scores, see
:class:`~kennel.io.bam.RecordSelection`) goes to one shard; a shard is a POD5 holding
exactly its reads and a BAM holding exactly their records.
Every other record goes, unchanged, to the passthrough BAM so the merge can give back every
input record. The counts file accounts for each record by fate.
"""

from __future__ import annotations

import csv
import heapq
import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pysam

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.io.bam import (
    CLASSIFIABLE,
    CONTIG_NOT_IN_REFERENCE,
    LEECH_BINARY_PROBABILITIES,
    LEECH_BINARY_TAG,
    LEECH_TAGS,
    PREDICTION_TAGS,
    RecordSelection,
    open_alignments,
    reference_contig_names,
    sorted_records,
)
from kennel.io.pod5 import Pod5Set

logger = logging.getLogger(__name__)

# Lowercase tags are reserved for local use by the SAM spec; this one never leaves kennel.
ORDINAL_TAG = "ko"


@dataclass(frozen=True)
class ShardOutputs:
    pod5s: Sequence[Path]
    bams: Sequence[Path]
    passthrough: Path
    counts: Path

    def all_paths(self) -> list[Path]:
        """Every file written, indexes included, in a fixed order."""
        paths = [*self.pod5s]
        for bam in [*self.bams, self.passthrough]:
            paths += [bam, Path(f"{bam}.bai")]
        return [*paths, self.counts]


def balance(samples_by_read: dict[str, int], n_shards: int) -> list[list[str]]:
    """Largest-first greedy packing: each read to the shard with the fewest samples so far.

    Ties break on read id and shard number, so the assignment is deterministic.
    """
    heap = [(0, shard) for shard in range(n_shards)]
    shards: list[list[str]] = [[] for _ in range(n_shards)]
    for read_id, samples in sorted(samples_by_read.items(), key=lambda kv: (-kv[1], kv[0])):
        total, shard = heapq.heappop(heap)
        shards[shard].append(read_id)
        heapq.heappush(heap, (total + samples, shard))
    return shards


def shard_sample(
    bam_path: str | os.PathLike,
    pod5_paths: Sequence[str | os.PathLike],
    reference_path: str | os.PathLike,
    outputs: ShardOutputs,
    selection: RecordSelection | None = None,
) -> dict[str, int]:
    """Shard one sample; returns record counts by fate. Outputs appear together or not at all."""
    selection = replace(
        selection or RecordSelection(), reference_contigs=reference_contig_names(reference_path)
    )
    n_shards = len(outputs.pod5s)
    if n_shards < 1 or len(outputs.bams) != n_shards:
        raise KennelError("shard: need as many shard BAMs as shard POD5s, at least one")
    pod5 = Pod5Set(pod5_paths)

    # pass 1: the fate of every record, and each classifiable read's signal length
    fates: Counter[str] = Counter()
    classifiable: dict[str, None] = {}  # insertion-ordered set
    missing_contigs: Counter[str] = Counter()  # reads on contigs the reference lacks
    any_moves = False
    # read front to back: the input needs no index
    with open_alignments(bam_path, require_index=False) as bam:
        header = bam.header
        for record in sorted_records(bam, bam_path):
            fate = selection.fate(record, pod5.reads)
            any_moves |= record.has_tag("mv")
            fates[fate] += 1
            if fate == CLASSIFIABLE:
                if record.query_name in classifiable:
                    raise KennelError(
                        f"{bam_path}: read {record.query_name}: more than one primary record"
                    )
                classifiable[record.query_name] = None
            elif fate == CONTIG_NOT_IN_REFERENCE:
                missing_contigs[record.reference_name] += 1
    if not any_moves and sum(fates.values()) > 0:
        raise KennelError(
            f"{bam_path}: no record carries a move table (mv tag); "
            "basecall with dorado --emit-moves and keep tags when aligning (minimap2 -y)"
        )
    # reads missing from the POD5 are tested after their contig: they are on the reference
    on_reference = fates[CLASSIFIABLE] + fates["no_signal"]
    _check_missing_contigs(bam_path, reference_path, missing_contigs, on_reference)
    samples_by_read = pod5.sample_counts(list(classifiable))
    shards = balance(samples_by_read, n_shards)
    shard_of = {read_id: index for index, reads in enumerate(shards) for read_id in reads}

    # pass 2: copy records (coordinate order is kept, so shard BAMs stay sorted) and signals
    paths = outputs.all_paths()
    with atomic_outputs(*paths) as temporaries:
        temporary = dict(zip(paths, temporaries, strict=True))
        writers = [
            pysam.AlignmentFile(str(temporary[Path(p)]), "wb", header=header) for p in outputs.bams
        ]
        passthrough = pysam.AlignmentFile(str(temporary[outputs.passthrough]), "wb", header=header)
        try:
            with open_alignments(bam_path, require_index=False) as bam:
                for ordinal, record in enumerate(bam.fetch(until_eof=True)):
                    # the record's place in the input: the merge restores exactly this order
                    record.set_tag(ORDINAL_TAG, ordinal, "i")
                    for tag in (*PREDICTION_TAGS, *LEECH_TAGS):
                        record.set_tag(tag, None)
                    if record.has_tag(LEECH_BINARY_TAG):
                        record.set_tag(LEECH_BINARY_TAG, None)
                        record.set_tag(LEECH_BINARY_PROBABILITIES, None)
                    # the same test as pass 1, so a same-named passthrough record stays out
                    is_classified = selection.fate(record, pod5.reads) == CLASSIFIABLE
                    target = writers[shard_of[record.query_name]] if is_classified else passthrough
                    target.write(record)
        finally:
            for writer in [*writers, passthrough]:
                writer.close()
        for bam in [*outputs.bams, outputs.passthrough]:
            pysam.index(str(temporary[Path(bam)]), str(temporary[Path(f"{bam}.bai")]))
        # each shard's signals in BAM order, the order extraction asks for them: its reads of
        # the memory-mapped POD5 then run front to back instead of jumping across the file
        in_bam_order: list[list[str]] = [[] for _ in shards]
        for read_id in classifiable:
            in_bam_order[shard_of[read_id]].append(read_id)
        for pod5_path, reads in zip(outputs.pod5s, in_bam_order, strict=True):
            pod5.write_subset(temporary[Path(pod5_path)], reads)
        _write_counts(temporary[outputs.counts], fates, shards, samples_by_read, selection.reasons)
    return dict(fates)


def _check_missing_contigs(
    bam_path, reference_path, missing: Counter[str], on_reference: int
) -> None:
    """Reads on contigs the reference lacks pass through, counted (leech predict leaves them
    untagged); when no read's contig is there, the BAM was aligned to another reference."""
    if not missing:
        return
    first, count = missing.most_common(1)[0]
    if not on_reference:
        raise KennelError(
            f"{bam_path}: contig {first} is not in the reference {reference_path}, nor is any "
            f"other contig of its reads ({len(missing)} contig(s)); was the BAM aligned to "
            "another reference?"
        )
    logger.warning(
        "%s: %d read(s) on %d contig(s) not in the reference %s (most: %s, %d reads) pass "
        "through untagged as %s",
        bam_path,
        sum(missing.values()),
        len(missing),
        reference_path,
        first,
        count,
        CONTIG_NOT_IN_REFERENCE,
    )


def _write_counts(path, fates: Counter, shards, samples_by_read, reasons) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["kind", "name", "records", "signal_samples"])
        writer.writerow(["total", "input", sum(fates.values()), sum(samples_by_read.values())])
        for fate in (CLASSIFIABLE, *reasons):
            writer.writerow(["fate", fate, fates.get(fate, 0), ""])
        for index, reads in enumerate(shards):
            samples = sum(samples_by_read[r] for r in reads)
            writer.writerow(["shard", f"{index:03d}", len(reads), samples])


def read_counts(path: str | os.PathLike) -> list[dict[str, str]]:
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter="\t"))
