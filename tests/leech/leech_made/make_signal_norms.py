"""Writes what leech predict gives on the shared fixture reads with the fixture's TCNDwell bundle
whose config names another signal normalisation (leech data prepare --signal-norm): zscore,
quantile, and pa_scaling with a pa_mean of 90 and a pa_stdev of 20 (as a basecaller's model
would record them). For each, fx.norm_<name>.bam (the tags) and, in norm_inputs.npz, a SHA-256
of each signal, sequence and feature tensor leech fed the model
(../shared/leech/scripts/dump_chunks.py; leech predict extracts on its Python path here).
The network was trained on median/MAD signal, so these calls are not good ones; the point is
that kennel feeds it what leech feeds it. Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_signal_norms.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import fixture_files, input_digests, predict

NORMS = {
    "zscore": {"signal_norm": "zscore"},
    "quantile": {"signal_norm": "quantile"},
    "pa_scaling": {"signal_norm": "pa_scaling", "pa_mean": 90.0, "pa_stdev": 20.0},
}


def main(shared: Path, here: Path) -> None:
    pod5, bam, reference = fixture_files(shared)
    arrays = {}
    with tempfile.TemporaryDirectory() as work:
        for name, settings in NORMS.items():
            bundle = torch.load(shared / "models" / "fx_tcndwell_multiclass.pt", weights_only=True)
            bundle["config"].update(settings)
            path = Path(work) / f"{name}.pt"
            torch.save(bundle, path)
            predict(path, pod5, bam, reference, here / f"fx.norm_{name}.bam")
            arrays.update(input_digests(path, pod5, bam, reference, name))
    np.savez_compressed(here / "norm_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
