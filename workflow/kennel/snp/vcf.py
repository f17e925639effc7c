"""Variants from a VCF, one row per alternate allele (checked against the genome in
:mod:`kennel.snp.genome`).

Reading goes through pysam (htslib); what htslib cannot parse becomes one line naming the file
and the record, with the offending line quoted, instead of htslib's "truncated file".

hound_snp reads looser files than htslib: any whitespace between columns, only the first five
(CHROM POS ID REF ALT), no header needed, plain gzip. The Borzoi tutorials' VCFs are such files
(seven columns and no ``#CHROM`` line, or no header at all). A file without a ``#CHROM`` line
of the eight VCF columns is read as hound_snp reads it: each record becomes ``CHROM POS ID REF
ALT . . .`` under a minimal header, and htslib reads that copy.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pysam
from pysam.libcbgzf import BGZFile

from kennel.errors import KennelError, fail

logger = logging.getLogger(__name__)

ALT_MODES = ("all", "first")
_ALLELE = re.compile(r"^[ACGTNacgtn]+$")


@dataclass(frozen=True)
class Variant:
    """One alternate allele of one VCF record."""

    id: str
    chrom: str
    pos: int  # 1-based, as in the VCF
    ref: str  # upper case
    alt: str  # upper case
    record: int  # 1-based number of the record in the VCF
    allele: int = 1  # which ALT of the record (1-based)
    flipped: bool = False  # the genome holds ALT, not REF: scored with the alleles swapped
    anonymous: bool = False  # the VCF's ID was '.': ``id`` is ``chrom:pos``

    @property
    def pos0(self) -> int:
        return self.pos - 1

    @property
    def row_id(self) -> str:
        """Distinct among one record's rows: the VCF ID, with ``:n`` for its n-th ALT from the
        second on (records sharing an ID share it, as in hound_snp)."""
        return self.id if self.allele == 1 else f"{self.id}:{self.allele}"

    @property
    def placed(self) -> tuple[str, str]:
        """``(genome allele, allele put into the window)``: REF/ALT, swapped when flipped."""
        return (self.alt, self.ref) if self.flipped else (self.ref, self.alt)

    @property
    def indel_size(self) -> int:
        """Bases the placed allele adds (positive) or removes (negative) in the window."""
        genome_allele, placed = self.placed
        return len(placed) - len(genome_allele)

    def describe(self) -> str:
        return f"record {self.record} ({self.chrom}:{self.pos} {self.id})"


@contextlib.contextmanager
def quiet_htslib() -> Iterator[None]:
    # htslib prints its own warnings for the errors reported here; one line is enough
    previous = pysam.set_verbosity(0)
    try:
        yield
    finally:
        pysam.set_verbosity(previous)


_VCF_COLUMNS = ("#CHROM", "POS", "ID", "REF", "ALT", "QUAL", "FILTER", "INFO")
# what a file in hound_snp's looser form gets to be a VCF htslib reads
_MINIMAL_HEADER = [b"##fileformat=VCFv4.2\n", "\t".join(_VCF_COLUMNS).encode() + b"\n"]
_HOUND_COLUMNS = 5  # CHROM POS ID REF ALT: all hound_snp reads of a record


def _raw_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """A plain or gzipped file's lines, each ending in a newline. BCF is refused."""
    with open(path, "rb") as head:
        opener = gzip.open if head.read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as handle:
        for index, line in enumerate(handle):
            if index == 0 and line.startswith(b"BCF"):
                raise KennelError(f"{path}: a BCF file; give a VCF (bcftools view -Oz)")
            yield line if line.endswith(b"\n") else line + b"\n"


def _has_vcf_header(header: list[bytes]) -> bool:
    """Whether a file's leading '#' lines hold a #CHROM line naming the eight VCF columns."""
    return any(
        line.startswith(b"#CHROM") and len(line.split(b"\t")) >= len(_VCF_COLUMNS)
        for line in header
    )


def _as_vcf_record(line: bytes) -> bytes:
    """A record of hound_snp's looser form as a VCF record; a line with fewer columns than
    hound_snp reads is left for htslib to refuse (and kennel to explain)."""
    fields = line.split()
    if len(fields) < _HOUND_COLUMNS:
        return line
    return b"\t".join([*fields[:_HOUND_COLUMNS], b".", b".", b"."]) + b"\n"


def _header_lines(path: str | os.PathLike) -> list[bytes]:
    """The '#' lines a file starts with."""
    header = []
    for line in _raw_lines(path):
        if not line.startswith(b"#"):
            break
        header.append(line)
    return header


def _is_loose(path: str | os.PathLike) -> bool:
    """Whether a file is in hound_snp's looser form: no #CHROM line of the eight VCF columns."""
    return not _has_vcf_header(_header_lines(path))


