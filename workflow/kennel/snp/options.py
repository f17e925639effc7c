"""How to score variants: the options (and their check) and what a run reports."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from kennel.errors import KennelError
from kennel.feed import COMPILE_MODES
from kennel.snp.genome import REF_MISMATCH_MODES
from kennel.snp.stat_names import DEFAULT_STATS, PROFILE_STATS, STATS
from kennel.snp.vcf import ALT_MODES

logger = logging.getLogger(__name__)
MIX_DTYPES = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class ScoreOptions:
    """How to score; the defaults match ``config/config.yaml``'s ``snp.score``."""

    seq_len: int = 0  # 0: the model's own input length
    rc: bool = True
    shifts: tuple[int, ...] = (0,)
    cluster_pct: float = 0.1
    stats: tuple[str, ...] = DEFAULT_STATS
    untransform: bool = True
    unscale: bool = False  # divide by the targets' scale too (hound_snp does not)
    untransform_old: bool = False  # hound_snp -u: the earlier transforms (published Borzoi)
    indel_stitch: bool = False
    alts: str = "all"  # "first": only each record's first ALT, as hound_snp
    ref_mismatch: str = "error"
    per_model: bool = False  # with several models: also write each model's scores
    batch_size: int = 8
    mix_dtype: str = "float32"
    compile: str = "auto"
    compile_threshold: int = 1500
    device: str = "auto"
    inductor_cache: str | None = None

    def check(self) -> ScoreOptions:
        problems = []
        if self.seq_len < 0:
            problems.append(f"seq_len={self.seq_len}: must be 0 (the model's) or positive")
        if not self.shifts or len(set(self.shifts)) != len(self.shifts):
            problems.append(f"shifts={list(self.shifts)}: need distinct integers")
        if not 0 <= self.cluster_pct < 1:
            problems.append(f"cluster_pct={self.cluster_pct}: must be within [0, 1)")
        unknown = [stat for stat in self.stats if stat not in STATS]
        if not self.stats or unknown or len(set(self.stats)) != len(self.stats):
            problems.append(f"stats={list(self.stats)}: choose distinct ones of {', '.join(STATS)}")
        if self.untransform_old and not self.untransform:
            problems.append("untransform_old: undoes the old transforms, so needs untransform")
        if self.ref_mismatch not in REF_MISMATCH_MODES:
            problems.append(
                f"ref_mismatch={self.ref_mismatch!r}: one of {', '.join(REF_MISMATCH_MODES)}"
            )
        if self.alts not in ALT_MODES:
            problems.append(f"alts={self.alts!r}: one of {', '.join(ALT_MODES)}")
        if self.per_model and set(self.stats) & set(PROFILE_STATS):
            problems.append("per_model: not with the REF/ALT profile stats (one copy is plenty)")
        if self.batch_size < 1:
            problems.append(f"batch_size={self.batch_size}: must be at least 1")
        if self.mix_dtype not in MIX_DTYPES:
            problems.append(f"mix_dtype={self.mix_dtype!r}: one of {', '.join(MIX_DTYPES)}")
        if self.compile not in COMPILE_MODES:
            problems.append(f"compile={self.compile!r}: one of {', '.join(COMPILE_MODES)}")
        if problems:
            raise KennelError(f"score options: {problems[0]}")
        return self

    def scoring_fields(self) -> dict:
        """The options that change scores (a resumed or merged run must agree on these)."""
        return {
            key: getattr(self, key)
            for key in (
                "rc",
                "shifts",
                "cluster_pct",
                "stats",
                "untransform",
                "unscale",
                "untransform_old",
                "indel_stitch",
                "alts",
                "ref_mismatch",
                "per_model",
                "mix_dtype",
            )
        }


@dataclass
class ScoreReport:
    """What a run did and where its time went."""

    variants: int = 0
    skipped: int = 0  # REF mismatches left out
    unscored_alleles: int = 0  # ALTs with no sequence to score
    clusters: int = 0
    resumed_clusters: int = 0
    batches: int = 0
    batch_size: int = 0
    compiled: bool = False
    wall_seconds: float = 0.0
    warmup_seconds: float = 0.0  # compiling and the first shape, before the first cluster
    forward_seconds: float = 0.0  # inside the model calls (on CUDA: the GPU's, by CUDA events)
    copy_in_seconds: float | None = None  # on CUDA: windows to the device (side stream, events)

    @property
    def outside_forward_share(self) -> float:
        """Share of the wall time spent anywhere but inside the model's forward."""
        if self.wall_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - self.forward_seconds / self.wall_seconds)

    @property
    def variants_per_second(self) -> float:
        return self.variants / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def steady_variants_per_second(self) -> float:
        """The rate once warmed up: what a longer job of the same model approaches."""
        steady = self.wall_seconds - self.warmup_seconds
        return self.variants / steady if steady > 0 else 0.0


def autocast(device: torch.device, mix_dtype: str):
    dtype = MIX_DTYPES[mix_dtype]
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype is not None)
