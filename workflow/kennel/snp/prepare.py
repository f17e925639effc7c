"""Every input read and checked, and the models built, before any output exists."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from kennel.errors import KennelError
from kennel.feed import resolve_device
from kennel.snp.clusters import Cluster, cluster_variants
from kennel.snp.genome import check_against_genome
from kennel.snp.model import SequenceModel, load_sequence_model
from kennel.snp.options import ScoreOptions, autocast
from kennel.snp.stat_names import PROFILE_STATS
from kennel.snp.targets import Targets, read_targets
from kennel.snp.vcf import Variant
from kennel.snp.vcf import read_variants as read_vcf

logger = logging.getLogger(__name__)


@dataclass
class Prepared:
    """Inputs read and checked; the models built, on their device, with output shapes checked."""

    models: list[SequenceModel]  # replicates: same input and output layout, scores averaged
    targets: Targets
    variants: list[Variant]
    keep: np.ndarray
    clusters: list[Cluster]
    device: torch.device
    genome: Path
    options: ScoreOptions
    unscored_alleles: int = 0  # ALTs with no sequence (symbolic, '*', '.'): no row

    @property
    def model(self) -> SequenceModel:
        """The first model: what every model shares (seq_len, stride, output length)."""
        return self.models[0]

    @property
    def rows(self) -> list[int]:
        """Variant indices that get a row of scores, in VCF order."""
        return [int(i) for i in np.flatnonzero(self.keep)]

    @property
    def row_starts(self) -> np.ndarray:
        """Output row of each cluster's first scored variant (plus the total at the end)."""
        counts = [int(self.keep[list(cluster.members)].sum()) for cluster in self.clusters]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    @property
    def score_track_ids(self) -> list[str]:
        rows = self.targets.collapsed_rows
        return [self.targets.identifier[row] for row in rows]

    @property
    def score_track_labels(self) -> list[str]:
        rows = self.targets.collapsed_rows
        return [self.targets.description[row] for row in rows]


def model_paths(model) -> list[Path]:
    """One model path or several (replicates) as a list."""
    if isinstance(model, str | os.PathLike):
        return [Path(model)]
    paths = [Path(path) for path in model]
    if not paths:
        raise KennelError("no model given")
    return paths


def prepare(
    vcf: str | os.PathLike,
    genome: str | os.PathLike,
    model: str | os.PathLike | Sequence[str | os.PathLike],
    targets: str | os.PathLike | None,
    options: ScoreOptions,
    max_variants: int | None = None,
    params: str | os.PathLike | None = None,
) -> Prepared:
    """Read and check every input before any output exists (each error is one line).

    ``model`` is one model or several replicates (same input length and output layout): each
    window is encoded once and run through every model, and the scores are averaged. Keras
    ``.h5`` models take their baskerville ``params`` file (one for all replicates, as hound_snp).
    """
    options = options.check()
    device = resolve_device(options.device)
    if options.mix_dtype == "bfloat16":
        logger.warning(
            "mix_dtype bfloat16 keeps 8 bits of mantissa: small score differences blur; "
            "measure the effect with kennel snp-precision"
        )
    paths = model_paths(model)
    models = [load_sequence_model(path, options.seq_len, params) for path in paths]
    first = models[0]
    for other in models[1:]:
        layout = (other.seq_len, other.bin_size, other.target_length)
        if layout != (first.seq_len, first.bin_size, first.target_length):
            raise KennelError(
                f"{other.path}: seq_len {other.seq_len}, bin size {other.bin_size}, "
                f"{other.target_length} bins differ from {first.path}'s "
                f"({first.seq_len}, {first.bin_size}, {first.target_length}): replicates must agree"
            )
    targets_path = targets or first.default_targets
    if targets_path is None:
        raise KennelError(f"{paths[0]}: a targets table is required for this model")
    table = read_targets(targets_path, require_untransform=options.untransform)
    for sequence_model in models:
        sequence_model.select_tracks(table)
    read = read_vcf(vcf, options.alts)
    variants = read.variants
    if max_variants is not None:
        variants = _whole_records(variants, max_variants)
    keep = check_against_genome(variants, genome, vcf, options.ref_mismatch)
    clusters = cluster_variants(variants, first.seq_len, options.cluster_pct)
    for sequence_model in models:
        _check_model(sequence_model, device, options.mix_dtype, len(table))
    return Prepared(
        models=models,
        targets=table,
        variants=variants,
        keep=keep,
        clusters=clusters,
        device=device,
        genome=Path(genome),
        options=options,
        unscored_alleles=read.unscored,
    )


def _check_model(model: SequenceModel, device: torch.device, mix_dtype: str, tracks: int) -> None:
    """Put the model on its device and check one forward's output shape."""
    model.module.to(device).eval()
    with torch.inference_mode(), autocast(device, mix_dtype):
        probe = torch.zeros(1, model.seq_len, 4, device=device)
        try:
            output = model.module(probe)
        except (RuntimeError, ValueError) as error:
            message = str(error).strip().splitlines()[0]
            raise KennelError(
                f"{model.path}: the model cannot take seq_len={model.seq_len} ({message})"
            ) from None
    model.check_output(output, tracks)


def _whole_records(variants: list[Variant], limit: int) -> list[Variant]:
    """The first ``limit`` variants, extended to the end of the last record they touch."""
    if limit >= len(variants):
        return variants
    last = variants[max(0, limit - 1)].record
    return [variant for variant in variants if variant.record <= last]


def score_shapes(prepared: Prepared) -> dict[str, tuple[int, ...]]:
    """Shape of one variant's scores, per stat: ``(tracks,)``, or ``(shifts, bins, tracks)``."""
    n_tracks = len(prepared.targets.collapsed_rows)
    profile = (len(prepared.options.shifts), prepared.model.target_length, n_tracks)
    return {
        stat: profile if stat in PROFILE_STATS else (n_tracks,) for stat in prepared.options.stats
    }