def _raw_records(path: str | os.PathLike, loose: bool) -> Iterator[tuple[int, bytes]]:
    """The lines after the header, as written, numbered from 1 as htslib numbers records (a
    '#' line after a record is one)."""
    record = 0
    for line in _raw_lines(path):
        if record == 0 and line.startswith(b"#"):
            continue
        record += 1
        if loose and line.startswith(b"#"):
            # hound_snp would read it as a record; in a VCF it would be one too, and fail
            raise fail(path, "a '#' line after the records", record=f"record {record}")
        yield record, line


def numbered_lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """A VCF's lines as htslib reads them, each with its record number: 0 for the header lines,
    which come first, then 1, 2, ... What the scorer reads (read_variants) and what slice_vcf
    copies into slices.

    A file htslib reads as it is gives its own lines. One it cannot (hound_snp's looser form,
    gzip that is not bgzip) is read through a copy, and these are that copy's lines: the
    looser form gets a minimal header and each record ``CHROM POS ID REF ALT . . .`` (such a
    file without records is refused: hound_snp fails on it too); every record and the
    ``#CHROM`` line are cut to the eight fixed columns, all that is read. BCF is refused.
    """
    loose = _is_loose(path)
    copied = not _htslib_reads(path, loose)
    for line in _MINIMAL_HEADER if loose else _header_lines(path):
        yield 0, _first_columns(line) if copied and line.startswith(b"#CHROM") else line
    record = 0
    for record, line in _raw_records(path, loose):
        yield record, _as_vcf_record(line) if loose else _first_columns(line) if copied else line
    if loose and record == 0:
        raise KennelError(f"{path}: no records and no #CHROM header line: not a VCF")


def _htslib_reads(path: str | os.PathLike, loose: bool) -> bool:
    """Whether htslib reads ``path`` as it is: plain or bgzipped, with a VCF header."""
    with open(path, "rb") as handle:
        head = handle.read(18)
    # BGZF is gzip with the FEXTRA flag and a "BC" subfield
    bgzf = head[:4] == b"\x1f\x8b\x08\x04" and head[12:14] == b"BC"
    return not loose and (bgzf or head[:2] != b"\x1f\x8b")


def _first_columns(line: bytes) -> bytes:
    """A VCF line cut to its eight fixed columns: only they are read (no FORMAT, samples)."""
    return b"\t".join(line.rstrip(b"\r\n").split(b"\t")[: len(_VCF_COLUMNS)]) + b"\n"


@contextlib.contextmanager
def _readable(path: Path, loose: bool) -> Iterator[Path]:
    """``path``, or where htslib cannot read it as it is (hound_snp's looser form, gzip that is
    not bgzip), a bgzipped copy of its lines as numbered_lines gives them, in the temporary
    directory (``TMPDIR``): records keep their numbers, so errors still name the user's file
    and record."""
    if _htslib_reads(path, loose):
        yield path
        return
    try:
        scratch = tempfile.TemporaryDirectory(prefix="kennel-vcf-")
    except OSError as error:
        raise KennelError(
            f"{path}: cannot make a directory for its VCF copy in {tempfile.gettempdir()} "
            f"({error}); set TMPDIR to a writable directory with room"
        ) from None
    with scratch as directory:
        copy = Path(directory) / "variants.vcf.gz"
        lines = numbered_lines(path)
        # a full disk is the copy's fault, not the user's file's: say where it was written
        stage = "write"
        try:
            with BGZFile(str(copy), "wb") as handle:
                while True:
                    stage = "read"
                    item = next(lines, None)
                    if item is None:
                        break
                    stage = "write"
                    handle.write(item[1])
                stage = "write"  # closing writes the last block
        except OSError as error:
            if stage == "read":
                raise
            raise KennelError(
                f"{path}: cannot write its VCF copy in {directory} ({error}); set TMPDIR to a "
                "writable directory with room"
            ) from None
        yield copy


def _data_line(path: Path, number: int, loose: bool) -> str | None:
    """The ``number``-th (1-based) record line of a VCF as written, for error messages."""
    try:
        for record, line in _raw_records(path, loose):
            if record == number:
                return line.decode(errors="replace").rstrip("\r\n")
    except (OSError, EOFError, KennelError):
        return None
    return None


def _malformed(
    path: Path, number: int, previous: str, error: Exception, loose: bool
) -> KennelError:
    line = _data_line(path, number, loose)
    where = f"record {number}"
    if previous:
        where += f" (after {previous})"
    shown = f": {line[:80]!r}" if line is not None else ""
    columns = len(line.split() if loose else line.split("\t")) if line is not None else 0
    if line is not None and not line.strip():
        why = "a blank line"
    elif loose and 0 < columns < _HOUND_COLUMNS:
        why = f"{columns} column(s); a record needs at least 5: CHROM POS ID REF ALT"
    elif not loose and 0 < columns < len(_VCF_COLUMNS):
        # htslib calls a short record a "truncated file"
        why = (
            f"{columns} tab-separated column(s); a VCF record has 8: "
            "CHROM POS ID REF ALT QUAL FILTER INFO"
        )
    else:
        why = str(error)
    return fail(path, f"malformed VCF record{shown} ({why})", record=where)


