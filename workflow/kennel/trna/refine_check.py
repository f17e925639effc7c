"""``kennel refine-check``: which base-boundary mode to extract with, measured on a sample's reads.

For N reads drawn from a sample, each refine mode (off, checked, always) extracts the same
reads; the report gives, per mode, the time per read, the share of refined maps kept, and how
far the window's base boundaries and dwells move from the move table's (off). Real move tables
are coarser than the simulator's: this is the evidence for ``trna.features.refine`` on real data.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import escapepod
import numpy as np

from kennel.errors import KennelError
from kennel.io.pod5 import Pod5Set
from kennel.trna.extract import extract_batch, read_inputs
from kennel.trna.features import REFINE_MODES, FeatureBatch, FeatureSpec

NEAR_SAMPLES = 2  # a boundary this close to the move table's counts as agreeing


@dataclass(frozen=True)
class ModeResult:
    mode: str
    reads: int
    seconds_per_read: float
    maps_kept: float | None  # share of refined maps kept (None: no DP ran)
    boundary_shift: float  # mean |boundary - move table's| in the window (samples)
    boundaries_near: float  # share within NEAR_SAMPLES of the move table's
    dwell_r: float  # Pearson r of the window's dwells against the move table's

    def line(self) -> str:
        kept = "n/a" if self.maps_kept is None else f"{100 * self.maps_kept:.1f}%"
        return (
            f"{self.mode}\t{self.reads}\t{1e3 * self.seconds_per_read:.3f}\t{kept}\t"
            f"{self.boundary_shift:.2f}\t{100 * self.boundaries_near:.1f}%\t{self.dwell_r:.4f}"
        )


HEADER = "mode\treads\tms_per_read\tmaps_kept\tmean_boundary_shift\tboundaries_within_2\tdwell_r"


def sample_reads(bam, reference, spec: FeatureSpec, n_reads: int, seed: int) -> list:
    """Up to ``n_reads`` extractable reads of ``bam``, drawn at random, in BAM order."""
    candidates = [read for reads, _ in read_inputs(bam, reference, spec) for read in reads]
    if not candidates:
        raise KennelError(f"{bam}: no read with the anchor motif aligned to check refinement on")
    if len(candidates) <= n_reads:
        return candidates
    chosen = sorted(random.Random(seed).sample(range(len(candidates)), n_reads))
    return [candidates[i] for i in chosen]


def refine_check(
    bam: str | os.PathLike,
    pod5s: Sequence[str | os.PathLike],
    reference: str | os.PathLike,
    kmer_table: str | os.PathLike,
    spec: FeatureSpec,
    n_reads: int = 500,
    seed: int = 1,
    rounds: int = 2,
) -> list[ModeResult]:
    """Extract the same sampled reads in every refine mode; compare with the move table's map.

    Each mode runs ``rounds`` times, alternating, and keeps its fastest time (the machine may
    be shared).
    """
    reads = sample_reads(bam, reference, spec, n_reads, seed)
    pod5 = Pod5Set([str(p) for p in pod5s], index_reads=False)
    table = escapepod.KmerTable.from_file(str(kmer_table))
    batches: dict[str, FeatureBatch] = {}
    best = dict.fromkeys(REFINE_MODES, np.inf)
    for _ in range(rounds):
        for mode in REFINE_MODES:
            began = time.perf_counter()
            batch = extract_batch(reads, [], pod5, table, dataclasses.replace(spec, refine=mode))
            best[mode] = min(best[mode], time.perf_counter() - began)
            batches[mode] = batch
    moves = batches["off"]
    if len(moves) == 0:
        raise KennelError(f"{bam}: none of the sampled reads could be extracted")
    results = []
    for mode in REFINE_MODES:
        batch = batches[mode]
        if not np.array_equal(batch.read_id, moves.read_id):
            raise KennelError(f"refine-check: mode {mode} extracted other reads than off")
        shift = np.abs(batch.boundaries.astype(np.int64) - moves.boundaries).astype(np.float64)
        dwell = np.diff(batch.boundaries, axis=1).ravel().astype(np.float64)
        dwell_moves = np.diff(moves.boundaries, axis=1).ravel().astype(np.float64)
        accepted = batch.tallies.get("refine_accepted", 0)
        tried = accepted + batch.tallies.get("refine_rejected", 0)
        results.append(
            ModeResult(
                mode=mode,
                reads=len(batch),
                seconds_per_read=best[mode] / len(reads),
                maps_kept=accepted / tried if tried else None,
                boundary_shift=float(shift.mean()),
                boundaries_near=float((shift <= NEAR_SAMPLES).mean()),
                dwell_r=float(np.corrcoef(dwell, dwell_moves)[0, 1])
                if dwell.std() > 0 and dwell_moves.std() > 0
                else 1.0,
            )
        )
    return results
