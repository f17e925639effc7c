"""snp-precision: the agreement numbers against direct numpy formulas, and the command."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from kennel.cli import main
from kennel.errors import KennelError
from kennel.snp.precision import _ranks, compare_scores


def spearman_without_ties(x: np.ndarray, y: np.ndarray) -> float:
    rank_x = np.argsort(np.argsort(x)).astype(float)
    rank_y = np.argsort(np.argsort(y)).astype(float)
    return float(np.corrcoef(rank_x, rank_y)[0, 1])


def test_numbers_equal_numpy_formulas():
    rng = np.random.default_rng(2)
    reference = rng.normal(size=(200, 6))
    candidate = reference + rng.normal(scale=0.3, size=reference.shape)
    report = compare_scores(reference, candidate, "bfloat16")
    assert report.variants == 200 and report.tracks == 6 and report.mix_dtype == "bfloat16"
    np.testing.assert_allclose(
        report.pearson_logsum, np.corrcoef(reference.ravel(), candidate.ravel())[0, 1], rtol=1e-12
    )
    expected_rho = spearman_without_ties(np.abs(reference).max(1), np.abs(candidate).max(1))
    np.testing.assert_allclose(report.spearman_max_abs, expected_rho, rtol=1e-12)
    flat_reference, flat_candidate = reference.ravel(), candidate.ravel()
    top = np.abs(flat_reference) >= np.quantile(np.abs(flat_reference), 0.9)
    agreement = np.mean(np.sign(flat_reference[top]) == np.sign(flat_candidate[top]))
    assert report.top_sign_agreement == pytest.approx(agreement)

    same = compare_scores(reference, reference.copy())
    assert (same.pearson_logsum, same.spearman_max_abs, same.top_sign_agreement) == (1, 1, 1)
    with pytest.raises(KennelError, match="no variants"):
        compare_scores(np.zeros((0, 2)), np.zeros((0, 2)))


def test_tied_values_share_their_mean_rank():
    assert _ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_command_reports_bfloat16_against_float32(snp_sim, small_vcf, tmp_path, capsys, caplog):
    out = tmp_path / "precision.tsv"
    arguments = [
        "snp-precision",
        "--vcf", str(small_vcf),
        "--genome", str(snp_sim["genome"]),
        "--model", str(snp_sim["model"]),
        "--targets", str(snp_sim["targets"]),
        "--device", "cpu",
        "--max-variants", "20",
        "--out", str(out),
    ]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="kennel.snp.scoring"):
        assert main(arguments) == 0
    assert "mix_dtype bfloat16 keeps 8 bits of mantissa" in caplog.text
    report = dict(line.split("\t") for line in out.read_text().splitlines())
    assert report["mix_dtype"] == "bfloat16" and int(report["variants"]) >= 20
    assert float(report["pearson_logSUM"]) > 0.99
    assert float(report["spearman_max_abs_logSUM"]) > 0.95
    assert float(report["top10pct_sign_agreement"]) == 1.0
    assert capsys.readouterr().out.startswith("mix_dtype\tbfloat16\n")


def test_the_baseline_is_strict_float32(snp_sim, small_vcf, monkeypatch):
    """TF32 off for CUDA matmuls and cuDNN while the baseline scores, allowed for a float32
    candidate, and restored afterwards."""
    import torch
    from kennel.snp import precision
    from kennel.snp.scoring import ScoreOptions

    seen = []
    real = precision.score_in_memory

    def recording(prepared):
        seen.append(
            (
                prepared.options.mix_dtype,
                torch.backends.cuda.matmul.allow_tf32,
                torch.backends.cudnn.allow_tf32,
                torch.get_float32_matmul_precision(),
            )
        )
        return real(prepared)

    monkeypatch.setattr(precision, "score_in_memory", recording)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    options = ScoreOptions(device="cpu", compile="off")
    inputs = (small_vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    report = precision.check_precision(*inputs, options, mix_dtype="float32", max_variants=10)
    assert seen == [
        ("float32", False, False, "highest"),
        ("float32", True, True, "high"),
    ]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    assert report.mix_dtype == "float32 (TF32 allowed)"
    assert report.pearson_logsum == 1.0  # no TF32 on a CPU: the same numbers
