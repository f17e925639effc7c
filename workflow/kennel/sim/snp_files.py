"""A simulated SNP run's files: the genome FASTA, the VCF, baskerville's targets table and
the truth table, written as :mod:`kennel.sim.snp` planned them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pysam

from kennel.models.motif import MotifCoverage

FASTA_LINE_LENGTH = 60

OUTPUTS = {
    "genome": "genome.fa",
    "genome_index": "genome.fa.fai",
    "variants": "variants.vcf.gz",
    "variants_index": "variants.vcf.gz.tbi",
    "targets": "targets.tsv",
    "model": "model.pt",
    "truth": "truth.tsv",
}


@dataclass
class SimulatedVariant:
    """One simulated VCF record: 0-based position, its alleles and each ALT's true effect."""

    chrom: int
    pos0: int
    ref: str
    alts: tuple[str, ...]
    id: str = ""
    effects: tuple[str, ...] = ()


def write_fasta(path: Path, names: list[str], chromosomes: list[bytearray]) -> None:
    with open(path, "wb") as handle:
        for name, sequence in zip(names, chromosomes, strict=True):
            handle.write(f">{name}\n".encode())
            for start in range(0, len(sequence), FASTA_LINE_LENGTH):
                handle.write(sequence[start : start + FASTA_LINE_LENGTH] + b"\n")


def write_vcf(
    path: Path, names: list[str], chromosomes: list[bytearray], variants: list[SimulatedVariant]
) -> None:
    header = pysam.VariantHeader()
    header.add_meta("source", "kennel simulate snp")
    header.add_meta("reference", OUTPUTS["genome"])
    for name, sequence in zip(names, chromosomes, strict=True):
        header.contigs.add(name, length=len(sequence))
    with pysam.VariantFile(str(path), "wz", header=header) as vcf:
        for variant in variants:
            record = vcf.new_record(
                contig=names[variant.chrom],
                start=variant.pos0,
                alleles=(variant.ref.upper(), *variant.alts),
                id=variant.id,
            )
            vcf.write(record)


# Per motif: (clip_soft, scale, sum_stat). The motif model's bins reach about 32 (a bin fully
# covered by an occurrence), so clip_soft 8 and 16 unclip the covered bins, the sqrt sum stat
# squares one motif's coverage back, and scale != 1 makes unscale visible: untransform does
# something on every track, as it does for Borzoi's.
_TRACK_TRANSFORMS = ((8.0, 0.5, "sum_sqrt"), (16.0, 2.0, "sum"))


def write_targets(path: Path, model: MotifCoverage) -> None:
    """Baskerville's targets table: one row per output track, strand partners by index."""
    columns = ["identifier", "file", "clip", "clip_soft", "scale", "sum_stat", "strand_pair"]
    lines = ["\t".join(["", *columns, "description"])]
    for index, (identifier, partner) in enumerate(
        zip(model.target_ids, model.strand_pair, strict=True)
    ):
        motif = model.motifs[index // 2]
        clip_soft, scale, sum_stat = _TRACK_TRANSFORMS[(index // 2) % len(_TRACK_TRANSFORMS)]
        strand = identifier[-1]
        row = [
            index,
            identifier,
            "simulated",
            768,
            clip_soft,
            scale,
            sum_stat,
            partner,
            f"MOTIF:{motif} {strand}",
        ]
        lines.append("\t".join(str(field) for field in row))
    path.write_text("\n".join(lines) + "\n")


def write_truth(path: Path, names: list[str], variants: list[SimulatedVariant]) -> None:
    lines = ["id\tchrom\tpos\tref\talt\teffect"]
    for variant in variants:
        for alt, effect in zip(variant.alts, variant.effects, strict=True):
            fields = [
                variant.id,
                names[variant.chrom],
                variant.pos0 + 1,
                variant.ref.upper(),
                alt,
                effect,
            ]
            lines.append("\t".join(str(field) for field in fields))
    path.write_text("\n".join(lines) + "\n")
