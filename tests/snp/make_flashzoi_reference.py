"""Writes ``tests/snp/flashzoi_reference/``: what Flashzoi's attention computes, by flash_attn's
own code.

Flashzoi (borzoi-pytorch's ``flashed: true`` configs) replaces Borzoi's relative-position
attention by flash_attn's ``MHA``: grouped-query heads (half as many key/value heads), rotary
position embeddings on the first 128 channels of each head (base 20,000) and biased
projections. borzoi-pytorch builds it only where the flash_attn package imports, and
flash_attn's kernels need a CUDA GPU and half precision; kennel computes the same attention in
plain torch, on any device and in any precision. This script records the reference for that:

- ``attention.npz``: borzoi-pytorch's own ``FlashAttention`` module (a flash_attn ``MHA``) with
  seeded weights (multiples of 1/64, stored as int8, so both sides hold them exactly) and its
  output for a seeded input. Four heads over two key/value heads and 136 channels per head, so
  the grouping of query heads and the channels the rotation leaves alone both count.
- ``layout.json``: the parameter names and shapes of a small flashed Borzoi, and of a flashed
  Borzoi Prime, as borzoi-pytorch builds them (what their checkpoints hold), which kennel's
  networks must load without a key left over or missing.

flash_attn's CUDA extension and Triton cannot run on a CPU, so two of its imports are stood in
for here, by flash_attn's own pure-torch code paths: the attention runs through ``MHA``'s
non-flash branch (``use_flash_attn=False``: flash_attn's ``CrossAttention``, its reference for
the kernel), and the Triton rotary kernel ``apply_rotary`` through ``apply_rotary_emb_torch``
(its reference in ``flash_attn/layers/rotary.py``). Everything else is flash_attn's and
borzoi-pytorch's code as released. To remake (kennel's environment, with borzoi-pytorch):

    git clone --branch v2.8.4 https://github.com/Dao-AILab/flash-attention /tmp/flash-attention
    # (made from the 2026-08-15 snapshot, 0251105a2fb1, whose flash_attn says 2.8.4)
    python tests/snp/make_flashzoi_reference.py /tmp/flash-attention tests/snp/flashzoi_reference
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

SEED = 11
DIM, HEADS = 544, 4  # 136 channels per head: 128 rotated, 8 not
BATCH, LENGTH = 2, 96
WEIGHT_SCALE = 64  # weights are int8 / 64: attention logits of a few units, softmax not saturated
INPUT_SCALE = 16


def import_flash_attn(source: Path) -> None:
    """Make flash_attn's Python code importable without its CUDA extension and Triton."""
    sys.path.insert(0, str(source))
    sys.modules["flash_attn_2_cuda"] = types.ModuleType("flash_attn_2_cuda")  # never called
    triton_rotary = types.ModuleType("flash_attn.ops.triton.rotary")

    def apply_rotary(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None,
                     interleaved=False, inplace=False, conjugate=False):  # fmt: skip
        from flash_attn.layers.rotary import apply_rotary_emb_torch

        assert cu_seqlens is None and not conjugate and isinstance(seqlen_offsets, int)
        rows = slice(seqlen_offsets, seqlen_offsets + x.shape[1])
        out = apply_rotary_emb_torch(x, cos[rows], sin[rows], interleaved)
        return x.copy_(out) if inplace else out

    triton_rotary.apply_rotary = apply_rotary
    sys.modules["flash_attn.ops.triton.rotary"] = triton_rotary
    import flash_attn

    print("flash_attn", flash_attn.__version__, "from", Path(flash_attn.__file__).parent)


def reference_attention(dim: int, heads: int):
    """borzoi-pytorch's FlashAttention, its attention on flash_attn's pure-torch path."""
    from borzoi_pytorch.pytorch_borzoi_transformer import FlashAttention
    from flash_attn.modules.mha import CrossAttention

    module = FlashAttention(dim, heads=heads, dropout=0.0).eval()
    mha = module.mha
    assert mha.num_heads_kv != mha.num_heads  # MHA's grouped branch, through inner_cross_attn
    mha.use_flash_attn = False
    mha.inner_cross_attn = CrossAttention(softmax_scale=mha.inner_cross_attn.softmax_scale)
    return module


def write_attention(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    module = reference_attention(DIM, HEADS)
    weights = {}
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            values = rng.integers(-7, 8, size=parameter.shape, dtype=np.int8)
            weights[name] = values
            parameter.copy_(torch.from_numpy(values.astype(np.float32) / WEIGHT_SCALE))
        x = rng.integers(-31, 32, size=(BATCH, LENGTH, DIM), dtype=np.int8)
        y = module(torch.from_numpy(x.astype(np.float32) / INPUT_SCALE)).numpy()
    np.savez_compressed(
        out / "attention.npz",
        dim=DIM, heads=HEADS, weight_scale=WEIGHT_SCALE, input_scale=INPUT_SCALE, x=x, y=y,
        **{f"weight:{name}": values for name, values in weights.items()},
    )  # fmt: skip
    print("attention:", {name: v.shape for name, v in weights.items()}, "output", y.shape)


def write_layout(out: Path) -> None:
    import borzoi_pytorch
    from borzoi_pytorch import config_borzoi

    sizes = dict(dim=256, depth=2, heads=2, bins_to_return=64, flashed=True)
    layouts = {}
    for network, config in (("Borzoi", "BorzoiConfig"), ("Prime", "PrimeConfig")):
        model = getattr(borzoi_pytorch, network)(getattr(config_borzoi, config)(**sizes))
        layouts[network] = {name: list(t.shape) for name, t in model.state_dict().items()}
        print("layout:", network, len(layouts[network]), "tensors")
    (out / "layout.json").write_text(json.dumps({"config": sizes, "state_dict": layouts}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("flash_attention", type=Path, help="a flash-attention source checkout")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    import_flash_attn(args.flash_attention)
    torch.manual_seed(SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    write_attention(args.out)
    write_layout(args.out)


if __name__ == "__main__":
    main()
