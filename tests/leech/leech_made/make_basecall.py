"""Writes fx_basecall.pt: a small TCNDwell leech 0.16.0 trained on basecall-anchored chunks of the
shared fixture reads (leech data prepare --anchor basecall: motifs found in the reference and
mapped to the read through the CIGAR, chunks cut from the basecalled sequence and the whole
read's signal, not the aligned reference's), the tags leech predict gives with it
(fx.basecall.default.bam), and in basecall_inputs.npz, for every chunk leech fed the model
(../shared/leech/scripts/dump_chunks.py), its read and focus base and a SHA-256 of its signal,
sequence and feature tensors: on the fixture reads (``fx.``), and on those make_softclips.py cut
short (fx_softclipped.bam) as it is (``softclipped.``) and with recover_softclip_signal set
(``softclipped.recovered.``). Training is seeded: a rerun writes the same tags and
digests. Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_basecall.py [shared/leech]
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import input_digests, predict

CLASSES = ("Ala", "Gly", "Leu", "Phe")
MOTIF = ["--motif", "CCAGGC", "--motif-offset", "2"]


def leech(*args: str, cwd: Path) -> None:
    subprocess.run(["leech", *args], check=True, cwd=cwd)


def train(shared: Path, work: Path, bundle: Path) -> None:
    """prepare (basecall-anchored) -> merge -> train -> bundle, as make.sh's other bundles."""
    data = shared / "data"
    subprocess.run(
        [sys.executable, str(shared / "scripts" / "split_by_class.py"), str(data / "fx.bam"),
         str(data / "fx.truth.tsv"), "split"],
        check=True, cwd=work,
    )  # fmt: skip
    for label in CLASSES:
        leech("data", "prepare", "--pod5", str(data / "fx.pod5"), "--bam",
              f"split/class_{label}.bam", "--reference-fasta", str(data / "reference.fa"),
              "-o", f"prep_{label}", *MOTIF, "--label", label, "--no-split", "--workers", "2",
              "--seed", "1", "--feature-start", "-7", "--feature-end", "7",
              "--anchor", "basecall", cwd=work)  # fmt: skip
    inputs = [arg for label in CLASSES for arg in ("-i", f"{label}=prep_{label}/all.npz")]
    leech("data", "merge", *inputs, "-o", "merged", "--seed", "1", cwd=work)
    (work / "small.json").write_text('{"hidden_channels": 16, "num_layers": 3}')
    leech("model", "train", "--train-data", "merged/train.npz", "--val-data", "merged/val.npz",
          "--model", "TCNDwell", "--model-config", "small.json", "--output-dir", "model",
          "--epochs", "2", "--batch-size", "16", "--device", "cpu", "--seed", "1",
          "--num-out", "4", "--loss", "cross_entropy", *MOTIF, cwd=work)  # fmt: skip
    leech("model", "bundle", "--model-dir", "model", "-o", str(bundle), "-v", "0.1.0",
          "--comparison-type", "multiclass", cwd=work)  # fmt: skip
    bundle.chmod(0o644)


def main(shared: Path, here: Path) -> None:
    pod5, bam, reference = (
        shared / "data" / name for name in ("fx.pod5", "fx.bam", "reference.fa")
    )
    bundle = here / "fx_basecall.pt"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        train(shared, work, bundle)
        predict(bundle, pod5, bam, reference, here / "fx.basecall.default.bam")
        arrays = {
            f"fx.{key}": value for key, value in input_digests(bundle, pod5, bam, reference).items()
        }
        # with recover_softclip_signal set, on the reads cut short (make_softclips.py): nothing
        # to recover under this anchor, but leech predict extracts on its Python path
        recovered = work / "recovered.pt"
        settings = torch.load(bundle, weights_only=True)
        settings["config"]["recover_softclip_signal"] = True
        torch.save(settings, recovered)
        softclipped = here / "fx_softclipped.bam"
        for name, path in (("softclipped", bundle), ("softclipped.recovered", recovered)):
            digests = input_digests(path, pod5, softclipped, reference)
            arrays.update({f"{name}.{key}": value for key, value in digests.items()})
    np.savez_compressed(here / "basecall_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)
