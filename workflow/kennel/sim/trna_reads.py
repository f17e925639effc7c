"""One simulated tRNA read, as :mod:`kennel.sim.trna`'s generative model makes it: the molecule
cut and mutated, its levels and dwells (the class effect planted around the anchor), and the
raw signal with dorado's move table, in direct-RNA order (3'->5')."""

from __future__ import annotations

import numpy as np
import pysam

from kennel.io.kmers import BASES, KmerLevels, expected_levels
from kennel.sim.trna_files import SimulatedRead
from kennel.sim.trna_settings import TrnaSimulation


def mapped_read(
    rng: np.random.Generator,
    read_id: str,
    sample: str,
    settings: TrnaSimulation,
    reference_name: str,
    reference: str,
    anchor: int,
    label: str,
    charging: float,
    table: KmerLevels,
    effects: dict[str, np.ndarray],
) -> SimulatedRead:
    # many tRNA reads stop short of the 5' end; the 3' adapter is what gets ligated and read
    start = 0 if rng.random() < 0.4 else int(rng.integers(0, max(1, anchor - 30)))
    end = len(reference) - int(rng.integers(0, 4))
    protected = range(
        anchor - settings.effect_half_width - 1, anchor + settings.effect_half_width + 2
    )
    sequence, cigar, anchor_in_read = _mutate(rng, reference, start, end, anchor, protected)
    if rng.random() < 0.15:  # untemplated 5' bases, soft-clipped by the aligner
        clip = "".join(rng.choice(list(BASES), size=int(rng.integers(1, 6))))
        sequence = clip + sequence
        anchor_in_read += len(clip)
        cigar = [(pysam.CSOFT_CLIP, len(clip)), *cigar]
    levels = np.asarray(expected_levels(sequence, table), dtype=np.float64)
    dwell_factor = np.ones(len(sequence))
    shift, dwell_gain = effects[label]
    window = np.arange(-settings.effect_half_width, settings.effect_half_width + 1) + anchor_in_read
    levels[window] += charging * shift
    dwell_factor[window] += charging * dwell_gain
    signal, calibration, moves, trimmed, dwell = _signal(rng, settings, levels, dwell_factor)
    return SimulatedRead(
        read_id=read_id,
        sample=sample,
        fate="classifiable",
        reference=reference_name,
        label=label,
        charging=round(charging, 4),
        anchor_reference_position=anchor,
        sequence=sequence,
        qualities=rng.integers(8, 40, size=len(sequence)).astype(np.uint8),
        cigar=cigar,
        reference_start=start,
        signal=signal,
        calibration=calibration,
        moves=moves,
        trimmed_samples=trimmed,
        n_samples=len(signal),
        dwell=dwell,
    )


def _mutate(
    rng: np.random.Generator,
    reference: str,
    start: int,
    end: int,
    anchor: int,
    protected: range,
) -> tuple[str, list[tuple[int, int]], int]:
    """Read bases for reference[start:end] with ~1% substitutions and at most one short indel
    away from the anchor; returns (sequence, cigar, anchor index in the read)."""
    bases: list[str] = []
    ops: list[int] = []
    anchor_in_read = -1
    indel_at = int(rng.integers(start + 2, end - 2)) if rng.random() < 0.3 else -1
    if indel_at in protected:
        indel_at = -1
    indel_kind = pysam.CINS if rng.random() < 0.5 else pysam.CDEL
    indel_length = int(rng.integers(1, 3))
    position = start
    while position < end:
        if position == indel_at and indel_kind == pysam.CDEL:
            ops.extend([pysam.CDEL] * indel_length)
            position += indel_length
            continue
        if position == indel_at:
            bases.extend(rng.choice(list(BASES), size=indel_length))
            ops.extend([pysam.CINS] * indel_length)
        base = reference[position]
        if base not in BASES:
            base = BASES[int(rng.integers(4))]
        elif position not in protected and rng.random() < 0.01:
            base = BASES[(BASES.index(base) + int(rng.integers(1, 4))) % 4]
        if position == anchor:
            anchor_in_read = len(bases)
        bases.append(base)
        ops.append(pysam.CMATCH)
        position += 1
    cigar: list[tuple[int, int]] = []
    for op in ops:
        if cigar and cigar[-1][0] == op:
            cigar[-1] = (op, cigar[-1][1] + 1)
        else:
            cigar.append((op, 1))
    return "".join(bases), cigar, anchor_in_read


