"""The knobs of ``kennel simulate trna`` (:class:`TrnaSimulation`): read by the run's plan
(:mod:`kennel.sim.trna`) and by the making of each read (:mod:`kennel.sim.trna_reads`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kennel.errors import KennelError
from kennel.trna.anchor import AnchorMotif


@dataclass(frozen=True)
class TrnaSimulation:
    """Knobs of the tRNA simulation. Defaults give a realistic, quick demo."""

    samples: tuple[str, ...] = ("demo",)
    reads: int = 1000
    seed: int = 1
    reference: Path | None = None
    kmer_table: Path | None = None
    k: int | None = None  # synthetic table: 5; a given table: must match it when set
    classes: tuple[str, ...] = ("Ala", "Gly", "Leu", "Phe")
    n_synthetic_references: int = 12
    stride: int = 5
    sample_rate: int = 4000
    mean_dwell: float = 30.0
    dwell_shape: float = 2.5
    noise: float = 0.25
    # class signal: bases anchor-3 .. anchor+3 (SEQ coordinates)
    effect_half_width: int = 3
    effect_level: float = 0.9
    effect_dwell: float = 1.5
    charging_range: tuple[float, float] = (0.5, 1.0)
    # fractions of reads that real runs also have
    unmapped_fraction: float = 0.03
    no_signal_fraction: float = 0.02
    no_moves_fraction: float = 0.01
    secondary_fraction: float = 0.04
    supplementary_fraction: float = 0.02
    motif: AnchorMotif = field(default_factory=AnchorMotif)

    def check(self) -> None:
        if not self.samples:
            raise KennelError("simulate trna: --samples must name at least one sample")
        if len(set(self.samples)) != len(self.samples):
            raise KennelError(f"simulate trna: --samples has duplicates: {','.join(self.samples)}")
        if self.reads < 1:
            raise KennelError(f"simulate trna: --reads must be positive, got {self.reads}")
        if len(self.classes) < 2:
            raise KennelError("simulate trna: --classes needs at least two class labels")
        if len(set(self.classes)) != len(self.classes):
            raise KennelError(f"simulate trna: --classes has duplicates: {','.join(self.classes)}")
        if self.k is not None and not 3 <= self.k <= 9:
            raise KennelError(f"simulate trna: --k must be between 3 and 9, got {self.k}")
        if self.reference is not None and not Path(self.reference).is_file():
            raise KennelError(f"simulate trna: --reference {self.reference}: file not found")
        if self.kmer_table is not None and not Path(self.kmer_table).is_file():
            raise KennelError(f"simulate trna: --kmer-table {self.kmer_table}: file not found")
