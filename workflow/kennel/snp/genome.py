"""Variants checked against the genome they are scored on: chromosome, position, REF allele.

hound_snp's conventions: a chromosome named without ``chr`` is found under its ``chr`` name,
and ``ref_mismatch='flip'`` scores a variant whose ALT is what the genome holds as its flip.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pysam

from kennel.errors import KennelError, fail
from kennel.snp.vcf import Variant, quiet_htslib

logger = logging.getLogger(__name__)

REF_MISMATCH_MODES = ("error", "skip", "flip")


def open_genome(path: str | os.PathLike) -> pysam.FastaFile:
    """Open an indexed genome FASTA (pysam builds the ``.fai`` when missing)."""
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: genome FASTA not found")
    try:
        with quiet_htslib():
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
