"""PyTorch layers that hold a baskerville (Keras 2) model's weights and compute what Keras does.

Tensors run channels-first, ``(batch, channels, length)``, through the convolutions; Keras
stores them channels-last, so every layer here knows how to take its Keras weights
(:meth:`KerasLayer.load`), by the names Keras gives them in a ``model.h5``. The numerical
conventions are Keras's: batch and layer norm with epsilon 1e-3, GELU's tanh approximation,
``same`` padding, max pools that pad at the end.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from kennel.errors import KennelError

KERAS_EPSILON = 1e-3  # BatchNormalization's and LayerNormalization's default


class KerasLayer(nn.Module):
    """A layer whose weights come from one Keras layer of class ``keras_class``."""

    keras_class = ""  # the prefix of Keras's automatic layer names, e.g. "conv1d"

    def load(self, weights: dict[str, np.ndarray]) -> None:
        raise NotImplementedError


def _assign(target: torch.Tensor, value: np.ndarray, name: str) -> None:
    if tuple(target.shape) != tuple(value.shape):
        raise KennelError(
            f"weight {name} has shape {tuple(value.shape)}, params.json's model needs "
            f"{tuple(target.shape)}"
        )
    with torch.no_grad():
        target.copy_(torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)))


def _take(weights: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name not in weights:
        raise KennelError(f"weight {name} is missing (has: {', '.join(sorted(weights))})")
    return weights[name]


class Conv(KerasLayer):
    """Keras Conv1D, ``padding="same"``: kernel ``(width, in, out)``."""

    keras_class = "conv1d"

    def __init__(self, channels: int, filters: int, width: int, bias: bool, dilation: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(
            channels, filters, width, padding="same", bias=bias, dilation=dilation
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)

    def load(self, weights):
        _assign(self.conv.weight, _take(weights, "kernel").transpose(2, 1, 0), "kernel")
        if self.conv.bias is not None:
            _assign(self.conv.bias, _take(weights, "bias"), "bias")


class SeparableConv(KerasLayer):
    """Keras SeparableConv1D (depth multiplier 1): a per-channel convolution with no bias, then
    a pointwise one with its bias (none before a batch norm, as conv_block makes it)."""

    keras_class = "separable_conv1d"

    def __init__(self, channels: int, filters: int, width: int, bias=True, dilation=1):
        super().__init__()
        self.depthwise = nn.Conv1d(
            channels,
            channels,
            width,
            padding="same",
            groups=channels,
            bias=False,
            dilation=dilation,
        )
        self.pointwise = nn.Conv1d(channels, filters, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))

    def load(self, weights):
        depthwise = _take(weights, "depthwise_kernel")
        if depthwise.shape[-1] != 1:
            raise KennelError(f"depth multiplier {depthwise.shape[-1]} (kennel reads 1)")
        _assign(self.depthwise.weight, depthwise.transpose(1, 2, 0), "depthwise_kernel")
        _assign(
            self.pointwise.weight,
            _take(weights, "pointwise_kernel").transpose(2, 1, 0),
            "pointwise_kernel",
        )
        if self.pointwise.bias is not None:
            _assign(self.pointwise.bias, _take(weights, "bias"), "bias")


def per_position(layer: nn.Module, x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``layer`` (acting on the last axis) on each position's features."""
    if channels_last:
        return layer(x)
    return layer(x.transpose(1, 2)).transpose(1, 2)


class PositionwiseDense(KerasLayer):
    """Keras Dense on ``(batch, length, features)``, here on channels-first tensors."""

    keras_class = "dense"

    def __init__(self, channels: int, units: int, channels_last: bool = False):
        super().__init__()
        self.linear = nn.Linear(channels, units)
        self.channels_last = channels_last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return per_position(self.linear, x, self.channels_last)

    def load(self, weights):
        _assign(self.linear.weight, _take(weights, "kernel").T, "kernel")
        _assign(self.linear.bias, _take(weights, "bias"), "bias")

    def keep_units(self, index: list[int]) -> None:
        """Compute only the ``index`` units, in that order."""
        rows = torch.as_tensor(index, dtype=torch.long, device=self.linear.weight.device)
        kept = nn.Linear(self.linear.in_features, len(index), device=self.linear.weight.device)
        with torch.no_grad():
            kept.weight.copy_(self.linear.weight.index_select(0, rows))
            kept.bias.copy_(self.linear.bias.index_select(0, rows))
        self.linear = kept


