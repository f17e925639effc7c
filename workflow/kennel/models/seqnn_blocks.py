"""The blocks of a baskerville trunk as PyTorch modules, channels-first: the layers of
:mod:`kennel.models.seqnn_layers` wired as baskerville's block functions wire them."""

from __future__ import annotations

import torch
from torch import nn

from kennel.models.seqnn_layers import (
    LayerNorm,
    MaxPool,
    PositionwiseDense,
    RelativeAttention,
    crop,
    upsample,
)


class Saved:
    """The representations baskerville keeps (each tower repeat before its pool, each block's
    output), stored only where a U-net block will read one."""

    def __init__(self, wanted: frozenset[int]):
        self.wanted, self.count, self.tensors = wanted, 0, {}

    def add(self, x: torch.Tensor) -> None:
        if self.count in self.wanted:
            self.tensors[self.count] = x
        self.count += 1


class Pooled(nn.Module):
    """A chain of layers, then an optional max pool (baskerville's conv blocks)."""

    def __init__(self, layers: list[nn.Module], pool: int, residual: bool = False):
        super().__init__()
        self.layers = nn.Sequential(*layers)
        self.residual = residual
        self.pool = MaxPool(pool) if pool > 1 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(x)
        return self.pool(x + y if self.residual else y)


class Block(nn.Module):
    """A trunk or head block: a module, plus how it touches the saved representations."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor, saved: Saved) -> torch.Tensor:
        return self.body(x)


class ResTower(Block):
    def __init__(self, repeats: list[tuple[nn.Module, nn.Module | None]], pool: int):
        super().__init__(nn.ModuleList(nn.ModuleList([m, r or nn.Identity()]) for m, r in repeats))
        self.residual = [r is not None for _, r in repeats]
        self.pool = MaxPool(pool) if pool > 1 else nn.Identity()

    def forward(self, x, saved):
        for (first, rest), residual in zip(self.body, self.residual, strict=True):
            x = first(x)
            if residual:  # num_convs > 1: the later convs, scaled, added to the first's output
                x = x + rest(x)
            saved.add(x)
            x = self.pool(x)
        return x


class Transformer(nn.Module):
    """baskerville's transformer block, channels-last inside."""

    def __init__(
        self,
        channels: int,
        heads,
        key_size,
        position_features,
        content_bias,
        seqlen_train,
        expansion: float,
    ):
        super().__init__()
        self.norm = LayerNorm(channels, channels_last=True)
        self.attention = RelativeAttention(
            channels, heads, key_size, position_features, content_bias, seqlen_train
        )
        self.dense = None
        if expansion:
            self.dense = nn.Sequential(
                LayerNorm(channels, channels_last=True),
                PositionwiseDense(channels, int(expansion * channels), channels_last=True),
                nn.ReLU(),
                PositionwiseDense(int(expansion * channels), channels, channels_last=True),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm(x))
        return x + self.dense(x) if self.dense is not None else x


class TransformerTower(Block):
    def forward(self, x, saved):
        return self.body(x.transpose(1, 2)).transpose(1, 2)


class UNet(Block):
    def __init__(self, current, skip, current_dense, skip_dense, conv, factor, index):
        super().__init__(nn.ModuleList([current, skip, current_dense, skip_dense, conv]))
        self.factor, self.index = factor, index

    def forward(self, x, saved):
        current, skip, current_dense, skip_dense, conv = self.body
        x = upsample(current_dense(current(x)), self.factor)
        return conv(x + skip_dense(skip(saved.tensors[self.index])))


class Crop(Block):
    def __init__(self, start: int, end: int):
        super().__init__(nn.Identity())
        self.start, self.end = start, end

    def forward(self, x, saved):
        return crop(x, self.start, self.end)
