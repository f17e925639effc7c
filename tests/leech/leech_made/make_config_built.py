"""Writes fx_ConvLSTMRemoraBase.pt and fx_SignalCNN.pt: leech 0.16.0's Remora ConvLSTM without
features and its signal-only CNN, small (width 16, 10 epochs; 8 channels, 2 epochs), trained on
the fixture reads as make.sh's bundles are, and the tags leech predict gives with each
(fx.<name>.default.bam); and adds each one's logits on the first 64 chunks of the shared
TCNDwell dump to leech_logits.npz.

leech predict 0.16.0 cannot load either bundle: its loader builds these two classes at their
defaults whatever the config records (leech_runs.build_from_config), so predict and the logits
run with that one function building them from the config, as leech's trainer built them; the
rest is leech predict's own (with --backend python: its Rust extraction refuses a featureless
model's num_features 1, as make.sh's ConvLSTMBase bundles show). Training is seeded: a rerun
writes the same tags and logits. Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_config_built.py [shared/leech]
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import (
    BUILT_AT_DEFAULTS,
    build_from_config,
    fixture_files,
    prepare_merged,
    run_patched,
    train_and_bundle,
)

# each one's settings and epochs: the Remora LSTM this small gives nearly one probability vector
# for every read after 2 epochs (tags that could not tell wrong inputs from right), after 10 as
# many as there are reads
TRAINING = {"ConvLSTMRemoraBase": ('{"size": 16}', 10), "SignalCNN": ('{"channels": 8}', 2)}


def leechs_logits(name: str, bundle: Path, chunks) -> np.ndarray:
    """The bundle's network, as leech's bundle loader builds it with build_from_config, on the
    dump's signal channels it takes, sequence, and features where its forward takes them."""
    from leech.bundling import load_model_from_multiclass_bundle
    from leech.models import requires_features

    model, config = load_model_from_multiclass_bundle(bundle, device="cpu")
    model.eval()
    channels = int(config.get("signal_in_channels", 1))
    signal = torch.from_numpy(chunks["signal"][:64, :channels])
    sequence = torch.from_numpy(chunks["sequence"][:64]).float()
    features = torch.from_numpy(chunks["features"][:64])
    inputs = (signal, sequence, features) if requires_features(name) else (signal, sequence)
    with torch.no_grad():
        return model(*inputs).numpy()


def main(shared: Path, here: Path) -> None:
    pod5, bam, reference = (str(path) for path in fixture_files(shared))
    leech = str(Path(sys.executable).parent / "leech")
    prologue = f"import sys; sys.path.insert(0, {str(here)!r}); import leech_runs; "
    prologue += "leech_runs.build_from_config()"
    build_from_config()
    with np.load(here / "leech_logits.npz") as arrays:
        logits = dict(arrays)
    chunks = np.load(shared / "dumps" / "fx.tcndwell.chunks.npz")
    with tempfile.TemporaryDirectory() as work:
        prepare_merged(shared, Path(work))
        for name in BUILT_AT_DEFAULTS:
            shutil.rmtree(Path(work) / "model", ignore_errors=True)
            train_and_bundle(Path(work), here / f"fx_{name}.pt", name, *TRAINING[name])
    for name in BUILT_AT_DEFAULTS:
        bundle = here / f"fx_{name}.pt"
        run_patched(prologue, leech, ["predict", "--bundle", str(bundle), "--all", "--pod5", pod5,
                                      "--bam", bam, "--reference-fasta", reference, "--device",
                                      "cpu", "--no-compile", "--backend", "python", "-o",
                                      str(here / f"fx.{name}.default.bam")])  # fmt: skip
        logits[name] = leechs_logits(name, bundle, chunks)
    np.savez(here / "leech_logits.npz", **logits)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