class BatchNorm(KerasLayer):
    """Keras BatchNormalization at inference: the moving statistics."""

    keras_class = "batch_normalization"

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(channels, eps=KERAS_EPSILON)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)

    def load(self, weights):
        _assign(self.norm.weight, _take(weights, "gamma"), "gamma")
        _assign(self.norm.bias, _take(weights, "beta"), "beta")
        _assign(self.norm.running_mean, _take(weights, "moving_mean"), "moving_mean")
        _assign(self.norm.running_var, _take(weights, "moving_variance"), "moving_variance")
        self.norm.num_batches_tracked.zero_()


class LayerNorm(KerasLayer):
    """Keras LayerNormalization over the features of each position."""

    keras_class = "layer_normalization"

    def __init__(self, channels: int, channels_last: bool = False):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=KERAS_EPSILON)
        self.channels_last = channels_last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return per_position(self.norm, x, self.channels_last)

    def load(self, weights):
        _assign(self.norm.weight, _take(weights, "gamma"), "gamma")
        _assign(self.norm.bias, _take(weights, "beta"), "beta")


class Scale(KerasLayer):
    """baskerville's Scale: a learned factor per feature (res_tower's residual branch)."""

    keras_class = "scale"

    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale[:, None]

    def load(self, weights):
        _assign(self.scale, _take(weights, "scale"), "scale")


def norm_layer(norm_type: str | None, channels: int) -> nn.Module:
    """baskerville's ``norm_type``: batch norm (synchronised or not: the same at inference),
    layer norm, or none."""
    if norm_type in ("batch", "batch-sync"):
        return BatchNorm(channels)
    if norm_type == "layer":
        return LayerNorm(channels)
    if norm_type is None:
        return nn.Identity()
    raise KennelError(f"norm_type {norm_type!r} (kennel reads batch, batch-sync, layer)")


ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": lambda: nn.GELU(approximate="tanh"),  # baskerville asks Keras for approximate=True
    "softplus": nn.Softplus,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "linear": nn.Identity,
    None: nn.Identity,
}


def activation_layer(name: str | None, exact_gelu: bool = False) -> nn.Module:
    if not isinstance(name, str | None) or name not in ACTIVATIONS:
        known = ", ".join(str(key) for key in ACTIVATIONS if key)
        raise KennelError(f"activation {name!r} (kennel reads {known})")
    return nn.GELU() if exact_gelu and name == "gelu" else ACTIVATIONS[name]()


