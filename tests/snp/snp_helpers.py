"""Helpers shared by the SNP-arm tests (a unique module name: conftest.py is not importable)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pysam
import torch
from kennel.snp.merge import merge_scores
from kennel.snp.scoring import ScoreOptions, score_snps
from kennel.snp.slices import slice_vcf

DEMO_SEED = 1  # config/config.yaml's demo.seed: these are the demo's inputs
SEQ_LEN = 2048
OPTIONS = ScoreOptions(device="cpu", compile="off")


@contextlib.contextmanager
def one_torch_thread():
    """The motif model's tensors are tiny: one intra-op thread is faster, and on a shared
    2-core machine several threads per process thrash (10x slower under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def score_in_slices(
    sim: dict[str, Path], directory: Path, n_slices: int, options=OPTIONS, report=False
) -> dict:
    """slice-vcf -> score-snps per slice -> merge-scores (with the report when asked)."""
    with one_torch_thread():
        return _score_in_slices(sim, directory, n_slices, options, report)


def _score_in_slices(sim, directory, n_slices, options, report):
    slices = [directory / f"{i:03d}.vcf.gz" for i in range(n_slices)]
    slice_vcf(sim["variants"], slices, SEQ_LEN, options.cluster_pct, options.alts)
    scores = [directory / f"{i:03d}.scores.h5" for i in range(n_slices)]
    for vcf, out in zip(slices, scores, strict=True):
        score_snps(vcf, sim["genome"], sim["model"], sim["targets"], out, options)
    merged = directory / "scores.h5"
    if report:
        merge_scores(scores, merged, directory / "plot.png", directory / "top.html")
    else:
        merge_scores(scores, merged)
    return {"slices": slices, "scores": scores, "merged": merged}


def row_ids(record_ids) -> list[str]:
    """The scores' unique row ids for one row per ALT: the VCF ID, then ``ID:n`` for the n-th
    ALT of the same record (written out here from the rule, not from kennel's code)."""
    seen: dict[str, int] = {}
    ids = []
    for record_id in record_ids:
        seen[record_id] = seen.get(record_id, 0) + 1
        ids.append(record_id if seen[record_id] == 1 else f"{record_id}:{seen[record_id]}")
    return ids


def vcf_lines(path: Path) -> tuple[list[str], list[str]]:
    """Header lines and record lines of a VCF, as text."""
    with pysam.VariantFile(str(path)) as vcf:
        header = str(vcf.header).splitlines()
        records = [str(record).rstrip("\n") for record in vcf]
    return header, records


def write_vcf(path: Path, header: list[str], records: list[str]) -> Path:
    path.write_text("\n".join([*header, *records]) + "\n")
    return path


def read_scores(path: Path) -> dict:
    """Every dataset of a scores file (``per_model/SUM`` for those in groups), and its
    attributes."""
    import h5py

    data = {}

    def keep(name, item):
        if isinstance(item, h5py.Dataset):
            data[name] = item[:]

    with h5py.File(path, "r") as handle:
        handle.visititems(keep)
        attrs = dict(handle.attrs)
    return {"data": data, "attrs": attrs}


def assert_same_scores(first: Path, second: Path, skip_attrs=("fingerprint", "model")) -> None:
    """Identical datasets (bit for bit) and attributes, except those naming paths."""
    import numpy as np

    a, b = read_scores(first), read_scores(second)
    assert sorted(a["data"]) == sorted(b["data"])
    for name in a["data"]:
        assert a["data"][name].dtype == b["data"][name].dtype, name
        floats = a["data"][name].dtype.kind == "f"
        assert np.array_equal(a["data"][name], b["data"][name], equal_nan=floats), name
    for key in set(a["attrs"]) | set(b["attrs"]):
        if key not in skip_attrs:
            assert a["attrs"].get(key) == b["attrs"].get(key), key


FLASHZOI_REFERENCE = Path(__file__).parent / "flashzoi_reference"


def flashzoi_attention_reference():
    """kennel's Flashzoi attention holding the weights of ``flashzoi_reference/attention.npz``
    (made by ``make_flashzoi_reference.py`` with flash_attn's own module), the input, and what
    flash_attn's module gave for it."""
    import numpy as np
    from kennel.snp.flashzoi import RotaryAttention

    reference = np.load(FLASHZOI_REFERENCE / "attention.npz")
    module = RotaryAttention(int(reference["dim"]), int(reference["heads"])).eval()
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            values = reference[f"weight:{name}"].astype(np.float32)
            parameter.copy_(torch.from_numpy(values / float(reference["weight_scale"])))
    x = torch.from_numpy(reference["x"].astype(np.float32) / float(reference["input_scale"]))
    return module, x, reference["y"]


TINY_BORZOI_BINS = 64  # the conftest's tiny Borzoi: 32-bp bins, 2,048 of a 4,096-bp window


def save_tiny_borzoi(directory: Path, network: str, bins: int, seed: int, **config) -> Path:
    """A random tiny borzoi-pytorch ``network`` (``Borzoi`` or ``Prime``) saved in ``directory``
    as borzoi-pytorch saves one (one instance per input length: its attention caches
    positional embeddings for the first length it sees)."""
    from tests.conftest import require_module

    borzoi_pytorch = require_module("borzoi_pytorch", "pip install 'kennel[borzoi]'")
    torch.manual_seed(seed)
    settings = dict(dim=64, depth=1, heads=2, attn_dim_key=16, attn_dim_value=32)
    config = getattr(borzoi_pytorch.config_borzoi, f"{network}Config")(
        bins_to_return=bins, **{**settings, **config}
    )
    getattr(borzoi_pytorch, network)(config).eval().save_pretrained(directory)
    return directory
