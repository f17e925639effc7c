"""The building blocks of leech's TCN and ConvLSTM networks, written from what leech documents.

Parameter names follow leech's so that its state dicts load with ``strict=True`` into the
networks of :mod:`kennel.models.leech_nets`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def bin_mean_matrix(length: int, bins: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(length, bins)`` float32 matrix whose column ``j`` averages one adaptive-pool bin.

    Bin ``j`` covers ``[floor(j * length / bins), ceil((j + 1) * length / bins))`` (PyTorch's
    adaptive average pooling rule). leech pools by multiplying with this matrix (built in float64,
    rounded once to float32) rather than calling ``adaptive_avg_pool1d``; doing the same keeps
    the rounding, hence the logits, identical.
    """
    if length < 1 or bins < 1:
        raise ValueError(f"cannot pool {length} positions into {bins} bins")
    # the bin ends in exact integer arithmetic, the weights as tensor operations on the device:
    # traced by torch.compile as part of the graph (no CPU tensor, no cached output in it)
    starts = [(j * length) // bins for j in range(bins)]
    ends = [-((-(j + 1) * length) // bins) for j in range(bins)]
    start = torch.tensor(starts, device=device)
    end = torch.tensor(ends, device=device)
    position = torch.arange(length, device=device)[:, None]
    inside = (position >= start) & (position < end)
    return (inside.double() / (end - start).double()).float()


class BinMean(nn.Module):
    """Average a ``(batch, channels, length)`` tensor down to ``bins`` positions (no weights)."""

    def __init__(self, bins: int):
        super().__init__()
        self.bins = bins
        self._matrices: dict[tuple[int, torch.device], torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            # built inside the graph: a matrix cached here would be an output of the first
            # compiled call and a changed guard for the next, so a second compilation
            matrix = bin_mean_matrix(x.shape[-1], self.bins, x.device)
        else:
            key = (x.shape[-1], x.device)
            matrix = self._matrices.get(key)
            if matrix is None:
                # built outside inference mode so a cached constant can serve any later call
                with torch.inference_mode(False):
                    matrix = bin_mean_matrix(x.shape[-1], self.bins, x.device)
                self._matrices[key] = matrix
        # float32 accumulation even under autocast, as leech does
        with torch.autocast(x.device.type, enabled=False):
            return torch.matmul(x.float(), matrix).to(x.dtype)


def make_norm(norm_type: str, channels: int) -> nn.Module:
    """leech's three normalisations; its "layernorm" is a one-group GroupNorm over channels."""
    if norm_type == "batchnorm":
        return nn.BatchNorm1d(channels)
    if norm_type == "groupnorm":
        return nn.GroupNorm(min(4, channels), channels)
    if norm_type == "layernorm":
        return nn.GroupNorm(1, channels)
    raise ValueError(f"unknown norm_type {norm_type!r} (batchnorm, groupnorm, layernorm)")


class Standardize(nn.Module):
    """Frozen per-channel ``(x - mean) / std`` (leech's ``--standardize-features``)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        mean_t = torch.as_tensor(mean, dtype=torch.float32)
        std_t = torch.as_tensor(std, dtype=torch.float32)
        if mean_t.shape != std_t.shape:
            raise ValueError("feature_mean and feature_std differ in length")
        # the trained buffers overwrite these; the floor only matters for a fresh instance
        std_t = torch.nan_to_num(std_t, nan=1.0).clamp_min(1e-6)
        self.register_buffer("mean", mean_t.view(1, -1, 1))
        self.register_buffer("std", std_t.view(1, -1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def conv_stack(
    in_channels: int,
    channels: Sequence[int],
    kernel_size: int,
    norm_type: str | None,
    standardize: tuple[Sequence[float], Sequence[float]] | None = None,
) -> nn.Sequential:
    """``[standardize?] (conv -> norm? -> ReLU)*``: the layout of leech's conv branches."""
    layers: list[nn.Module] = []
    if standardize is not None:
        layers.append(Standardize(*standardize))
    previous = in_channels
    for width in channels:
        layers.append(nn.Conv1d(previous, width, kernel_size, padding=kernel_size // 2))
        if norm_type is not None:
            layers.append(make_norm(norm_type, width))
        layers.append(nn.ReLU())
        previous = width
    return nn.Sequential(*layers)


class ConvBranch(nn.Module):
    """A conv stack under the attribute name ``conv_layers`` (leech's branch key layout)."""

    def __init__(self, conv_layers: nn.Sequential):
        super().__init__()
        self.conv_layers = conv_layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(1)
        return self.conv_layers(x)


class TemporalBlock(nn.Module):
    """Two dilated convolutions (each padded to keep the length) plus a residual path.

    ``causal`` puts all ``(kernel_size - 1) * dilation`` padding on the left; otherwise it is split,
    the extra sample going right.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int,
        norm_type: str,
        dropout: float,
        causal: bool,
    ):
        super().__init__()
        total = (kernel_size - 1) * dilation
        left = total if causal else total // 2
        self.padding = (left, total - left)
        self.conv1 = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)
        self.norm1 = make_norm(norm_type, out_channels)
        self.dropout1 = nn.Dropout(dropout)
        self.conv2 = nn.Conv1d(out_channels, out_channels, kernel_size, dilation=dilation)
        self.norm2 = make_norm(norm_type, out_channels)
        self.dropout2 = nn.Dropout(dropout)
        self.downsample = (
            nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = nn.functional.pad
        out = self.dropout1(torch.relu(self.norm1(self.conv1(pad(x, self.padding)))))
        out = self.dropout2(torch.relu(self.norm2(self.conv2(pad(out, self.padding)))))
        skip = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + skip)


class TemporalConvNet(nn.Module):
    """``num_layers`` temporal blocks with dilations 1, 2, 4, ... under ``network``."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int,
        kernel_size: int,
        norm_type: str,
        dropout: float,
        causal: bool,
    ):
        super().__init__()
        self.network = nn.Sequential(
            *(
                TemporalBlock(
                    in_channels if i == 0 else hidden_channels,
                    hidden_channels,
                    kernel_size,
                    2**i,
                    norm_type,
                    dropout,
                    causal,
                )
                for i in range(num_layers)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(1)
        return self.network(x)


def classifier_head(
    in_features: int,
    hidden: Sequence[int],
    out_features: int,
    dropout: float,
    norm_type: str | None,
) -> nn.Sequential:
    """Dropout, then (Linear -> ReLU -> norm? -> Dropout) per hidden width, then Linear."""
    layers: list[nn.Module] = [nn.Dropout(dropout)]
    previous = in_features
    for width in hidden:
        layers += [nn.Linear(previous, width), nn.ReLU()]
        if norm_type is not None:
            layers.append(make_norm(norm_type, width))
        layers.append(nn.Dropout(dropout))
        previous = width
    layers.append(nn.Linear(previous, out_features))
    return nn.Sequential(*layers)


def attention_pool(scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """leech's attention pooling: ``values`` ``(batch, positions, width)`` averaged over the
    positions with the softmax of their ``scores`` ``(batch, positions, 1)``."""
    return (torch.softmax(scores, dim=1) * values).sum(dim=1)


def cross_attend(
    queries: torch.Tensor,
    keys: torch.Tensor,
    cross_attn: nn.MultiheadAttention,
    attn_norm: nn.LayerNorm,
) -> torch.Tensor:
    """leech's cross-attention step: every query position ``(batch, positions, width)`` attends
    to the keys ``(batch, bases, key width)``, added back and LayerNormed. The layers are the
    caller's own, so that their parameters keep leech's top-level names."""
    attended, _ = cross_attn(queries, keys, keys, need_weights=False)
    return attn_norm(queries + attended)


def range_mean(values: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """leech's range mean pool: ``values`` ``(batch, channels, bases)`` averaged over the bases
    ``start`` to ``stop`` (end excluded), clamped to the window, or over all of them when the
    clamped range is empty (a window too short to reach it)."""
    length = values.shape[2]
    start, stop = min(start, length), min(stop, length)
    return values[:, :, start:stop].mean(dim=2) if stop > start else values.mean(dim=2)
