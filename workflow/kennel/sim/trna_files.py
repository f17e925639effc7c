"""A simulated tRNA run's files: the given reference read, the run written as dorado, an aligner
and a POD5 export would write it.

:mod:`kennel.sim.trna_reads` makes the reads (:class:`SimulatedRead`); this module writes them:
the
POD5 (int16 ADC signal with its calibration), the BAM (SEQ, CIGAR, dorado's ``mv``/``ns``/``ts``
tags, secondary and supplementary records), the truth table, the reference FASTA and a synthetic
k-mer table. It also reads what a user gives the simulator (a reference FASTA, a k-mer table
that may be gzipped).
"""

from __future__ import annotations

import array
import csv
import datetime
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pod5
import pysam

from kennel.errors import KennelError
from kennel.io.kmers import BASES
from kennel.trna.anchor import AnchorMotif

TRUTH_COLUMNS = (
    "read_id",
    "sample",
    "fate",
    "reference",
    "label",
    "charging",
    "anchor_reference_position",
    "n_secondary",
    "n_supplementary",
    "dwell",
)


@dataclass
class SimulatedRead:
    read_id: str
    sample: str
    fate: str
    reference: str | None
    label: str | None
    charging: float | None
    anchor_reference_position: int | None
    sequence: str  # SEQ, 5'→3', soft clips included
    qualities: np.ndarray
    cigar: list[tuple[int, int]]
    reference_start: int
    signal: np.ndarray | None  # int16 ADC, time order
    calibration: tuple[float, float]  # (offset, scale): pA = (adc + offset) * scale
    moves: np.ndarray | None  # 0/1 per stride block
    trimmed_samples: int
    n_samples: int
    dwell: np.ndarray  # true samples per base, SEQ order (5'→3'): what refinement should find
    n_secondary: int = 0
    n_supplementary: int = 0
    secondary_targets: list[str] = field(default_factory=list)


def read_reference(path: Path, motif: AnchorMotif) -> dict[str, str]:
    references = {}
    try:
        with pysam.FastxFile(str(path)) as fasta:
            for entry in fasta:
                references[entry.name] = entry.sequence.upper().replace("U", "T")
    except (OSError, ValueError) as error:
        raise KennelError(f"{path}: unreadable FASTA ({error})") from None
    anchored = {name: seq for name, seq in references.items() if motif.find(seq) is not None}
    if not anchored:
        raise KennelError(f"{path}: no reference holds the anchor motif {motif.motif}")
    return references


def write_fasta(path: Path, references: dict[str, str]) -> None:
    with open(path, "w") as handle:
        for name, sequence in references.items():
            handle.write(f">{name}\n")
            for start in range(0, len(sequence), 60):
                handle.write(sequence[start : start + 60] + "\n")


