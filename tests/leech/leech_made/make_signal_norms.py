"""Writes what leech predict gives on the shared fixture reads with the fixture's TCNDwell bundle
whose config names another signal normalisation (leech data prepare --signal-norm): zscore,
quantile, and pa_scaling with a pa_mean of 90 and a pa_stdev of 20 (as a basecaller's model
would record them). For each, fx.norm_<name>.bam (the tags) and, in norm_inputs.npz, a SHA-256
of each signal tensor leech fed the model (../shared/leech/scripts/dump_chunks.py). The network
was trained on median/MAD signal, so these calls are not good ones; the point is that kennel
feeds it what leech feeds it. Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_signal_norms.py [shared/leech]
"""

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

NORMS = {
    "zscore": {"signal_norm": "zscore"},
    "quantile": {"signal_norm": "quantile"},
    "pa_scaling": {"signal_norm": "pa_scaling", "pa_mean": 90.0, "pa_stdev": 20.0},
}


def main(shared: Path, here: Path) -> None:
    data = [str(shared / "data" / name) for name in ("fx.pod5", "fx.bam", "reference.fa")]
    arrays = {}
    with tempfile.TemporaryDirectory() as work:
        for name, settings in NORMS.items():
            bundle = torch.load(shared / "models" / "fx_tcndwell_multiclass.pt", weights_only=True)
            bundle["config"].update(settings)
            path = Path(work) / f"{name}.pt"
            torch.save(bundle, path)
            subprocess.run(
                ["leech", "predict", "--bundle", str(path), "--all", "--pod5", data[0], "--bam",
                 data[1], "--reference-fasta", data[2], "--device", "cpu", "--no-compile",
                 "-o", str(here / f"fx.norm_{name}.bam")],
                check=True,
            )  # fmt: skip
            dump = Path(work) / f"{name}.npz"
            subprocess.run(
                [sys.executable, str(shared / "scripts" / "dump_chunks.py"), str(path), *data,
                 str(Path(work) / f"{name}.bam"), str(dump)],
                check=True,
            )  # fmt: skip
            with np.load(dump) as chunks:
                arrays[f"{name}.read_id"] = chunks["read_id"]
                arrays[f"{name}.signal_sha256"] = np.array(
                    [hashlib.sha256(np.ascontiguousarray(r).tobytes()).hexdigest()
                     for r in chunks["signal"]]
                )  # fmt: skip
    np.savez_compressed(here / "norm_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
