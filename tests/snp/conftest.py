"""Fixtures of the SNP arm: the demo's simulation, sliced once and scored once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from kennel.sim.snp import simulate_snp
from kennel.snp.slices import slice_vcf
from snp_helpers import (
    DEMO_SEED,
    OPTIONS,
    SEQ_LEN,
    TINY_BORZOI_BINS,
    one_torch_thread,
    save_tiny_borzoi,
    score_in_slices,
)


@pytest.fixture(autouse=True, scope="module")
def torch_threads():
    """Session fixtures score with one thread too (see snp_helpers.one_torch_thread)."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def snp_sim(tmp_path_factory) -> dict[str, Path]:
    """The demo SNP job's inputs: 3 x 50 kb genome, 300 records, 2048-bp motif model."""
    return simulate_snp(tmp_path_factory.mktemp("snp_sim"), seed=DEMO_SEED, seq_len=SEQ_LEN)


@pytest.fixture(scope="session")
def one_slice(snp_sim, tmp_path_factory) -> dict:
    """The whole VCF scored as a single slice with the default options (the reference run)."""
    return score_in_slices(snp_sim, tmp_path_factory.mktemp("one_slice"), 1, report=True)


@pytest.fixture(scope="session")
def four_slices(snp_sim, tmp_path_factory) -> dict:
    """The same VCF cut into four slices, each scored, then merged."""
    return score_in_slices(snp_sim, tmp_path_factory.mktemp("four_slices"), 4)


@pytest.fixture(scope="session")
def small_vcf(snp_sim, tmp_path_factory) -> Path:
    """The first of eight slices (38 variants from chr1:1 on, with indels and a multi-allelic
    record): its clusters are the full run's, so its scores are the full run's first rows."""
    directory = tmp_path_factory.mktemp("eight_slices")
    slices = [directory / f"{i:03d}.vcf.gz" for i in range(8)]
    slice_vcf(snp_sim["variants"], slices, SEQ_LEN, OPTIONS.cluster_pct)
    return slices[0]


@pytest.fixture(scope="session")
def tiny_borzoi(tmp_path_factory) -> Path:
    """A random tiny Borzoi directory (32-bp bins, 64 of them)."""
    return save_tiny_borzoi(tmp_path_factory.mktemp("tiny_borzoi"), "Borzoi", TINY_BORZOI_BINS, 0)


@pytest.fixture(scope="session")
def four_tracks(tmp_path_factory) -> Path:
    """borzoi-pytorch's own targets table, cut to its first two strand pairs."""
    from tests.conftest import require_module

    require_module("borzoi_pytorch", "pip install 'kennel[borzoi]'")
    from kennel.snp.borzoi import default_targets_path

    lines = default_targets_path().read_text().splitlines()
    path = tmp_path_factory.mktemp("borzoi_targets") / "targets.tsv"
    path.write_text("\n".join(lines[:5]) + "\n")
    return path
