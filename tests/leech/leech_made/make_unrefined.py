"""Writes fx_unrefined.pt: a small TCNDwell leech 0.16.0 trained without signal-map refinement
(leech data prepare --no-refine-signal-map: the move-table map as it is, no k-mer table, so a
one-channel signal and no k-mer feature rows, though the config still lists them), the tags
leech predict gives with it (fx.unrefined.default.bam), and in unrefined_inputs.npz, for every
chunk leech fed the model (../shared/leech/scripts/dump_chunks.py), its read and focus base and
a SHA-256 of its signal, sequence and feature tensors: as trained (``fx.``, leech's Rust
extraction) and with its config's mask_seq_side set to left (``masked.``, its Python one).
Training is seeded: a rerun writes the same tags and digests. Needs leech 0.16.0 (Python 3.12,
not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_unrefined.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import fixture_files, input_digests, predict, train_small_tcndwell


def main(shared: Path, here: Path) -> None:
    pod5, bam, reference = fixture_files(shared)
    bundle = here / "fx_unrefined.pt"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        train_small_tcndwell(shared, work, bundle, "--no-refine-signal-map")
        predict(bundle, pod5, bam, reference, here / "fx.unrefined.default.bam")
        masked = work / "masked.pt"
        settings = torch.load(bundle, weights_only=True)
        settings["config"]["mask_seq_side"] = "left"
        torch.save(settings, masked)
        arrays = {}
        for name, path in (("fx", bundle), ("masked", masked)):
            arrays.update(input_digests(path, pod5, bam, reference, name))
    np.savez_compressed(here / "unrefined_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