def _signal(
    rng: np.random.Generator,
    settings: TrnaSimulation,
    levels: np.ndarray,
    dwell_factor: np.ndarray,
) -> tuple[np.ndarray, tuple[float, float], np.ndarray, int, np.ndarray]:
    """Raw ADC signal (3'→5') for per-base levels given 5'→3', dorado's move table, the trimmed
    sample count and the true dwell of each base (5'→3')."""
    stride = settings.stride
    levels_time = levels[::-1]
    factor_time = dwell_factor[::-1]
    mean_dwell = settings.mean_dwell * rng.uniform(0.8, 1.25)  # per-read translocation speed
    dwell = rng.gamma(settings.dwell_shape, mean_dwell / settings.dwell_shape, size=len(levels))
    dwell = np.maximum(2, np.round(dwell * factor_time)).astype(np.int64)
    trimmed = int(rng.integers(60, 160)) * stride
    starts = trimmed + np.concatenate([[0], np.cumsum(dwell)[:-1]])
    # the basecaller sees boundaries at stride resolution, with a little jitter
    blocks = np.round((starts - trimmed) / stride).astype(np.int64)
    blocks += (rng.random(len(blocks)) < 0.15) * rng.choice([-1, 1], size=len(blocks))
    blocks[0] = 0
    for i in range(1, len(blocks)):
        blocks[i] = max(blocks[i], blocks[i - 1] + 1)
    n_blocks = max(int(blocks[-1]) + 1, -(-int(dwell.sum()) // stride))
    n_samples = trimmed + n_blocks * stride
    dwell[-1] += n_samples - (trimmed + int(dwell.sum()))  # last base ends at ns
    moves = np.zeros(n_blocks, dtype=np.int8)
    moves[blocks] = 1

    scale = rng.normal(15.0, 1.5)
    shift = rng.normal(90.0, 4.0)
    per_sample = np.repeat(levels_time, dwell)
    lead = rng.normal(-1.8, 0.3, size=trimmed)  # adapter/stall before the first base
    normalised = np.concatenate([lead, per_sample])
    drift = rng.normal(0.0, 0.2) * np.linspace(0.0, 1.0, n_samples)
    picoamps = shift + scale * (normalised + drift + rng.normal(0.0, settings.noise, n_samples))
    offset = float(rng.uniform(-260.0, -220.0))
    adc_scale = float(rng.uniform(0.15, 0.2))
    adc = np.clip(np.round(picoamps / adc_scale - offset), -2048, 2047).astype(np.int16)
    return adc, (offset, adc_scale), moves, trimmed, dwell[::-1].copy()


def unmapped_read(
    rng: np.random.Generator,
    read_id: str,
    sample: str,
    settings: TrnaSimulation,
    table: KmerLevels,
) -> SimulatedRead:
    """A read that maps nowhere (adapter dimer, fragment): signal and moves, no alignment."""
    sequence = "".join(rng.choice(list(BASES), size=int(rng.integers(40, 120))))
    levels = np.asarray(expected_levels(sequence, table))
    signal, calibration, moves, trimmed, dwell = _signal(
        rng, settings, levels, np.ones(len(sequence))
    )
    return SimulatedRead(
        read_id=read_id,
        sample=sample,
        fate="unmapped",
        reference=None,
        label=None,
        charging=None,
        anchor_reference_position=None,
        sequence=sequence,
        qualities=rng.integers(3, 15, size=len(sequence)).astype(np.uint8),
        cigar=[],
        reference_start=-1,
        signal=signal,
        calibration=calibration,
        moves=moves,
        trimmed_samples=trimmed,
        n_samples=len(signal),
        dwell=dwell,
    )
