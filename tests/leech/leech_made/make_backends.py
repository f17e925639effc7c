"""Writes what leech predict gives with the fixture's TCNDwell when it extracts on its Python path
for every model: with --backend python (fx.tcndwell.backend_python.bam), and installed without
leech-core, its Rust extension, as `pip install leech` alone installs it (its import blocked
here: fx.tcndwell.without_core.bam), and in backend_inputs.npz, a SHA-256 of each signal,
sequence and feature tensor leech fed the model each way (../shared/leech/scripts/dump_chunks.py,
run the same way); and without leech-core again with the skew and kurtosis rows in the config's
feature channels (``without_core_moments``, fx.tcndwell.without_core_moments.bam). Needs leech
0.16.0 and leech-core (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_backends.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import dump_digests, fixture_files, run_patched

BLOCK_CORE = "import sys; sys.modules['leech_core'] = None"  # as if never installed
# per run: leech predict's prologue and options, and the chunk dump's prologue (dump_chunks.py
# calls run_inference, which takes the backend leech predict's flag sets)
RUNS = {
    "backend_python": (
        "pass",
        ["--backend", "python"],
        "import functools, leech.inference.single as s; "
        "s.run_inference = functools.partial(s.run_inference, backend='python')",
    ),
    "without_core": (BLOCK_CORE, [], BLOCK_CORE),
    "without_core_moments": (BLOCK_CORE, [], BLOCK_CORE),
}
# the fixture's twelve channels with the skew and kurtosis rows in place of level_range and
# kmer_expected, so that numpy's moments are compared too (the network still takes twelve rows;
# its calls are not good ones)
MOMENTS = {
    "feature_channels": ["dwell", "dwell_log", "dwell_mean", "dwell_std", "dwell_ratio",
                         "level_mean", "level_median", "level_std", "level_skew",
                         "level_kurtosis", "kmer_residual", "kmer_residual_abs"],
}  # fmt: skip


def main(shared: Path, here: Path) -> None:
    fixture = shared / "models" / "fx_tcndwell_multiclass.pt"
    pod5, bam, reference = (str(path) for path in fixture_files(shared))
    leech = str(Path(sys.executable).parent / "leech")
    arrays = {}
    with tempfile.TemporaryDirectory() as work:
        moments = Path(work) / "moments.pt"
        settings = torch.load(fixture, weights_only=True)
        settings["config"].update(MOMENTS)
        torch.save(settings, moments)
        for name, (prologue, options, dump_prologue) in RUNS.items():
            bundle = moments if name.endswith("_moments") else fixture
            output = here / f"fx.tcndwell.{name}.bam"
            run_patched(prologue, leech, ["predict", "--bundle", str(bundle), "--all", "--pod5",
                                          pod5, "--bam", bam, "--reference-fasta", reference,
                                          "--device", "cpu", "--no-compile", *options, "-o",
                                          str(output)])  # fmt: skip
            dump = Path(work) / f"{name}.npz"
            script = str(shared / "scripts" / "dump_chunks.py")
            arguments = [str(bundle), pod5, bam, reference, str(Path(work) / "dump.bam"), str(dump)]
            run_patched(dump_prologue, script, arguments)
            arrays.update(dump_digests(dump, name))
    np.savez_compressed(here / "backend_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
