"""Writes what leech predict gives with fx_tcndwell_wide.pt (trained on the feature window of bases
-7..+7) when its config records the window in leech's legacy keys instead of feature_start and
feature_end, each window shifted so that the keys' reading matters: ``sides``, feature_left 9 and
feature_right 5 (bases -9..+5); ``margins``, dwell_margin_left 1 and dwell_margin_right 3 (the
k-mer window's 5 bases either side widened: bases -6..+8). For each, fx.legacy_<name>.bam (the
tags) and, in legacy_window_inputs.npz, a SHA-256 of each signal, sequence and feature tensor
leech fed the model (../shared/leech/scripts/dump_chunks.py). Needs leech 0.16.0 (Python 3.12,
not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_legacy_windows.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import fixture_files, input_digests, predict

LEGACY_WINDOWS = {
    "sides": {"feature_left": 9, "feature_right": 5},
    "margins": {"dwell_margin_left": 1, "dwell_margin_right": 3},
}


def main(shared: Path, here: Path) -> None:
    pod5, bam, reference = fixture_files(shared)
    arrays = {}
    with tempfile.TemporaryDirectory() as work:
        for name, keys in LEGACY_WINDOWS.items():
            bundle = torch.load(here / "fx_tcndwell_wide.pt", weights_only=True)
            del bundle["config"]["feature_start"], bundle["config"]["feature_end"]
            bundle["config"].update(keys)
            path = Path(work) / f"{name}.pt"
            torch.save(bundle, path)
            predict(path, pod5, bam, reference, here / f"fx.legacy_{name}.bam")
            arrays.update(input_digests(path, pod5, bam, reference, name))
    np.savez_compressed(here / "legacy_window_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