class MaxPool(nn.Module):
    """Keras MaxPool1D with ``padding="same"``: a short last window is pooled, not dropped."""

    def __init__(self, size: int):
        super().__init__()
        self.pool = nn.MaxPool1d(size, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def central_mask_features(distances: torch.Tensor, features: int, length: int) -> torch.Tensor:
    """baskerville's relative-position basis: for widths growing geometrically up to ``length``,
    whether a distance lies inside each, then the same signed by the distance's direction."""
    per_class = features // 2
    rate = np.float32(np.exp(np.log(length + 1) / per_class))
    exponents = torch.arange(1, per_class + 1, dtype=torch.float32, device=distances.device)
    widths = torch.pow(torch.tensor(rate, device=distances.device), exponents) - 1
    inside = (widths > distances.abs()[:, None]).float()
    return torch.cat([inside, torch.sign(distances)[:, None] * inside], dim=-1)


def relative_shift(logits: torch.Tensor) -> torch.Tensor:
    """``(..., L, 2L-1)`` logits against distances -(L-1)..L-1 → ``(..., L, L)`` where row i,
    column j holds distance j - i: Transformer-XL's shift, by padding and reshaping (no index
    tensor: at Borzoi's 4,096 positions one would take a gigabyte per sequence)."""
    *lead, length, width = logits.shape
    padded = torch.nn.functional.pad(logits, (1, 0))  # (..., L, 2L)
    shifted = padded.reshape(*lead, width + 1, length)[..., 1:, :]
    return shifted.reshape(*lead, length, width)[..., :length]


class RelativeAttention(KerasLayer):
    """baskerville's MultiheadAttention (Enformer's): content logits plus logits against
    learned projections of relative-position features, each with its own learned bias."""

    keras_class = "multihead_attention"

    def __init__(
        self, channels, heads, key_size, position_features, content_position_bias, seqlen_train
    ):
        super().__init__()
        if channels % heads:
            raise KennelError(f"{channels} features do not split into {heads} heads")
        self.heads, self.key_size = heads, key_size
        self.value_size = channels // heads
        self.position_features = position_features
        self.content_position_bias = content_position_bias
        self.seqlen_train = seqlen_train
        key_width = key_size * heads
        self.q = nn.Linear(channels, key_width, bias=False)
        self.k = nn.Linear(channels, key_width, bias=False)
        self.v = nn.Linear(channels, channels, bias=False)
        self.out = nn.Linear(channels, channels)
        # Keras sizes the projection by the features made: two halves of features // 2 each;
        # with none, it is never built and the file holds no kernel for it
        self.r_k = nn.Linear(position_features // 2 * 2, key_width, bias=False)
        self.r_w_bias = nn.Parameter(torch.empty(1, heads, 1, key_size))
        self.r_r_bias = nn.Parameter(torch.empty(1, heads, 1, key_size))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.reshape(batch, length, self.heads, -1).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, length, channels)
        batch, length, channels = x.shape
        q = self._split(self.q(x)) * self.key_size**-0.5
        k, v = self._split(self.k(x)), self._split(self.v(x))
        logits = torch.matmul(q + self.r_w_bias, k.transpose(-1, -2))
        if self.position_features:
            distances = torch.arange(-length + 1, length, dtype=torch.float32, device=x.device)
            features = central_mask_features(
                distances, self.position_features, self.seqlen_train or length
            )
            r_k = self._split(self.r_k(features.to(x.dtype))[None])  # (1, heads, 2L-1, key)
            query = q + self.r_r_bias if self.content_position_bias else self.r_r_bias
            relative = torch.matmul(query, r_k.transpose(-1, -2))
            relative = relative.expand(batch, -1, length, -1)
            logits = logits + relative_shift(relative)
        weights = torch.softmax(logits, dim=-1)
        attended = torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, channels)
        return self.out(attended)

    def load(self, weights):
        for name, target, transpose in (
            ("q_layer/kernel", self.q.weight, True),
            ("k_layer/kernel", self.k.weight, True),
            ("v_layer/kernel", self.v.weight, True),
            ("embedding_layer/kernel", self.out.weight, True),
            ("embedding_layer/bias", self.out.bias, False),
            *((("r_k_layer/kernel", self.r_k.weight, True),) if self.position_features else ()),
            ("r_w_bias", self.r_w_bias, False),
            ("r_r_bias", self.r_r_bias, False),
        ):
            value = _take(weights, name)
            _assign(target, value.T if transpose else value, name)


def keras_layers(module: nn.Module) -> list[KerasLayer]:
    """The Keras-weighted layers of ``module`` in the order they were constructed."""
    return [layer for layer in module.modules() if isinstance(layer, KerasLayer)]


def rounded(value: float, divisible_by: int) -> int:
    """res_tower's filter rounding (numpy's round half to even, as baskerville)."""
    return int(np.round(value / divisible_by) * divisible_by)


def upsample(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Keras UpSampling1D: each position repeated ``factor`` times."""
    return x.repeat_interleave(factor, dim=-1)


def crop(x: torch.Tensor, start: int, end: int) -> torch.Tensor:
    return x[..., start : x.shape[-1] - end]
