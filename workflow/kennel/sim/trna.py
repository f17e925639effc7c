"""``kennel simulate trna``: what dorado + an aligner + a POD5 export would give for tRNA reads.

The generative model, per read:

* a molecule = 5' adapter + tRNA body ending in CCA + 3' adapter (a reference contig), truncated
  at the 5' end as many real tRNA reads are, with a few substitutions and short indels;
* per-base dwell from a gamma distribution (RNA004 translocates ~130 bases/s at 4 kHz), per-base
  level from the k-mer table (the k-mer centred on the base, 5'→3'), per-read scale, shift,
  drift and Gaussian noise, int16 ADC with a per-read calibration;
* direct-RNA order: the 3' end enters the pore first, so the signal runs 3'→5' while SEQ and the
  alignment run 5'→3';
* dorado's tags: ``mv`` (stride, then one 0/1 per stride block, 1 where a base starts, in signal
  order), ``ns`` (samples in the read), ``ts`` (leading samples trimmed before the first base);
* planted truth: the read's class shifts the levels and dwells of the few bases around the
  anchor (the A of CCA) and its charging level in [0, 1] scales that change. Nothing else in a
  read depends on the class. The truth table also gives each read's true dwell per base
  (samples, 5'→3'), against which extraction's base boundaries can be checked.

Real data also holds unmapped, secondary and supplementary records, reads whose signal never
reached the POD5 and records without a move table; the simulator writes all of them, and the
truth table says which is which.

This module plans the run (references, class effects, each read's fate) from its knobs
(:class:`~kennel.sim.trna_settings.TrnaSimulation`); one read is made in
:mod:`kennel.sim.trna_reads` and the files are written by :mod:`kennel.sim.trna_files`.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import numpy as np
import pysam

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.io.kmers import BASES, KmerLevels, read_kmer_levels
from kennel.sim.trna_files import (
    SimulatedRead,
    is_gzipped,
    read_reference,
    write_bam,
    write_fasta,
    write_pod5,
    write_synthetic_kmer_table,
    write_truth,
)
from kennel.sim.trna_reads import mapped_read, unmapped_read
from kennel.sim.trna_settings import TrnaSimulation

# Dual-adapter layout of mature tRNA references in the field (5' splint adapter, 3' adapter
# with its poly(A) for the RNA004 ligation kit): sequences are facts of the protocol.
ADAPTER_5P = "CCTAAGAGCAAGAAGAAGCCTGGN"
ADAPTER_3P = "GGCTTCTTCTTGCTCTTCCAACCTTGCCTTAAAAAAAAAA"

CHEMISTRY_SEED = 20260101
# Why a read is not classifiable; "classifiable" reads have all of signal, moves and a primary
# alignment covering the anchor.
FATES = ("classifiable", "unmapped", "no_signal", "no_moves")


def simulate_trna(out_dir: str | Path, settings: TrnaSimulation) -> dict[str, Path]:
    """Write reference, k-mer table, and per sample a POD5, an indexed BAM and a truth TSV.

    Returns the written paths by role (``reference``, ``kmer_table``, ``{sample}.pod5``, ...).
    """
    settings.check()
    out_dir = Path(out_dir)
    given_table = None
    if settings.kmer_table is not None:
        given_table = read_kmer_levels(settings.kmer_table)
        if settings.k is not None and settings.k != given_table.k:
            raise KennelError(
                f"simulate trna: --k {settings.k} does not match --kmer-table "
                f"{settings.kmer_table} (k={given_table.k})"
            )
    rng = np.random.default_rng(settings.seed)
    references = (
        read_reference(settings.reference, settings.motif)
        if settings.reference is not None
        else _synthetic_references(rng, settings)
    )
    reference_path = out_dir / "reference.fa"
    gzipped = settings.kmer_table is not None and is_gzipped(settings.kmer_table)
    kmer_path = out_dir / ("kmer_levels.tsv.gz" if gzipped else "kmer_levels.tsv")
    outputs = {"reference": reference_path, "kmer_table": kmer_path}
    for sample in settings.samples:
        for suffix in ("pod5", "bam", "truth.tsv"):
            outputs[f"{sample}.{suffix}"] = out_dir / f"{sample}.{suffix}"
    paths = list(outputs.values())
    with atomic_outputs(*paths) as temporaries:
        temporary = dict(zip(outputs, temporaries, strict=True))
        write_fasta(temporary["reference"], references)
        if settings.kmer_table is not None:
            shutil.copyfile(settings.kmer_table, temporary["kmer_table"])
        else:
            write_synthetic_kmer_table(temporary["kmer_table"], rng, settings.k or 5)
        table = read_kmer_levels(temporary["kmer_table"])
        effects = _class_effects(settings)
        sample_seeds = np.random.SeedSequence(settings.seed).spawn(len(settings.samples))
        for sample, sample_seed in zip(settings.samples, sample_seeds, strict=True):
            reads = _simulate_reads(
                np.random.default_rng(sample_seed), sample, settings, references, table, effects
            )
            write_pod5(
                temporary[f"{sample}.pod5"], reads, sample, settings.sample_rate, settings.seed
            )
            write_bam(temporary[f"{sample}.bam"], reads, references, settings.stride)
            write_truth(temporary[f"{sample}.truth.tsv"], reads)
    # indexes are written after the atomic rename so they are never older than their data
    pysam.faidx(str(reference_path))
    for sample in settings.samples:
        pysam.index(str(outputs[f"{sample}.bam"]))
        outputs[f"{sample}.bai"] = Path(f"{outputs[f'{sample}.bam']}.bai")
    return outputs


# --- references and class effects -----------------------------------------------------------


def _synthetic_references(rng: np.random.Generator, settings: TrnaSimulation) -> dict[str, str]:
    """tRNA-like contigs: shared adapters around random GC-rich bodies ending in CCA."""
    references = {}
    while len(references) < settings.n_synthetic_references:
        length = int(rng.integers(68, 78))
        body = "".join(rng.choice(list(BASES), size=length, p=[0.22, 0.28, 0.3, 0.2]))
        molecule = ADAPTER_5P + body + "CCA" + ADAPTER_3P
        # the anchor must be unambiguous: the motif only at the junction
        if molecule.count(settings.motif.motif) != 1:
            continue
        name = f"tRNA-syn{len(references) + 1:02d}"
        references[name] = molecule
    return references


def _class_effects(settings: TrnaSimulation) -> dict[str, np.ndarray]:
    """Per class: level shift and dwell factor for each base in the anchor window.

    The effects are the chemistry, not the sample: they depend only on the class names, so a
    model trained on one simulation applies to another with any seed. Shifts are centred across
    classes, so no class is simply "louder" and the model has to read the shape of the change.
    """
    chemistry = sum(ord(c) * (i + 1) for i, c in enumerate(",".join(settings.classes)))
    rng = np.random.default_rng([CHEMISTRY_SEED, chemistry])
    width = 2 * settings.effect_half_width + 1
    shifts = rng.normal(0.0, settings.effect_level, size=(len(settings.classes), width))
    shifts -= shifts.mean(axis=0, keepdims=True)
    dwell = rng.uniform(0.0, settings.effect_dwell, size=(len(settings.classes), width))
    return {label: np.stack([shifts[i], dwell[i]]) for i, label in enumerate(settings.classes)}


# --- reads ----------------------------------------------------------------------------------


def _simulate_reads(
    rng: np.random.Generator,
    sample: str,
    settings: TrnaSimulation,
    references: dict[str, str],
    table: KmerLevels,
    effects: dict[str, np.ndarray],
) -> list[SimulatedRead]:
    anchored = {
        name: (seq, settings.motif.find(seq))
        for name, seq in references.items()
        if settings.motif.find(seq) is not None
    }
    names = sorted(anchored)
    n_unmapped = int(round(settings.reads * settings.unmapped_fraction))
    reads = []
    for index in range(settings.reads + n_unmapped):
        read_id = str(uuid.UUID(bytes=rng.bytes(16), version=4))
        if index >= settings.reads:
            reads.append(unmapped_read(rng, read_id, sample, settings, table))
            continue
        name = names[int(rng.integers(len(names)))]
        label = settings.classes[int(rng.integers(len(settings.classes)))]
        charging = float(rng.uniform(*settings.charging_range))
        reads.append(
            mapped_read(
                rng,
                read_id,
                sample,
                settings,
                name,
                *anchored[name],
                label,
                charging,
                table,
                effects,
            )
        )
    # fates that real runs have: signal lost before the POD5, a record without a move table
    for read in reads:
        if read.fate != "classifiable":
            continue
        draw = rng.random()
        if draw < settings.no_signal_fraction:
            read.fate, read.signal = "no_signal", None
        elif draw < settings.no_signal_fraction + settings.no_moves_fraction:
            read.fate, read.moves = "no_moves", None
    for read in reads:
        if read.reference is None:
            continue
        if rng.random() < settings.secondary_fraction:
            others = [n for n in references if n != read.reference]
            read.secondary_targets = [others[int(rng.integers(len(others)))]]
            read.n_secondary = 1
        if rng.random() < settings.supplementary_fraction:
            read.n_supplementary = 1
    return reads
