"""Aligned BAMs with dorado move tables: checked opening and the fate of each record."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pysam

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs

CLASSIFIABLE = "classifiable"
# What classify writes; sharding drops these from input records so that predictions from an
# earlier run never pass for this run's
PREDICTION_TAGS = ("aa", "ac", "am", "pn", "pp", "pc")
# leech's own tags beyond those (junction calls; a binary model's MP with its ML), dropped too: an
# old MP on a passed-through record would count as one of this run's calls at the merge
LEECH_TAGS = ("ji", "jm")
LEECH_BINARY_TAG = "MP"
# ML is also SAM's modified-base tag (dorado's MM/ML): dropped only where leech's MP sits beside it
LEECH_BINARY_PROBABILITIES = "ML"
# Why a record is passed through untouched rather than classified, in the order they are tested.
# A read aligned to a contig the reference FASTA lacks (a spike-in, a mitochondrial tRNA the
# FASTA leaves out) has no tRNA to place: leech predict leaves it untagged, with a warning.
CONTIG_NOT_IN_REFERENCE = "contig_not_in_reference"
PASSTHROUGH_REASONS = (
    "secondary",
    "supplementary",
    "unmapped",
    "reverse_strand",
    "no_moves",
    CONTIG_NOT_IN_REFERENCE,
    "no_signal",
)


# Why a record is not one of leech predict's reads, in the order leech tests them; leech writes
# only its reads (tagged where it scored them), kennel passes the rest through.
LEECH_RECORD_REASONS = (
    "unmapped",
    "secondary",
    "supplementary",
    "low_mapq",
    "no_moves",
    "no_sample_count",
    "no_seq",
)
LEECH_PASSTHROUGH_REASONS = (*LEECH_RECORD_REASONS, CONTIG_NOT_IN_REFERENCE, "no_signal")


@dataclass(frozen=True)
class RecordSelection:
    """Which records are the model's reads; every other record passes through, by reason.

    ``kennel``: primary, mapped forward, with a move table (kennel's own bundles). ``leech``:
    exactly the records ``leech predict`` scores (primary, mapped on either strand, ``mv`` and
    ``ns``, a SEQ, MAPQ >= ``min_mapq``), so a leech bundle sees the reads leech would give it.
    Both also need the read's signal in the POD5 and, when ``reference_contigs`` is given, its
    contig in the reference. The kind comes from the bundle, never from configuration.
    """

    kind: str = "kennel"
    min_mapq: int = 0
    reference_contigs: frozenset[str] | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.kind not in ("kennel", "leech"):
            raise KennelError(f"record selection: {self.kind!r} is not one of kennel, leech")

    @property
    def reasons(self) -> tuple[str, ...]:
        return PASSTHROUGH_REASONS if self.kind == "kennel" else LEECH_PASSTHROUGH_REASONS

    def fate(self, record: pysam.AlignedSegment, reads_with_signal) -> str:
        """``classifiable`` or the reason the record passes through (``reads_with_signal``
        None leaves the signal check to the caller)."""
        if self.kind == "kennel":
            reason = record_fate(record)
            if reason != CLASSIFIABLE:
                return reason
        else:
            reason = select_record(record, self.min_mapq)
            if reason is not None:
                return reason
        if (
            self.reference_contigs is not None
            and record.reference_name not in self.reference_contigs
        ):
            return CONTIG_NOT_IN_REFERENCE
        if reads_with_signal is not None and record.query_name not in reads_with_signal:
            return "no_signal"
        return CLASSIFIABLE


def with_program(header: pysam.AlignmentHeader | dict, program: dict[str, str]) -> dict:
    """The header as a dict with one more ``@PG`` line, chained as samtools chains its own.

    ``program`` gives ``ID``, ``PN``, ``VN``, ``CL`` and optionally ``DS``; the ID gets a
    ``.1``, ``.2``, ... suffix when the file already has one (a BAM classified twice keeps both
    lines), and ``PP`` names the last program before it.
    """
    header_dict = header.to_dict() if isinstance(header, pysam.AlignmentHeader) else dict(header)
    programs = list(header_dict.get("PG", []))
    taken = {line.get("ID") for line in programs}
    base, identifier, suffix = program["ID"], program["ID"], 0
    while identifier in taken:
        suffix += 1
        identifier = f"{base}.{suffix}"
    line = {**program, "ID": identifier}
    if programs:
        line["PP"] = programs[-1]["ID"]
    header_dict["PG"] = [*programs, line]
    return header_dict


def write_intermediate_bam(path, header, threads: int) -> pysam.AlignmentFile:
    """A BAM the workflow reads again and rewrites (shards, passthrough, tagged shards) at
    deflate level 1: dorado's records carry ~1 kB each (the move table), and at htslib's
    default level compressing them was most of a tag job (50 of 60 µs a record here, one BGZF
    thread) and half of the shard step; level 1 takes 12 µs for files 26% larger. The merged
    BAM, the one users keep, is written at the default level."""
    return pysam.AlignmentFile(
        str(path), "wb", header=header, threads=threads, format_options=[b"level=1"]
    )


def open_alignments(path: str | os.PathLike, require_index: bool = True) -> pysam.AlignmentFile:
    """Open a coordinate-sorted (and, by default, indexed) BAM, or fail with one clear line."""
    bam = _open_bam(path)
    sort_order = _sort_order(bam)
    if sort_order != "coordinate":
        bam.close()
        # the workflow sorts a sample's BAM first when its header, read as the workflow
        # starts, says so; a BAM another rule writes later has to come sorted
        raise KennelError(
            f"{path}: BAM is not coordinate-sorted (header SO:{sort_order}); run samtools sort "
            "or kennel sort-bam"
        )
    if require_index and not bam.has_index():
        bam.close()
        raise KennelError(f"{path}: BAM index (.bai/.csi) not found; run samtools index")
    return bam


def _open_bam(path: str | os.PathLike) -> pysam.AlignmentFile:
    """Open a BAM in any order, or fail with one line: missing, or not a BAM."""
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: BAM file not found")
    try:
        return pysam.AlignmentFile(str(path), "rb", check_sq=False)
    except (OSError, ValueError) as error:
        raise KennelError(f"{path}: unreadable BAM ({error})") from None


def _sort_order(bam: pysam.AlignmentFile) -> str | None:
    return bam.header.to_dict().get("HD", {}).get("SO")


def is_coordinate_sorted(path: str | os.PathLike) -> bool:
    """Whether a BAM's header says it is coordinate-sorted (``SO:coordinate``; a header
    without ``@HD`` does not). A file that cannot be read answers True: the step that reads it
    says why, in one line."""
    try:
        with pysam.AlignmentFile(str(path), "rb", check_sq=False) as bam:
            return _sort_order(bam) == "coordinate"
    except (OSError, ValueError):
        return True


def sort_alignments(
    source: str | os.PathLike, output: str | os.PathLike, threads: int = 1, memory_mb: int = 4000
) -> None:
    """Coordinate-sort ``source`` into ``output`` with samtools sort (pysam's), every record
    and tag kept: dorado writes aligned BAMs in read order, which leech reads and kennel's
    sharding, which keeps coordinate order, cannot. ``output`` appears only when complete."""
    source, output = Path(source), Path(output)
    _open_bam(source).close()  # a missing or broken input is one line, not samtools' output
    # samtools sort holds -m per sorting thread (-@ of them) and overshoots it: half the job's
    # memory in all
    per_thread = max(64, memory_mb // (2 * threads))

    def remove_parts():
        # samtools' part files carry the writer-temporary prefix: a killed sort's (as large as
        # the BAM) go when the next starts, not only when a whole run succeeds
        for part in output.parent.glob(f".tmp-*.{output.name}.part*"):
            part.unlink(missing_ok=True)

    with atomic_outputs(output) as (temporary,):
        remove_parts()
        parts = temporary.with_name(f"{temporary.name}.part")
        arguments = ["-@", str(threads), "-m", f"{per_thread}M", "-O", "BAM", "-T", str(parts)]
        try:
            pysam.sort(*arguments, "-o", str(temporary), str(source), catch_stdout=False)
        except pysam.SamtoolsError as error:
            lines = [line for line in str(error).splitlines() if line.strip()]
            raise KennelError(f"{source}: samtools sort failed ({lines[-1]})") from None
        finally:
            remove_parts()


def sorted_records(bam: pysam.AlignmentFile, path: str | os.PathLike) -> Iterator:
    """Every record in file order, checking the coordinate order the header promises."""
    last = (-1, -1)
    unmapped_seen = False
    try:
        for record in bam.fetch(until_eof=True):
            if record.reference_id < 0:
                unmapped_seen = True
            else:
                key = (record.reference_id, record.reference_start)
                if key < last or unmapped_seen:
                    raise KennelError(
                        f"{path}: record {record.query_name}: out of coordinate order "
                        f"(at {record.reference_name}:{record.reference_start + 1}); "
                        "run samtools sort"
                    )
                last = key
            yield record
    except OSError as error:
        raise KennelError(f"{path}: BAM truncated or corrupt ({error})") from None


def record_fate(record: pysam.AlignedSegment) -> str:
    """``classifiable`` or why kennel's own bundles leave the record out, from the record alone
    (:class:`RecordSelection` adds the reference and signal checks)."""
    if record.is_secondary:
        return "secondary"
    if record.is_supplementary:
        return "supplementary"
    if record.is_unmapped:
        return "unmapped"
    if record.is_reverse:  # direct RNA is read from its own strand: reverse hits are artefacts
        return "reverse_strand"
    if not record.has_tag("mv"):
        return "no_moves"
    return CLASSIFIABLE


def select_record(record: pysam.AlignedSegment, min_mapq: int = 0) -> str | None:
    """Why ``leech predict`` leaves ``record`` out of its output BAM (one of
    :data:`LEECH_RECORD_REASONS`), or None if it keeps it.

    The strand is not looked at: a reverse-strand primary is processed like a forward one.
    """
    if record.is_unmapped:
        return "unmapped"
    if record.is_secondary:
        return "secondary"
    if record.is_supplementary:
        return "supplementary"
    if record.mapping_quality < min_mapq:
        return "low_mapq"
    if not record.has_tag("mv"):
        return "no_moves"
    if not record.has_tag("ns"):
        return "no_sample_count"
    if record.query_name is None or record.query_sequence is None:
        return "no_seq"
    return None


def reference_contig_names(reference_path: str | os.PathLike) -> frozenset[str]:
    """The contig names of an indexed (or indexable) reference FASTA."""
    try:
        with pysam.FastaFile(str(reference_path)) as fasta:
            return frozenset(fasta.references)
    except (OSError, ValueError) as error:
        raise KennelError(f"{reference_path}: unreadable FASTA ({error})") from None


def check_contigs_in_reference(
    bam_path: str | os.PathLike, contigs: set[str], reference_path: str | os.PathLike
) -> None:
    """Every contig a classifiable record maps to must be in the reference FASTA."""
    missing = sorted(contigs - reference_contig_names(reference_path))
    if missing:
        # the shard step passes such reads through: a shard BAM has none
        raise KennelError(
            f"{bam_path}: contig {missing[0]} is not in the reference {reference_path} "
            f"({len(missing)} missing contig(s)); extract reads a shard of kennel shard, given "
            "the same reference"
        )
