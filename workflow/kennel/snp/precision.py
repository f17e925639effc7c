"""``kennel snp-precision``: how far mixed-precision scores stray from strict float32 ones.

The baseline is strict float32: TF32 off for CUDA matmuls and cuDNN convolutions (a GPU that
allows TF32 keeps only 10 bits of mantissa in them). The candidate is ``mix_dtype``; ``float32``
there means float32 with TF32 allowed, the speed a GPU gets by default with it on. Three numbers
on the same variants scored twice: the Pearson r of logSUM over every
(variant, track); the Spearman rho of the variants ranked by their largest |logSUM|; and, among
the top 10% of (variant, track) scores by float32 |logSUM|, the share whose sign agrees.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from kennel.errors import KennelError
from kennel.snp.scoring import ScoreOptions, prepare, score_in_memory

logger = logging.getLogger(__name__)

PRECISION_STAT = "logSUM"
TOP_SHARE = 0.10


@dataclass(frozen=True)
class PrecisionReport:
    mix_dtype: str
    variants: int
    tracks: int
    pearson_logsum: float
    spearman_max_abs: float
    top_sign_agreement: float

    def lines(self) -> list[str]:
        return [
            f"mix_dtype\t{self.mix_dtype}",
            f"variants\t{self.variants}",
            f"tracks\t{self.tracks}",
            f"pearson_logSUM\t{self.pearson_logsum:.6f}",
            f"spearman_max_abs_logSUM\t{self.spearman_max_abs:.6f}",
            f"top10pct_sign_agreement\t{self.top_sign_agreement:.6f}",
        ]


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x = x - x.mean()
    y = y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    if denominator == 0:
        return 1.0 if np.array_equal(x, y) else float("nan")
    return float((x * y).sum() / denominator)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def compare_scores(
    reference: np.ndarray, candidate: np.ndarray, mix_dtype: str = "?"
) -> PrecisionReport:
    """Compare two ``(variants, tracks)`` logSUM arrays (reference: strict float32)."""
    if reference.shape != candidate.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {candidate.shape}")
    if reference.size == 0:
        raise KennelError("snp-precision: no variants to compare")
    reference = reference.astype(np.float64)
    candidate = candidate.astype(np.float64)
    pearson = _pearson(reference.ravel(), candidate.ravel())
    spearman = _pearson(
        _ranks(np.abs(reference).max(axis=1)), _ranks(np.abs(candidate).max(axis=1))
    )
    flat_reference, flat_candidate = reference.ravel(), candidate.ravel()
    n_top = max(1, int(np.ceil(TOP_SHARE * flat_reference.size)))
    top = np.argsort(-np.abs(flat_reference), kind="stable")[:n_top]
    agreement = float(np.mean(np.sign(flat_reference[top]) == np.sign(flat_candidate[top])))
    return PrecisionReport(
        mix_dtype=mix_dtype,
        variants=reference.shape[0],
        tracks=reference.shape[1],
        pearson_logsum=pearson,
        spearman_max_abs=spearman,
        top_sign_agreement=agreement,
    )


@contextlib.contextmanager
def float32_matmuls(strict: bool) -> Iterator[None]:
    """TF32 off (``strict``) or on for CUDA matmuls and cuDNN convolutions; restored after."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    torch.backends.cuda.matmul.allow_tf32 = not strict
    torch.backends.cudnn.allow_tf32 = not strict
    torch.set_float32_matmul_precision("highest" if strict else "high")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def check_precision(
    vcf: str | os.PathLike,
    genome: str | os.PathLike,
    model: str | os.PathLike,
    targets: str | os.PathLike | None,
    options: ScoreOptions,
    mix_dtype: str = "bfloat16",
    max_variants: int | None = 1000,
    params: str | os.PathLike | None = None,
) -> PrecisionReport:
    """Score the first ``max_variants`` variants in strict float32 and in ``mix_dtype``
    (``float32``: with TF32 allowed); compare."""
    stats = options.stats if PRECISION_STAT in options.stats else (*options.stats, PRECISION_STAT)
    options = dataclasses.replace(options, stats=stats, mix_dtype=mix_dtype)
    # one model, one read
    prepared = prepare(vcf, genome, model, targets, options, max_variants, params)
    scores = {}
    for name, dtype, strict in (("strict", "float32", True), ("candidate", mix_dtype, False)):
        in_dtype = dataclasses.replace(options, mix_dtype=dtype)
        with float32_matmuls(strict):
            scores[name] = score_in_memory(dataclasses.replace(prepared, options=in_dtype))[
                PRECISION_STAT
            ]
    label = "float32 (TF32 allowed)" if mix_dtype == "float32" else mix_dtype
    report = compare_scores(scores["strict"], scores["candidate"], label)
    for line in report.lines():
        logger.info("%s", line.replace("\t", ": "))
    return report
