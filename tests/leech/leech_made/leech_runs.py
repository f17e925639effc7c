"""What the makers in this folder run of leech 0.16.0 (in its Python 3.12 environment): leech
predict as the tests' references were made with it, and digests of its chunk dump's tensors."""

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def predict(bundle: Path, pod5: Path, bam: Path, reference: Path, output: Path) -> None:
    """``leech predict --all`` on the CPU, uncompiled, every other option at its default."""
    subprocess.run(
        ["leech", "predict", "--bundle", str(bundle), "--all", "--pod5", str(pod5), "--bam",
         str(bam), "--reference-fasta", str(reference), "--device", "cpu", "--no-compile",
         "-o", str(output)],
        check=True,
    )  # fmt: skip


def input_digests(bundle: Path, pod5: Path, bam: Path, reference: Path) -> dict[str, np.ndarray]:
    """Every chunk leech predict hands the model (../shared/leech/scripts/dump_chunks.py), in
    leech's order: its read id, focus base, and a SHA-256 of its signal, sequence and feature
    tensors (``signal_sha256``, ...)."""
    shared = Path(pod5).resolve().parents[1]
    with tempfile.TemporaryDirectory() as work:
        dump = Path(work) / "dump.npz"
        subprocess.run(
            [sys.executable, str(shared / "scripts" / "dump_chunks.py"), str(bundle), str(pod5),
             str(bam), str(reference), str(Path(work) / "dump.bam"), str(dump)],
            check=True,
        )  # fmt: skip
        with np.load(dump) as chunks:
            digests = {
                f"{name}_sha256": np.array(
                    [hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest()
                     for row in chunks[name]]
                )
                for name in ("signal", "sequence", "features")
            }  # fmt: skip
            return {"read_id": chunks["read_id"], "base_idx": chunks["base_idx"], **digests}
