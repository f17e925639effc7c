"""Simulated inputs for the SNP arm: genome, VCF, targets, a motif model and the truth.

The genome is random sequence scrubbed of accidental motif occurrences, then given occurrences
of the motif model's motifs (both strands) at known places. Variants either hit a planted
occurrence, restore a planted near-miss (one base off a motif), or land elsewhere. Each alt
allele's label in ``truth.tsv`` comes from rescanning the reference and alternate sequence, not
from the intent it was generated with, so the labels hold even where chance interferes.

Every variant and every planted site owns one ``SLOT``-bp slot of the genome, which keeps VCF
records from overlapping and each site hit by at most one record.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import numpy as np
import pysam

from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.models.bundle import save_bundle
from kennel.models.motif import make_motif_model, reverse_complement
from kennel.sim.snp_files import (
    OUTPUTS,
    SimulatedVariant,
    write_fasta,
    write_targets,
    write_truth,
    write_vcf,
)

SLOT = 32
BIN_SIZE = 32
MIN_CHROMOSOME_LENGTH = 1_000
N_RUN_LENGTH = 50
CLUSTER_RADIUS_SLOTS = 8  # +-256 bp: a scorer sharing windows has neighbours to share with
BASES = "ACGT"

# Share of the non-edge variants per (intended effect, kind); the rest are neutral SNVs.
VARIANT_MIX = (
    ("motif_break", "snv", 0.11),
    ("motif_break", "deletion", 0.015),
    ("motif_break", "insertion", 0.01),
    ("motif_break", "multiallelic", 0.015),
    ("motif_create", "snv", 0.09),
    ("motif_create", "multiallelic", 0.01),
    ("neutral", "deletion", 0.03),
    ("neutral", "insertion", 0.03),
    ("neutral", "multiallelic", 0.02),
)


def simulate_snp(
    out_dir: str | os.PathLike,
    *,
    seed: int = 1,
    n_chromosomes: int = 3,
    chromosome_length: int = 50_000,
    n_variants: int = 300,
    seq_len: int = 2048,
) -> dict[str, Path]:
    """Write a genome, a VCF, a targets file, a motif model bundle and the truth into ``out_dir``.

    Returns the written paths keyed by ``OUTPUTS``' names. All files appear together or not
    at all; the same seed writes the same files (the bundle differs only in its timestamp).
    """
    _check_arguments(n_chromosomes, chromosome_length, n_variants, seq_len)
    rng = np.random.default_rng(seed)
    model, hyperparameters = make_motif_model(seq_len, bin_size=BIN_SIZE)
    patterns = [p for motif in model.motifs for p in (motif, reverse_complement(motif))]

    chromosomes = [
        _random_chromosome(rng, chromosome_length, patterns) for _ in range(n_chromosomes)
    ]
    n_slots = chromosome_length // SLOT
    free = np.ones(n_chromosomes * n_slots, dtype=bool)
    n_run_slots = [_place_n_run(rng, sequence, n_slots) for sequence in chromosomes]
    for chrom, first_slot in enumerate(n_run_slots):
        free[chrom * n_slots + first_slot : chrom * n_slots + first_slot + 2] = False

    n_edge = min(2 * n_chromosomes, n_variants // 10)
    edge_slots = [
        chrom * n_slots + (0 if end == 0 else n_slots - 1)
        for chrom in range(n_chromosomes)
        for end in (0, 1)
    ][:n_edge]
    free[edge_slots] = False
    roles = _plan_roles(n_variants - n_edge)
    inner_slots = _clustered_slots(rng, free, n_slots, len(roles))
    roles = [roles[i] for i in rng.permutation(len(roles))]

    variants = []
    for number, slot in enumerate(edge_slots):
        chrom, index = divmod(slot, n_slots)
        if chrom == 0:  # the very first and last base: windows must pad past both ends
            pos0 = 0 if number == 0 else chromosome_length - 1
        else:
            pos0 = index * SLOT + int(rng.integers(SLOT))
        ref = chr(chromosomes[chrom][pos0])
        variants.append(SimulatedVariant(chrom, pos0, ref, (_other_base(rng, ref),)))
    for slot, (intent, kind) in zip(inner_slots, roles, strict=True):
        chrom, index = divmod(slot, n_slots)
        variants.append(
            _make_variant(rng, chromosomes[chrom], chrom, index * SLOT, intent, kind, patterns)
        )
    n_extra_sites = min(int(free.sum()), max(2, len(variants) // 10))
    for slot in rng.choice(np.flatnonzero(free), size=n_extra_sites, replace=False):
        chrom, index = divmod(int(slot), n_slots)
        _plant_site(rng, chromosomes[chrom], index * SLOT, patterns)

    texts = [sequence.decode() for sequence in chromosomes]
    for variant in variants:
        variant.effects = tuple(
            _effect(texts[variant.chrom], variant.pos0, variant.ref, alt, patterns)
            for alt in variant.alts
        )
    variants.sort(key=lambda v: (v.chrom, v.pos0))
    for number, variant in enumerate(variants, start=1):
        variant.id = f"rs{number}"
    for sequence, first_slot in zip(chromosomes, n_run_slots, strict=True):
        _soft_mask(rng, sequence, avoid=(first_slot * SLOT, (first_slot + 2) * SLOT))

    names = [f"chr{i + 1}" for i in range(n_chromosomes)]
    out_dir = Path(out_dir)
    paths = {key: out_dir / name for key, name in OUTPUTS.items()}
    with atomic_outputs(*paths.values()) as temporaries:
        temporary = dict(zip(paths, temporaries, strict=True))
        write_fasta(temporary["genome"], names, chromosomes)
        pysam.faidx(str(temporary["genome"]), "--fai-idx", str(temporary["genome_index"]))
        write_vcf(temporary["variants"], names, chromosomes, variants)
        pysam.tabix_index(
            str(temporary["variants"]),
            preset="vcf",
            index=str(temporary["variants_index"]),
            force=True,
        )
        write_targets(temporary["targets"], model)
        write_truth(temporary["truth"], names, variants)
        metadata = {
            "kind": "sequence_to_coverage",
            "layout": "length_tracks",
            "alphabet": BASES,
            "seq_len": seq_len,
            "bin_size": BIN_SIZE,
            "crop_bins": model.crop_bins,
            "target_length": model.target_length,
            "n_targets": len(model.target_ids),
            "target_ids": model.target_ids,
            "strand_pair": model.strand_pair,
            "motifs": model.motifs,
            "simulation_seed": seed,
        }
        save_bundle(temporary["model"], model, hyperparameters, metadata=metadata)
    return paths


def _check_arguments(
    n_chromosomes: int, chromosome_length: int, n_variants: int, seq_len: int
) -> None:
    for name, value in (
        ("n_chromosomes", n_chromosomes),
        ("chromosome_length", chromosome_length),
        ("n_variants", n_variants),
        ("seq_len", seq_len),
    ):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
            raise KennelError(f"{name}={value!r}: must be a positive integer")
    if chromosome_length < MIN_CHROMOSOME_LENGTH:
        raise KennelError(
            f"chromosome_length={chromosome_length}: must be at least {MIN_CHROMOSOME_LENGTH} bp"
        )
    if seq_len % BIN_SIZE:
        raise KennelError(f"seq_len={seq_len}: must be a multiple of the bin size ({BIN_SIZE})")
    # One slot per variant; two slots per chromosome hold its run of N.
    capacity = n_chromosomes * (chromosome_length // SLOT - 2)
    if n_variants > capacity:
        raise KennelError(
            f"n_variants={n_variants}: more than {n_chromosomes} chromosome(s) of "
            f"{chromosome_length} bp can hold (at most {capacity}, one per {SLOT} bp)"
        )


def _random_chromosome(rng: np.random.Generator, length: int, patterns: list[str]) -> bytearray:
    """Uniform random bases with every chance occurrence of a motif broken."""
    codes = rng.integers(0, 4, size=length)
    sequence = bytearray(np.frombuffer(BASES.encode(), dtype=np.uint8)[codes].tobytes())
    while hits := [i for p in patterns for i in _find_all(sequence.decode(), p)]:
        for start in hits:
            sequence[start] = ord(_other_base(rng, sequence[start]))
    return sequence


def _place_n_run(rng: np.random.Generator, sequence: bytearray, n_slots: int) -> int:
    """Fill two slots in the middle third with a run of N; return the first of them."""
    first_slot = int(rng.integers(n_slots // 3, 2 * n_slots // 3))
    start = first_slot * SLOT + (2 * SLOT - N_RUN_LENGTH) // 2
    sequence[start : start + N_RUN_LENGTH] = b"N" * N_RUN_LENGTH
    return first_slot


def _plan_roles(count: int) -> list[tuple[str, str]]:
    roles = [
        (intent, kind) for intent, kind, share in VARIANT_MIX for _ in range(round(share * count))
    ][:count]
    return roles + [("neutral", "snv")] * (count - len(roles))


def _clustered_slots(
    rng: np.random.Generator, free: np.ndarray, n_slots: int, count: int
) -> list[int]:
    """Take ``count`` free slots, in clusters of up to 8 within a few hundred bp; mark them used."""
    chosen: list[int] = []
    while len(chosen) < count:
        centre = int(rng.choice(np.flatnonzero(free)))
        size = 1 if rng.random() < 0.4 else int(rng.integers(2, 9))
        size = min(size, count - len(chosen))
        chrom_start = centre // n_slots * n_slots
        low = max(chrom_start, centre - CLUSTER_RADIUS_SLOTS)
        high = min(chrom_start + n_slots, centre + CLUSTER_RADIUS_SLOTS + 1)
        neighbours = [slot for slot in range(low, high) if free[slot] and slot != centre]
        members = [centre]
        if size > 1 and neighbours:
            picked = rng.choice(neighbours, size=min(size - 1, len(neighbours)), replace=False)
            members += [int(slot) for slot in picked]
        free[members] = False
        chosen += members
    return chosen


def _make_variant(
    rng: np.random.Generator,
    sequence: bytearray,
    chrom: int,
    slot_start: int,
    intent: str,
    kind: str,
    patterns: list[str],
) -> SimulatedVariant:
    """Build one record inside the slot at ``slot_start``, planting the site it needs."""
    if intent == "motif_break":
        site_start, pattern = _plant_site(rng, sequence, slot_start, patterns)
        if kind == "deletion":
            deleted = int(rng.integers(1, 4))
            anchor = site_start + int(rng.integers(1, len(pattern) - deleted + 1)) - 1
            ref = sequence[anchor : anchor + deleted + 1].decode()
            return SimulatedVariant(chrom, anchor, ref, (ref[0],))
        if kind == "insertion":
            anchor = site_start + int(rng.integers(len(pattern) - 1))
            ref = chr(sequence[anchor])
            return SimulatedVariant(chrom, anchor, ref, (ref + _random_bases(rng, 1, 3),))
        pos0 = site_start + int(rng.integers(len(pattern)))
        return SimulatedVariant(
            chrom, pos0, chr(sequence[pos0]), _substitutions(rng, sequence[pos0], kind)
        )
    if intent == "motif_create":
        site_start, pattern = _plant_site(rng, sequence, slot_start, patterns)
        offset = int(rng.integers(len(pattern)))
        pos0 = site_start + offset
        sequence[pos0] = ord(_other_base(rng, sequence[pos0]))  # one base off: a near-miss
        alts = (pattern[offset],)
        if kind == "multiallelic":
            alts += (_other_base(rng, sequence[pos0], pattern[offset]),)
        return SimulatedVariant(chrom, pos0, chr(sequence[pos0]), alts)
    if kind == "deletion":
        deleted = int(rng.integers(1, 6))
        anchor = slot_start + int(rng.integers(SLOT - deleted))
        ref = sequence[anchor : anchor + deleted + 1].decode()
        return SimulatedVariant(chrom, anchor, ref, (ref[0],))
    pos0 = slot_start + int(rng.integers(SLOT))
    ref = chr(sequence[pos0])
    if kind == "insertion":
        return SimulatedVariant(chrom, pos0, ref, (ref + _random_bases(rng, 1, 5),))
    return SimulatedVariant(chrom, pos0, ref, _substitutions(rng, sequence[pos0], kind))


def _plant_site(
    rng: np.random.Generator, sequence: bytearray, slot_start: int, patterns: list[str]
) -> tuple[int, str]:
    """Write a random motif, on a random strand, inside the slot; return its start and pattern."""
    pattern = patterns[int(rng.integers(len(patterns)))]
    # A 2-bp margin keeps the site clear of its neighbours and leaves room for an anchor base.
    site_start = slot_start + int(rng.integers(2, SLOT - len(pattern) - 1))
    sequence[site_start : site_start + len(pattern)] = pattern.encode()
    return site_start, pattern


def _substitutions(rng: np.random.Generator, ref: int, kind: str) -> tuple[str, ...]:
    first = _other_base(rng, ref)
    if kind != "multiallelic":
        return (first,)
    return (first, _other_base(rng, ref, first))


def _other_base(rng: np.random.Generator, base: int | str, *also_not: str) -> str:
    excluded = {chr(base) if isinstance(base, int) else base, *also_not}
    choices = [b for b in BASES if b not in excluded]
    return choices[int(rng.integers(len(choices)))]


def _random_bases(rng: np.random.Generator, shortest: int, longest: int) -> str:
    length = int(rng.integers(shortest, longest + 1))
    return "".join(BASES[i] for i in rng.integers(0, 4, size=length))


def _find_all(text: str, pattern: str) -> list[int]:
    """Start of every occurrence, overlapping ones included."""
    starts = []
    start = text.find(pattern)
    while start != -1:
        starts.append(start)
        start = text.find(pattern, start + 1)
    return starts


def _effect(text: str, pos0: int, ref: str, alt: str, patterns: list[str]) -> str:
    """Label an alt allele by the exact motif occurrences it removes or adds."""
    margin = max(len(p) for p in patterns) - 1
    left = text[max(0, pos0 - margin) : pos0]
    right = text[pos0 + len(ref) : pos0 + len(ref) + margin]
    before = [len(_find_all(left + ref + right, p)) for p in patterns]
    after = [len(_find_all(left + alt + right, p)) for p in patterns]
    if any(a < b for a, b in zip(after, before, strict=True)):
        return "motif_break"
    if any(a > b for a, b in zip(after, before, strict=True)):
        return "motif_create"
    return "neutral"


def _soft_mask(rng: np.random.Generator, sequence: bytearray, avoid: tuple[int, int]) -> None:
    """Lowercase two repeat-like stretches, away from the N run (which stays uppercase)."""
    to_lower = bytes.maketrans(b"ACGT", b"acgt")
    longest = min(400, len(sequence) // 10)
    for _ in range(2):
        length = int(rng.integers(longest // 4, longest + 1))
        start = int(rng.integers(len(sequence) - length))
        if start < avoid[1] and start + length > avoid[0]:
            start = avoid[1] if avoid[1] + length <= len(sequence) else avoid[0] - length
        sequence[start : start + length] = sequence[start : start + length].translate(to_lower)
