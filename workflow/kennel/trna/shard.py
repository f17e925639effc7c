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

import numpy as np
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
    write_intermediate_bam,
)
from kennel.io.pod5 import Pod5Set, first_repeat, id_array
from kennel.progress import Progress

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


def balance(samples: np.ndarray, read_ids: np.ndarray, n_shards: int) -> np.ndarray:
    """Largest-first greedy packing: each read to the shard with the fewest samples so far.
    ``samples`` and ``read_ids`` (a bytes array) are aligned; returns each read's shard.

    Ties break on read id and shard number, so the assignment is deterministic.
    """
    heap = [(0, shard) for shard in range(n_shards)]
    shard_of = np.empty(len(samples), dtype=np.int32)
    order = np.lexsort((read_ids, -samples.astype(np.int64)))  # the last key sorts first
    # a million at a time: Python ints for the heap, without a list of all of them at once
    for start in range(0, len(order), 1 << 20):
        chosen = order[start : start + (1 << 20)]
        for index, size in zip(chosen.tolist(), samples[chosen].tolist(), strict=True):
            total, shard = heapq.heappop(heap)
            shard_of[index] = shard
            heapq.heappush(heap, (total + size, shard))
    return shard_of


def shard_sample(
    bam_path: str | os.PathLike,
    pod5_paths: Sequence[str | os.PathLike],
    reference_path: str | os.PathLike,
    outputs: ShardOutputs,
    selection: RecordSelection | None = None,
    threads: int = 1,
    planned_pod5_files: int | None = None,
) -> dict[str, int]:
    """Shard one sample; returns record counts by fate. Outputs appear together or not at all.
    ``threads``: BGZF compression threads of each BAM written (the bytes do not change).
    ``planned_pod5_files``: how many files ``pod5_paths`` held when the workflow planned the
    job (it is handed directories, whose files are its inputs): another count is refused."""
    selection = replace(
        selection or RecordSelection(), reference_contigs=reference_contig_names(reference_path)
    )
    n_shards = len(outputs.pod5s)
    if n_shards < 1 or len(outputs.bams) != n_shards:
        raise KennelError("shard: need as many shard BAMs as shard POD5s, at least one")
    pod5 = Pod5Set(pod5_paths)
    if planned_pod5_files is not None and len(pod5.paths) != planned_pod5_files:
        raise KennelError(
            f"{', '.join(map(str, pod5_paths))}: {len(pod5.paths)} POD5 files now, "
            f"{planned_pod5_files} when the workflow was planned (files added or removed since: "
            "a run still being written?); rerun snakemake once the run is complete"
        )

    # pass 1: the fate of every record, and each classifiable read's signal length; a whole
    # sample's reads are held as arrays, not dicts of str (bench_shard: 296-318 bytes a read in
    # all against 815)
    fates: Counter[str] = Counter()
    # classifiable reads in BAM order; they have a signal, so their names are POD5 ids (ASCII
    # UUIDs), kept as bytes once this pass ends (the job's peak comes later, writing the POD5s)
    names: list[str] = []
    missing_contigs: Counter[str] = Counter()  # reads on contigs the reference lacks
    any_moves = False
    # read front to back: the input needs no index
    progress = Progress(logger, "records read")
    with open_alignments(bam_path, require_index=False) as bam:
        header = bam.header
        for record in sorted_records(bam, bam_path):
            progress.add(1)
            fate = selection.fate(record, pod5.reads)
            any_moves |= record.has_tag("mv")
            fates[fate] += 1
            if fate == CLASSIFIABLE:
                names.append(record.query_name)
            elif fate == CONTIG_NOT_IN_REFERENCE:
                missing_contigs[record.reference_name] += 1
    progress.finish()
    if not any_moves and sum(fates.values()) > 0:
        raise KennelError(
            f"{bam_path}: no record carries a move table (mv tag); "
            "basecall with dorado --emit-moves and keep tags when aligning (minimap2 -y)"
        )
    # reads missing from the POD5 are tested after their contig: they are on the reference
    on_reference = fates[CLASSIFIABLE] + fates["no_signal"]
    _check_missing_contigs(bam_path, reference_path, missing_contigs, on_reference)
    classifiable = id_array(names)
    del names
    _check_one_primary(bam_path, classifiable)
    samples = pod5.sample_counts(classifiable)
    shard_of = balance(samples, classifiable, n_shards)

    # pass 2: copy records (coordinate order is kept, so shard BAMs stay sorted) and signals
    paths = outputs.all_paths()
    with atomic_outputs(*paths) as temporaries:
        temporary = dict(zip(paths, temporaries, strict=True))
        # compressing was most of this pass at the default level (4.8 of 10 s for 100k reads)
        writers = [
            write_intermediate_bam(temporary[Path(p)], header, threads) for p in outputs.bams
        ]
        passthrough = write_intermediate_bam(temporary[outputs.passthrough], header, threads)
        progress = Progress(logger, "records written", total=sum(fates.values()))
        try:
            # pass 1's classifiable records come again in the same order, so the next one's name
            # decides, with no search of the POD5 index: a record with a signal is that read
            # (one primary record each), any other record passes through
            next_classifiable = 0
            with open_alignments(bam_path, require_index=False) as bam:
                for ordinal, record in enumerate(bam.fetch(until_eof=True)):
                    progress.add(1)
                    # the record's place in the input: the merge restores exactly this order
                    record.set_tag(ORDINAL_TAG, ordinal, "i")
                    for tag in (*PREDICTION_TAGS, *LEECH_TAGS):
                        record.set_tag(tag, None)
                    if record.has_tag(LEECH_BINARY_TAG):
                        record.set_tag(LEECH_BINARY_TAG, None)
                        record.set_tag(LEECH_BINARY_PROBABILITIES, None)
                    # pass 1's test but the signal's, so a same-named secondary stays out
                    if (
                        next_classifiable < len(classifiable)
                        and selection.fate(record, None) == CLASSIFIABLE
                        and record.query_name.encode() == classifiable[next_classifiable]
                    ):
                        writers[shard_of[next_classifiable]].write(record)
                        next_classifiable += 1
                    else:
                        passthrough.write(record)
        finally:
            for writer in [*writers, passthrough]:
                writer.close()
        if next_classifiable != len(classifiable):
            raise KennelError(f"{bam_path}: changed while being sharded")
        progress.finish()
        for bam in [*outputs.bams, outputs.passthrough]:
            pysam.index(str(temporary[Path(bam)]), str(temporary[Path(f"{bam}.bai")]))
        # each shard's signals in BAM order, the order extraction asks for them: its reads of
        # the memory-mapped POD5 then run front to back instead of jumping across the file
        progress = Progress(logger, "signals copied", total=len(classifiable))
        for index, pod5_path in enumerate(outputs.pod5s):
            pod5.write_subset(
                temporary[Path(pod5_path)], classifiable[shard_of == index], progress.add
            )
        progress.finish()
        _write_counts(
            temporary[outputs.counts], fates, n_shards, shard_of, samples, selection.reasons
        )
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


def _check_one_primary(bam_path, classifiable: np.ndarray) -> None:
    """Each classifiable read once: a read with two primary records would be classified twice."""
    ordered = np.sort(classifiable)
    repeat = first_repeat(ordered)
    if repeat is not None:
        read_id = ordered[repeat].decode()
        raise KennelError(f"{bam_path}: read {read_id}: more than one primary record")


def _write_counts(path, fates: Counter, n_shards, shard_of: np.ndarray, samples, reasons):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["kind", "name", "records", "signal_samples"])
        writer.writerow(["total", "input", sum(fates.values()), int(samples.sum())])
        for fate in (CLASSIFIABLE, *reasons):
            writer.writerow(["fate", fate, fates.get(fate, 0), ""])
        for index in range(n_shards):
            mine = shard_of == index
            writer.writerow(["shard", f"{index:03d}", int(mine.sum()), int(samples[mine].sum())])


def read_counts(path: str | os.PathLike) -> list[dict[str, str]]:
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter="\t"))
