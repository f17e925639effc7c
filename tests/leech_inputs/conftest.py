"""leech 0.16.0 reference fixtures (../shared/leech) and kennel's extraction of them, built once."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from kennel.io.kmers import KmerLevels, read_kmer_levels
from kennel.io.pod5 import Pod5Set
from kennel.trna.leech_config import load_leech_config
from kennel.trna.leech_inputs import extract_leech_chunks
from kennel.trna.leech_levels import LevelTable
from kennel.trna.leech_reads import iter_leech_inputs
from kennel.trna.leech_spec import LeechInputSpec

from tests.conftest import unavailable

SHARED = Path(__file__).parents[2] / ".." / "shared"
LEECH = SHARED / "leech"
KMER_TABLE = SHARED / "data" / "rna004_9mer_levels_v1.txt.gz"
BUNDLE = LEECH / "models" / "fx_tcndwell_multiclass.pt"
LEECH_MADE = Path(__file__).parents[1] / "leech" / "leech_made"


def sha256_rows(rows: np.ndarray) -> np.ndarray:
    """A SHA-256 of each row's bytes, as the makers digest leech's tensors."""
    return np.array(
        [hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest() for row in rows]
    )


def assert_leechs_tensors(chunks, leechs: dict[str, np.ndarray], prefix: str = "") -> None:
    """Every chunk's read, focus base, and signal, sequence and feature tensor are, bit for bit,
    those leech fed the model (``leechs`` holds a SHA-256 of each)."""
    np.testing.assert_array_equal(chunks.read_id, leechs[f"{prefix}read_id"])
    np.testing.assert_array_equal(chunks.base_idx, leechs[f"{prefix}base_idx"])
    tensors = {
        "signal": chunks.signal,
        "sequence": chunks.sequence_onehot(),
        "features": chunks.features,
    }
    for name, rows in tensors.items():
        differ = sha256_rows(rows) != leechs[f"{prefix}{name}_sha256"]
        assert not differ.any(), f"{name}: {differ.sum()} of {len(differ)} chunks differ"


def require_shared(*paths: Path) -> None:
    """Skip without the reference fixtures; in CI, which provides them, fail."""
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        unavailable(f"leech reference fixtures missing: {', '.join(missing)}", "CI has ../shared")


@pytest.fixture(scope="session")
def leech_dir() -> Path:
    require_shared(LEECH / "data" / "fx.bam", LEECH / "data" / "fx.pod5", BUNDLE, KMER_TABLE)
    return LEECH


@pytest.fixture(scope="session")
def leech_config(leech_dir) -> dict:
    return load_leech_config(BUNDLE)


@pytest.fixture(scope="session")
def kmer_levels(leech_dir) -> KmerLevels:
    return read_kmer_levels(KMER_TABLE)


@pytest.fixture(scope="session")
def level_table(kmer_levels) -> LevelTable:
    return LevelTable.from_kmer_levels(kmer_levels)


@pytest.fixture(scope="session")
def leech_spec(leech_config, level_table) -> LeechInputSpec:
    return LeechInputSpec.from_config(leech_config, level_table.sha256)


@pytest.fixture(scope="session")
def leech_reads(leech_dir):
    """Per-read inputs of every record kept, and (read id, reason) of those dropped."""
    reads, dropped = [], []
    data = leech_dir / "data"
    for batch, batch_dropped in iter_leech_inputs(data / "fx.bam", data / "reference.fa"):
        reads += batch
        dropped += batch_dropped
    return reads, dropped


@pytest.fixture(scope="session")
def leech_signals(leech_dir, leech_reads) -> dict[str, np.ndarray]:
    """Raw int16 signals of the kept reads that the POD5 holds."""
    pod5 = Pod5Set(leech_dir / "data" / "fx.pod5", index_reads=False)
    ids = [read.read_id for read in leech_reads[0]]
    return {read.read_id: signal for read, signal in pod5.signals(ids, missing_ok=True)}


@pytest.fixture(scope="session")
def leech_chunks(leech_reads, leech_signals, leech_spec, level_table):
    return extract_leech_chunks(leech_reads[0], leech_signals, leech_spec, level_table)


@pytest.fixture(scope="session")
def leech_dump(leech_dir) -> dict[str, np.ndarray]:
    """The tensors leech 0.16.0 handed the tcndwell model, chunk by chunk."""
    path = leech_dir / "dumps" / "fx.tcndwell.chunks.npz"
    require_shared(path)
    with np.load(path) as dump:
        return {key: dump[key] for key in dump.files}
