"""Flashzoi (borzoi-pytorch's ``flashed: true`` models) without flash_attn.

Flashzoi is Borzoi with flash_attn's ``MHA`` in place of the relative-position attention:
half as many key/value heads as query heads, each shared by consecutive query heads; rotary
position embeddings (GPT-NeoX halves, base 20,000) on the first 128 channels of each query and
key head; biased projections. borzoi-pytorch builds it only where flash_attn imports, and
flash_attn's kernels need a CUDA GPU and half precision. :class:`RotaryAttention` computes the
same attention in plain torch (``scaled_dot_product_attention``, which picks a fused kernel on
a GPU by itself), on any device and in the job's precision, under the parameter names of
flash_attn's module, so a Flashzoi checkpoint loads as it is.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from kennel.errors import KennelError

ROTARY_CHANNELS = 128  # borzoi-pytorch's FlashAttention: rotary_emb_dim=128
ROTARY_BASE = 20_000.0


def check_flashed_config(where: str, dim: int, heads: int) -> None:
    """One line for a Flashzoi config that flash_attn's MHA could not have been built from:
    ``heads // 2`` key/value heads must divide the query heads, and each head must hold the
    128 rotated channels."""
    kv_heads = heads // 2
    if kv_heads < 1 or heads % kv_heads or dim % heads or dim // heads < ROTARY_CHANNELS:
        raise KennelError(
            f"{where}: a flashed (Flashzoi) config needs heads // 2 key/value heads dividing "
            f"the heads, and heads dividing dim into at least {ROTARY_CHANNELS} channels "
            f"(dim={dim}, heads={heads})"
        )


class _Projections(nn.Module):
    """flash_attn MHA's two projections, under its names (``mha.Wqkv``, ``mha.out_proj``)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        head = dim // heads
        self.Wqkv = nn.Linear(dim, head * (heads + 2 * (heads // 2)))
        self.out_proj = nn.Linear(dim, dim)


class RotaryAttention(nn.Module):
    """Flashzoi's attention: ``(batch, positions, dim) -> (batch, positions, dim)``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        check_flashed_config("Flashzoi attention", dim, heads)
        self.mha = _Projections(dim, heads)
        self.heads, self.kv_heads, self.head = heads, heads // 2, dim // heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, positions, _ = x.shape
        q, k, v = self.mha.Wqkv(x).split(
            [self.heads * self.head, self.kv_heads * self.head, self.kv_heads * self.head], -1
        )
        cos, sin = self._angles(positions, q.device, q.dtype)  # under autocast, half: as flash_attn
        q = _rotate(q.view(batch, positions, self.heads, self.head), cos, sin)
        k = _rotate(k.view(batch, positions, self.kv_heads, self.head), cos, sin)
        v = v.view(batch, positions, self.kv_heads, self.head)
        group = self.heads // self.kv_heads  # key/value head j serves query heads j·g … j·g+g−1
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.head**-0.5)
        return self.mha.out_proj(out.transpose(1, 2).reshape(batch, positions, -1))

    @staticmethod
    def _angles(positions: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of every position's angles, ``(positions, 1, 64)``: computed in float32
        (positions up to 4,096 times a frequency lose their phase in half precision), then
        rounded to the projections' dtype, as flash_attn rounds its table."""
        half = torch.arange(0, ROTARY_CHANNELS, 2, device=device, dtype=torch.float32)
        inverse = 1.0 / ROTARY_BASE ** (half / ROTARY_CHANNELS)
        angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inverse)
        return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first 128 channels of each head as pairs (i, i + 64); the rest pass. In float32,
    rounded once to the activations' dtype, as flash_attn's rotary kernel computes."""
    half = ROTARY_CHANNELS // 2
    rotated = x[..., :ROTARY_CHANNELS].float()
    first, second = rotated[..., :half], rotated[..., half:]
    cos, sin = cos.float(), sin.float()
    turned = torch.cat([first * cos - second * sin, second * cos + first * sin], -1)
    return torch.cat([turned.to(x.dtype), x[..., ROTARY_CHANNELS:]], -1)


@functools.cache
def rotary(network: type[nn.Module]) -> type[nn.Module]:
    """borzoi-pytorch's ``network`` (``Borzoi`` or ``Prime``) with :class:`RotaryAttention` in
    each transformer block: the network of a ``flashed`` config, built without flash_attn (a
    class made on first use, since borzoi-pytorch is an optional extra and the attention above
    needs only torch)."""

    class Rotary(network):
        def __init__(self, config) -> None:
            config.flashed = False  # borzoi-pytorch's own layout around the attention ...
            try:
                super().__init__(config)
            finally:
                config.flashed = True
            self.flashed = True
            for block in self.transformer:  # ... which sits in Residual(LayerNorm, attention)
                block[0].fn[1] = RotaryAttention(config.dim, config.heads)

    Rotary.__name__ = Rotary.__qualname__ = f"Rotary{network.__name__}"
    return Rotary
