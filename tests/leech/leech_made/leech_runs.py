"""What the makers in this folder run of leech 0.16.0 (in its Python 3.12 environment): leech
predict as the tests' references were made with it, digests of its chunk dump's tensors, and the
small TCNDwell the single-option makers train."""

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CLASSES = ("Ala", "Gly", "Leu", "Phe")
MOTIF = ["--motif", "CCAGGC", "--motif-offset", "2"]


def leech(*args: str, cwd: Path) -> None:
    subprocess.run(["leech", *args], check=True, cwd=cwd)


def prepare_merged(shared: Path, work: Path, *prepare: str) -> None:
    """The fixture reads of the four classes prepared with ``prepare``'s options and merged
    into ``work/merged`` (train/val), as make.sh's bundles are trained on."""
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
              *prepare, cwd=work)  # fmt: skip
    inputs = [arg for label in CLASSES for arg in ("-i", f"{label}=prep_{label}/all.npz")]
    leech("data", "merge", *inputs, "-o", "merged", "--seed", "1", cwd=work)


def train_and_bundle(work: Path, bundle: Path, model: str, settings: str, epochs: int = 2) -> None:
    """``model`` with the JSON ``settings``, trained on ``work/merged`` for ``epochs`` (seeded,
    4 classes), bundled multiclass as ``bundle``."""
    (work / "small.json").write_text(settings)
    leech("model", "train", "--train-data", "merged/train.npz", "--val-data", "merged/val.npz",
          "--model", model, "--model-config", "small.json", "--output-dir", "model",
          "--epochs", str(epochs), "--batch-size", "16", "--device", "cpu", "--seed", "1",
          "--num-out", "4", "--loss", "cross_entropy", *MOTIF, cwd=work)  # fmt: skip
    leech("model", "bundle", "--model-dir", "model", "-o", str(bundle), "-v", "0.1.0",
          "--comparison-type", "multiclass", cwd=work)  # fmt: skip
    bundle.chmod(0o644)


def train_small_tcndwell(shared: Path, work: Path, bundle: Path, *prepare: str) -> None:
    """A small TCNDwell (16 channels, 3 layers, 2 epochs, seeded) on the fixture reads, as
    make.sh's bundles are made (prepare with ``prepare``'s options -> merge -> train ->
    bundle), in ``work``."""
    prepare_merged(shared, work, *prepare)
    train_and_bundle(work, bundle, "TCNDwell", '{"hidden_channels": 16, "num_layers": 3}')


def predict(bundle: Path, pod5: Path, bam: Path, reference: Path, output: Path) -> None:
    """``leech predict --all`` on the CPU, uncompiled, every other option at its default."""
    subprocess.run(
        ["leech", "predict", "--bundle", str(bundle), "--all", "--pod5", str(pod5), "--bam",
         str(bam), "--reference-fasta", str(reference), "--device", "cpu", "--no-compile",
         "-o", str(output)],
        check=True,
    )  # fmt: skip


def fixture_files(shared: Path) -> tuple[Path, Path, Path]:
    """The shared fixture's POD5, BAM and reference."""
    return tuple(shared / "data" / name for name in ("fx.pod5", "fx.bam", "reference.fa"))


def dump_digests(dump: Path, prefix: str) -> dict[str, np.ndarray]:
    """A chunk dump's read ids and focus bases, and a SHA-256 of each chunk's signal, sequence
    and feature tensor, under ``{prefix}.read_id``, ``{prefix}.signal_sha256``, ..."""
    with np.load(dump) as chunks:
        digests = {
            f"{prefix}.{name}_sha256": np.array(
                [hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest()
                 for row in chunks[name]]
            )
            for name in ("signal", "sequence", "features")
        }  # fmt: skip
        return {
            f"{prefix}.read_id": chunks["read_id"],
            f"{prefix}.base_idx": chunks["base_idx"],
            **digests,
        }


def input_digests(
    bundle: Path, pod5: Path, bam: Path, reference: Path, prefix: str
) -> dict[str, np.ndarray]:
    """:func:`dump_digests` of every chunk leech predict hands the model
    (../shared/leech/scripts/dump_chunks.py), in leech's order."""
    shared = Path(pod5).resolve().parents[1]
    with tempfile.TemporaryDirectory() as work:
        dump = Path(work) / "dump.npz"
        subprocess.run(
            [sys.executable, str(shared / "scripts" / "dump_chunks.py"), str(bundle), str(pod5),
             str(bam), str(reference), str(Path(work) / "dump.bam"), str(dump)],
            check=True,
        )  # fmt: skip
        return dump_digests(dump, prefix)


def run_patched(prologue: str, script: str, arguments: list[str]) -> None:
    """``script`` (leech's console script, or a Python file) run as ``__main__`` with
    ``arguments``, in a new interpreter that first runs the Python statement ``prologue``."""
    code = f"{prologue}; import runpy, sys; sys.argv = {[script, *arguments]!r}; "
    code += f"runpy.run_path({script!r}, run_name='__main__')"
    subprocess.run([sys.executable, "-c", code], check=True)


# the classes leech 0.16.0's bundle loader builds at their defaults whatever the config records
BUILT_AT_DEFAULTS = ("ConvLSTMRemoraBase", "SignalCNN")


def build_from_config() -> None:
    """Make leech's bundle loader build :data:`BUILT_AT_DEFAULTS` from the config keys their
    constructors name, as its trainer built them. Its config filter reads a constructor taking
    ``**kwargs`` by the first base class without them (nn.Module's parent: no parameters), so it
    builds these two at their defaults (1 signal channel, 2 outputs), which fit none of the
    bundles leech trains; every other class is built as leech builds it."""
    import inspect

    import leech.bundling
    import leech.model_loading
    from leech.models import MODEL_REGISTRY, get_model

    original = leech.model_loading._instantiate_model

    def instantiate(config: dict):
        name = config["model_name"]
        if name not in BUILT_AT_DEFAULTS:
            return original(config)
        named = inspect.signature(MODEL_REGISTRY[name]).parameters
        return get_model(name, **{key: value for key, value in config.items() if key in named})

    leech.model_loading._instantiate_model = instantiate
    leech.bundling._instantiate_model = instantiate


def charging_head_bundle(source: Path, path: Path, width: int = 128, seed: int = 5) -> Path:
    """``source`` (a multiclass bundle) with a seeded random charging-level head on its
    ``width``-wide representation (the fixture TCNDwell's is 128), as leech's bundler stores
    one: cl_regression in the config, the head's state dict beside the model's."""
    import torch

    bundle = torch.load(source, weights_only=True)
    generator = torch.Generator().manual_seed(seed)
    bundle["config"]["cl_regression"] = True
    bundle["model"]["cl_regression_head_state_dict"] = {
        "net.0.weight": torch.randn(64, width, generator=generator) * 0.1,
        "net.0.bias": torch.randn(64, generator=generator) * 0.1,
        "net.2.weight": torch.randn(1, 64, generator=generator) * 0.1,
        "net.2.bias": torch.randn(1, generator=generator) * 0.1,
    }
    torch.save(bundle, path)
    return path