@dataclass
class VcfVariants:
    """What a VCF holds to score: its alleles as variants, and the alleles that have no
    sequence to place in a window (counted, the first named for the log)."""

    variants: list[Variant]
    unscored: int = 0
    first_unscored: str = ""


def read_variants(path: str | os.PathLike, alts: str = "all") -> VcfVariants:
    """Every alternate allele of every record, as :func:`iter_variants` reads them."""
    read = VcfVariants([])
    read.variants = list(iter_variants(path, alts, read))
    return read


def iter_variants(
    path: str | os.PathLike, alts: str = "all", read: VcfVariants | None = None
) -> Iterator[Variant]:
    """Every alternate allele of every record (``alts='first'``: only the first, as hound_snp
    scores), in VCF order, one at a time (a whole VCF's as objects can be GBs); ``read``, if
    given, counts the alleles with no sequence.

    Records must be sorted (each chromosome contiguous, positions non-decreasing): variants are
    clustered by position. REF must be a sequence of A/C/G/T/N. An ALT that is not one (a
    symbolic ``<DEL>``, a spanning deletion ``*``, a missing ``.``) has no sequence to score: it
    gets no row, is counted in ``unscored`` and logged, and its record's other ALTs keep their
    allele numbers (hound_snp scores ``*`` as an all-zero base and ``<DEL>`` as no effect).

    The mode and the file are checked at the call, the records as they are read. htslib stays
    quiet (its messages would precede kennel's one line) until the iteration ends.
    """
    if alts not in ALT_MODES:
        raise KennelError(f"alts={alts!r}: one of {', '.join(ALT_MODES)}")
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: VCF not found")
    return _variants(path, alts, VcfVariants([]) if read is None else read)


def _variants(path: Path, alts: str, read: VcfVariants) -> Iterator[Variant]:
    finished: set[str] = set()
    previous: tuple[str, int, str] | None = None  # chrom, pos, id: order, and htslib's errors
    number = 0
    with contextlib.ExitStack() as stack:
        # first: htslib's own messages (a failed copy write too) must not precede kennel's line
        stack.enter_context(quiet_htslib())
        try:
            loose = _is_loose(path)
            readable = stack.enter_context(_readable(path, loose))
        except (OSError, EOFError, zlib.error) as error:
            raise KennelError(f"{path}: not a readable VCF ({error})") from None
        try:
            vcf = pysam.VariantFile(str(readable))
        except (OSError, ValueError) as error:
            raise KennelError(f"{path}: not a readable VCF ({error})") from None
        with vcf:
            records = iter(vcf)
            while True:
                try:
                    record = next(records)
                except StopIteration:
                    break
                except (OSError, ValueError) as error:
                    last = f"{previous[0]}:{previous[1]} {previous[2]}" if previous else ""
                    raise _malformed(path, number + 1, last, error, loose) from None
                number += 1
                record_id = record.id or f"{record.chrom}:{record.pos}"
                where = f"record {number} ({record.chrom}:{record.pos} {record_id})"
                ref = record.ref or ""
                if not _ALLELE.match(ref):
                    raise fail(path, f"REF {ref!r} is not a sequence of A/C/G/T/N", record=where)
                scored = record.alts or (".",)  # a missing ALT: one allele with no sequence
                if alts == "first":
                    scored = scored[:1]
                if previous is not None:
                    if record.chrom != previous[0]:
                        finished.add(previous[0])
                        if record.chrom in finished:
                            raise fail(
                                path,
                                f"records of {record.chrom} are not contiguous "
                                "(sort the VCF, e.g. bcftools sort)",
                                record=where,
                            )
                    elif record.pos < previous[1]:
                        raise fail(
                            path,
                            f"position {record.pos} comes after {previous[1]} "
                            "(sort the VCF, e.g. bcftools sort)",
                            record=where,
                        )
                for allele, alt in enumerate(scored, start=1):
                    if not _ALLELE.match(alt):
                        read.first_unscored = read.first_unscored or f"{where} ALT {alt!r}"
                        read.unscored += 1
                        continue
                    yield Variant(
                        id=record_id,
                        chrom=record.chrom,
                        pos=record.pos,
                        ref=ref.upper(),
                        alt=alt.upper(),
                        record=number,
                        allele=allele,
                        anonymous=record.id is None,
                    )
                previous = (record.chrom, record.pos, record_id)
    if read.unscored:
        logger.warning(
            "%s: %d ALT allele(s) with no sequence to score (symbolic, '*' or '.') get no row, "
            "e.g. %s",
            path,
            read.unscored,
            read.first_unscored,
        )
