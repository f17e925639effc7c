"""Shared fixtures: simulated inputs are built once per test session (2 cores, keep it fast)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from kennel.sim.trna import TrnaSimulation, simulate_trna

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
REAL_REFERENCE = SHARED_DATA / "sacCer3-mature-tRNAs-dual-adapt-v2.fa"
REAL_KMER_TABLE = SHARED_DATA / "rna004_9mer_levels_v1.txt.gz"


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def trna_sim(tmp_path_factory) -> dict[str, Path]:
    """Two small simulated tRNA samples with the synthetic reference and 5-mer table."""
    out = tmp_path_factory.mktemp("trna_sim")
    return simulate_trna(out, TrnaSimulation(samples=("s1", "s2"), reads=300, seed=11))


@pytest.fixture(scope="session")
def real_trna_sim(tmp_path_factory) -> dict[str, Path]:
    """Simulated reads from the real yeast reference and RNA004 9-mer table (skip when absent)."""
    if not (REAL_REFERENCE.is_file() and REAL_KMER_TABLE.is_file()):
        pytest.skip(f"real inputs not present in {SHARED_DATA}")
    out = tmp_path_factory.mktemp("real_trna_sim")
    return simulate_trna(
        out,
        TrnaSimulation(
            samples=("real",),
            reads=200,
            seed=5,
            reference=REAL_REFERENCE,
            kmer_table=REAL_KMER_TABLE,
        ),
    )


@pytest.fixture
def workflow_copy(tmp_path) -> Path:
    """The workflow as a fresh clone has it (tracked and untracked-but-not-ignored files)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for relative in listed:
        source = REPO / relative
        if not source.is_file():
            continue
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return tmp_path