def write_synthetic_kmer_table(path: Path, rng: np.random.Generator, k: int) -> None:
    """Levels with RNA-like structure: a position-weighted base contribution plus context noise,
    standardised like the RNA004 table (mean ~0, sd ~0.9)."""
    base_effect = rng.normal(0.0, 1.0, size=(k, 4))
    base_effect[k // 2] *= 2.0  # the centre base dominates the current
    codes = np.indices((4,) * k).reshape(k, -1).T  # every k-mer, lexicographic
    levels = base_effect[np.arange(k), codes].sum(axis=1) + rng.normal(0.0, 0.3, len(codes))
    levels = (levels - levels.mean()) / levels.std() * 0.9
    with open(path, "w") as handle:
        for code, level in zip(codes, levels, strict=True):
            handle.write("".join(BASES[c] for c in code) + f"\t{level:.6f}\n")


def is_gzipped(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def write_pod5(path: Path, reads: list[SimulatedRead], sample: str, sample_rate: int, seed: int):
    run_info = pod5.RunInfo(
        acquisition_id=f"kennel-sim-{sample}",
        acquisition_start_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        adc_max=2047,
        adc_min=-2048,
        context_tags={
            "sequencing_kit": "sqk-rna004",
            "sample_frequency": str(sample_rate),
        },
        experiment_name="kennel-simulation",
        flow_cell_id="SIM00001",
        flow_cell_product_code="FLO-MIN004RA",
        protocol_name="kennel simulate trna",
        protocol_run_id=f"sim-{seed}",
        protocol_start_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        sample_id=sample,
        sample_rate=sample_rate,
        sequencing_kit="sqk-rna004",
        sequencer_position="MN00000",
        sequencer_position_type="MinION",
        software="kennel",
        system_name="kennel",
        system_type="simulation",
        tracking_id={"sample_id": sample},
    )
    records = []
    for number, read in enumerate(reads):
        if read.signal is None:
            continue
        offset, scale = read.calibration
        records.append(
            pod5.Read(
                read_id=uuid.UUID(read.read_id),
                pore=pod5.Pore(channel=1 + number % 512, well=1, pore_type="not_set"),
                calibration=pod5.Calibration(offset=offset, scale=scale),
                read_number=number,
                start_sample=number * 20_000,
                median_before=200.0,
                end_reason=pod5.EndReason(pod5.EndReasonEnum.SIGNAL_POSITIVE, False),
                run_info=run_info,
                signal=read.signal,
            )
        )
    with pod5.Writer(path) as writer:
        writer.add_reads(records)


def dorado_tags(read: SimulatedRead, stride: int) -> list[tuple]:
    tags = [("qs", int(np.mean(read.qualities)))]
    tags += [("ns", read.n_samples), ("ts", read.trimmed_samples)]
    if read.moves is not None:
        tags.append(("mv", array.array("b", [stride, *read.moves.tolist()])))
    return tags


def write_bam(path: Path, reads: list[SimulatedRead], references: dict[str, str], stride: int):
    names = list(references)
    header = {
        "HD": {"VN": "1.6", "SO": "coordinate"},
        "SQ": [{"SN": name, "LN": len(seq)} for name, seq in references.items()],
        "PG": [
            {"ID": "basecaller", "PN": "dorado", "VN": "simulated", "CL": "kennel simulate trna"},
            {"ID": "aligner", "PN": "minimap2", "PP": "basecaller", "VN": "simulated"},
        ],
    }
    records = []
    with pysam.AlignmentFile(str(path), "wb", header=header) as bam:
        for read in reads:
            tags = dorado_tags(read, stride)
            primary = pysam.AlignedSegment(bam.header)
            primary.query_name = read.read_id
            primary.query_sequence = read.sequence
            primary.query_qualities = pysam.qualitystring_to_array(
                "".join(chr(q + 33) for q in read.qualities)
            )
            if read.reference is None:
                primary.flag = 4
                primary.reference_id = -1
                primary.reference_start = -1
                primary.mapping_quality = 0
            else:
                primary.flag = 0
                primary.reference_id = names.index(read.reference)
                primary.reference_start = read.reference_start
                primary.mapping_quality = 60
                primary.cigartuples = read.cigar
            primary.set_tags(tags)
            records.append(primary)
            for target in read.secondary_targets:
                secondary = pysam.AlignedSegment(bam.header)
                secondary.query_name = read.read_id
                secondary.flag = 256
                secondary.reference_id = names.index(target)
                secondary.reference_start = 0
                secondary.mapping_quality = 0
                secondary.cigartuples = [(pysam.CMATCH, min(30, len(references[target])))]
                secondary.set_tags(tags)  # minimap2 -y copies the basecaller's tags
                records.append(secondary)
            if read.n_supplementary:
                # the read's 5' part also aligned, chimerically, at the start of another contig
                part = min(25, len(read.sequence) // 3)
                supplementary = pysam.AlignedSegment(bam.header)
                supplementary.query_name = read.read_id
                supplementary.flag = 2048
                supplementary.reference_id = (names.index(read.reference) + 1) % len(names)
                supplementary.reference_start = 0
                supplementary.mapping_quality = 10
                supplementary.query_sequence = read.sequence[:part]
                supplementary.cigartuples = [
                    (pysam.CMATCH, part),
                    (pysam.CHARD_CLIP, len(read.sequence) - part),
                ]
                supplementary.set_tags(tags)
                records.append(supplementary)
        mapped_last = len(names)
        records.sort(
            key=lambda r: (
                mapped_last if r.reference_id < 0 else r.reference_id,
                r.reference_start,
                r.query_name,
                r.flag,
            )
        )
        for record in records:
            bam.write(record)


def write_truth(path: Path, reads: list[SimulatedRead]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(TRUTH_COLUMNS)
        for read in reads:
            writer.writerow(
                [
                    read.read_id,
                    read.sample,
                    read.fate,
                    read.reference or "",
                    read.label or "",
                    "" if read.charging is None else f"{read.charging:.4f}",
                    ""
                    if read.anchor_reference_position is None
                    else read.anchor_reference_position,
                    read.n_secondary,
                    read.n_supplementary,
                    "" if read.signal is None else ",".join(map(str, read.dwell)),
                ]
            )
