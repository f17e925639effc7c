"""Variants from a VCF, one row per alternate allele, checked against the genome.

Reading goes through pysam (htslib); what htslib cannot parse becomes one line naming the file
and the record, with the offending line quoted, instead of htslib's "truncated file".
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pysam

from kennel.errors import KennelError, fail

logger = logging.getLogger(__name__)

REF_MISMATCH_MODES = ("error", "skip", "flip")
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
        """Unique per scored row: the VCF ID, with ``:n`` for the n-th ALT from the second on."""
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
def _quiet_htslib() -> Iterator[None]:
    # htslib prints its own warnings for the errors reported here; one line is enough
    previous = pysam.set_verbosity(0)
    try:
        yield
    finally:
        pysam.set_verbosity(previous)


def _data_line(path: Path, number: int) -> str | None:
    """The ``number``-th (1-based) non-header line of a plain or gzipped VCF, for error messages."""
    try:
        with open(path, "rb") as head:
            opener = gzip.open if head.read(2) == b"\x1f\x8b" else open
        with opener(path, "rt", errors="replace") as handle:
            seen = 0
            for line in handle:
                if line.startswith("#") or not line.strip():
                    continue
                seen += 1
                if seen == number:
                    return line.rstrip("\n")
    except (OSError, EOFError):
        return None
    return None


def _malformed(path: Path, number: int, previous: Variant | None, error: Exception) -> KennelError:
    line = _data_line(path, number)
    where = f"record {number}"
    if previous is not None:
        where += f" (after {previous.chrom}:{previous.pos} {previous.id})"
    shown = f": {line[:80]!r}" if line is not None else ""
    return fail(path, f"malformed VCF record{shown} ({error})", record=where)


def read_variants(path: str | os.PathLike, alts: str = "all") -> list[Variant]:
    """Every alternate allele of every record (``alts='first'``: only the first, as hound_snp
    scores), in VCF order.

    Records must be sorted (each chromosome contiguous, positions non-decreasing): variants are
    clustered by position. REF and ALT must be sequences of A/C/G/T/N; symbolic (``<DEL>``),
    missing (``.``) and spanning (``*``) alleles are refused rather than silently dropped.
    """
    if alts not in ALT_MODES:
        raise KennelError(f"alts={alts!r}: one of {', '.join(ALT_MODES)}")
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: VCF not found")
    variants: list[Variant] = []
    finished: set[str] = set()
    last: Variant | None = None
    number = 0
    with _quiet_htslib():
        try:
            vcf = pysam.VariantFile(str(path))
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
                    raise _malformed(path, number + 1, last, error) from None
                number += 1
                record_id = record.id or f"{record.chrom}:{record.pos}"
                where = f"record {number} ({record.chrom}:{record.pos} {record_id})"
                ref = record.ref or ""
                if not _ALLELE.match(ref):
                    raise fail(path, f"REF {ref!r} is not a sequence of A/C/G/T/N", record=where)
                if not record.alts:
                    raise fail(path, "no ALT allele", record=where)
                for alt in record.alts:
                    if not _ALLELE.match(alt):
                        raise fail(
                            path,
                            f"ALT {alt!r} is not a sequence of A/C/G/T/N "
                            "(symbolic, missing and '*' alleles are not scored)",
                            record=where,
                        )
                if last is not None:
                    if record.chrom != last.chrom:
                        finished.add(last.chrom)
                        if record.chrom in finished:
                            raise fail(
                                path,
                                f"records of {record.chrom} are not contiguous "
                                "(sort the VCF, e.g. bcftools sort)",
                                record=where,
                            )
                    elif record.pos < last.pos:
                        raise fail(
                            path,
                            f"position {record.pos} comes after {last.pos} "
                            "(sort the VCF, e.g. bcftools sort)",
                            record=where,
                        )
                scored = record.alts if alts == "all" else record.alts[:1]
                for allele, alt in enumerate(scored, start=1):
                    last = Variant(
                        id=record_id,
                        chrom=record.chrom,
                        pos=record.pos,
                        ref=ref.upper(),
                        alt=alt.upper(),
                        record=number,
                        allele=allele,
                        anonymous=record.id is None,
                    )
                    variants.append(last)
    return variants


def open_genome(path: str | os.PathLike) -> pysam.FastaFile:
    """Open an indexed genome FASTA (pysam builds the ``.fai`` when missing)."""
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: genome FASTA not found")
    try:
        with _quiet_htslib():
            return pysam.FastaFile(str(path))
    except (OSError, ValueError) as error:
        raise KennelError(f"{path}: not a readable, indexable FASTA ({error})") from None


def check_against_genome(
    variants: list[Variant],
    genome: str | os.PathLike,
    vcf: str | os.PathLike,
    ref_mismatch: str = "error",
) -> np.ndarray:
    """Check each variant's chromosome, position and REF allele against the genome.

    A chromosome named without ``chr`` (``1``) that the genome has only as ``chr1`` is scored
    there and written as ``chr1`` (an ID of ``.`` too), as hound_snp names every chromosome; the
    count is logged. A chromosome the genome lacks otherwise, or a position past its end, is
    always an error. A REF allele
    that differs from the genome is an error; with ``ref_mismatch='skip'`` that variant is left
    out (the mask says which are kept; the count is logged); with ``'flip'``, as hound_snp does,
    a variant whose ALT is what the genome holds is replaced in ``variants`` by its flipped copy
    (scored as REF placed into the genome's ALT: the same sign of effect as its VCF alleles), and
    any other mismatch is an error.
    """
    if ref_mismatch not in REF_MISMATCH_MODES:
        raise KennelError(
            f"ref_mismatch: {ref_mismatch!r} is not one of {', '.join(REF_MISMATCH_MODES)}"
        )
    keep = np.ones(len(variants), dtype=bool)
    renamed = 0
    with open_genome(genome) as fasta:
        lengths = dict(zip(fasta.references, fasta.lengths, strict=True))
        for index, variant in enumerate(variants):
            named = f"chr{variant.chrom}"
            if variant.chrom not in lengths and named in lengths:  # "1" where the genome has chr1
                anonymous_id = f"{named}:{variant.pos}" if variant.anonymous else variant.id
                variant = variants[index] = replace(variant, chrom=named, id=anonymous_id)
                renamed += 1
            length = lengths.get(variant.chrom)
            if length is None:
                raise fail(
                    vcf,
                    f"chromosome {variant.chrom} is not in the genome {genome}",
                    record=variant.describe(),
                )
            end = variant.pos0 + len(variant.ref)
            if end > length:
                raise fail(
                    vcf,
                    f"REF allele ends at {end}, past the end of {variant.chrom} "
                    f"({length} bp in {genome})",
                    record=variant.describe(),
                )
            genomic = fasta.fetch(variant.chrom, variant.pos0, end).upper()
            if genomic == variant.ref:
                continue
            if ref_mismatch == "skip":
                keep[index] = False
                continue
            if ref_mismatch == "flip":
                alt_end = variant.pos0 + len(variant.alt)
                if fasta.fetch(variant.chrom, variant.pos0, alt_end).upper() == variant.alt:
                    variants[index] = replace(variant, flipped=True)
                    continue
            message = f"REF {variant.ref} does not match the genome ({genomic} in {genome})"
            if ref_mismatch == "flip":
                message += f", and neither does ALT {variant.alt}"
            else:
                message += (
                    "; set ref_mismatch to 'skip' or 'flip' to leave out or flip such variants"
                )
            raise fail(
                vcf,
                message,
                record=variant.describe(),
            )
    if renamed:
        logger.warning(
            "%s: %d variant(s) on chromosomes named without 'chr' scored on %s's chr-named ones "
            "(as hound_snp names them)",
            vcf,
            renamed,
            genome,
        )
    skipped = int((~keep).sum())
    if skipped:
        logger.warning(
            "%s: skipped %d variant(s) whose REF does not match %s", vcf, skipped, genome
        )
    flipped = sum(variant.flipped for variant in variants)
    if flipped:
        logger.warning(
            "%s: flipped %d variant(s) whose ALT, not REF, matches %s", vcf, flipped, genome
        )
    return keep
