"""The tRNA classifier: a temporal convolutional network over a read's signal chunk and its
per-base features around the anchor.

Two branches read the features file's two arrays. The signal branch is a strided stem followed
by residual blocks of dilated 1-D convolutions over time; the base branch embeds each base of the
window (dwell on a log scale) and runs the same kind of blocks over bases. Each branch ends in
attention pooling, the pooled vectors are concatenated into the read's representation, and an MLP
head turns it into class logits. An optional second head regresses the charging level (sigmoid,
in [0, 1]) from the same representation.

Every operation acts on one read at a time (convolutions, LayerNorm over channels at each time
step, softmax over a read's own time steps); there is no BatchNorm. So in eval mode the rows a
batch is padded with cannot change a real row's output, which lets the runner pad every batch to
one shape.

Input transform, part of the model so a bundle carries it: dwell (samples) → ``log1p``, then every
signal channel and base feature is standardised with constants fixed at training time
(hyperparameters ``signal_mean``/``signal_scale``/``base_mean``/``base_scale``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from kennel.errors import KennelError
from kennel.models.bundle import register_architecture

ARCHITECTURE = "trna_tcn"
DWELL_FEATURE = 0  # index of ``dwell`` in the features file's per-base features


class ChannelNorm(nn.Module):
    """LayerNorm over the channels of a ``(batch, channels, time)`` tensor, at each time step."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class ResidualBlock(nn.Module):
    """Pre-norm residual block: norm → dilated conv → GELU → dropout → 1×1 conv, plus skip."""

    def __init__(self, channels: int, kernel_size: int, dilation: int, dropout: float):
        super().__init__()
        self.norm = ChannelNorm(channels)
        self.conv = nn.Conv1d(
            channels,
            channels,
            kernel_size,
            dilation=dilation,
            padding=dilation * (kernel_size - 1) // 2,
        )
        self.mix = nn.Conv1d(channels, channels, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(self.dropout(F.gelu(self.conv(self.norm(x)))))


class AttentionPool(nn.Module):
    """Weighted mean over time, the weights a softmax of a learned score per time step."""

    def __init__(self, channels: int):
        super().__init__()
        self.score = nn.Conv1d(channels, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.score(x), dim=-1)  # (batch, 1, time)
        return (x * weights).sum(dim=-1)


class Encoder(nn.Module):
    """Positional embedding, residual dilated blocks, a final norm and attention pooling."""

    def __init__(
        self,
        channels: int,
        length: int,
        kernel_size: int,
        dilations: Sequence[int],
        dropout: float,
    ):
        super().__init__()
        self.position = nn.Parameter(torch.randn(channels, length) * 0.02)
        self.blocks = nn.Sequential(
            *(ResidualBlock(channels, kernel_size, d, dropout) for d in dilations)
        )
        self.norm = ChannelNorm(channels)
        self.pool = AttentionPool(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.norm(self.blocks(x + self.position)))


@register_architecture(ARCHITECTURE)
class TrnaTcn(nn.Module):
    """Classify a read (``signal`` (n, 2, chunk) and ``bases`` (n, window, 5)) into K classes.

    ``forward(signal, bases) -> (logits (n, K), charging (n,) in [0, 1] or None)``.

    ``bases_view`` (``[start, stop)`` in window coordinates, default the whole window) and
    ``use_signal`` restrict what the model reads; ``kennel train --window-offset`` uses them for
    its negative control, and storing them as hyperparameters makes inference read the same view.
    """

    def __init__(
        self,
        n_classes: int,
        window: int = 25,
        chunk_length: int = 512,
        signal_channels: int = 2,
        base_features: int = 5,
        channels: int = 48,
        base_channels: int = 32,
        hidden: int = 64,
        kernel_size: int = 3,
        downsample: int = 4,
        dilations: Sequence[int] = (1, 2, 4, 8, 16),
        base_dilations: Sequence[int] = (1, 2, 4),
        dropout: float = 0.1,
        charging_head: bool = True,
        use_signal: bool = True,
        bases_view: Sequence[int] | None = None,
        signal_mean: Sequence[float] | None = None,
        signal_scale: Sequence[float] | None = None,
        base_mean: Sequence[float] | None = None,
        base_scale: Sequence[float] | None = None,
    ):
        super().__init__()
        start, stop = (0, window) if bases_view is None else (int(v) for v in bases_view)
        if n_classes < 2:
            raise KennelError(f"{ARCHITECTURE}: needs at least two classes, got {n_classes}")
        if not 0 <= start < stop <= window:
            raise KennelError(
                f"{ARCHITECTURE}: bases_view {[start, stop]} does not fit a window of {window}"
            )
        if downsample < 1 or chunk_length % downsample:
            raise KennelError(
                f"{ARCHITECTURE}: downsample {downsample} must divide chunk_length {chunk_length}"
            )
        if kernel_size % 2 != 1:
            raise KennelError(f"{ARCHITECTURE}: kernel_size must be odd, got {kernel_size}")
        self.n_classes = n_classes
        self.window = window
        self.chunk_length = chunk_length
        self.use_signal = use_signal
        self.bases_view = (start, stop)
        self._register_constants("signal", signal_channels, signal_mean, signal_scale)
        self._register_constants("base", base_features, base_mean, base_scale)

        width = 0
        if use_signal:
            # stride = downsample, kernel = 2 × stride: neighbouring windows overlap by half
            self.signal_stem = nn.Conv1d(
                signal_channels,
                channels,
                kernel_size=2 * downsample,
                stride=downsample,
                padding=downsample // 2,
            )
            self.signal_encoder = Encoder(
                channels, chunk_length // downsample, kernel_size, dilations, dropout
            )
            width += channels
        self.base_embed = nn.Linear(base_features, base_channels)
        self.base_encoder = Encoder(
            base_channels, stop - start, kernel_size, base_dilations, dropout
        )
        width += base_channels
        self.head = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, n_classes)
        )
        self.charging = (
            nn.Sequential(nn.Linear(width, hidden // 2), nn.GELU(), nn.Linear(hidden // 2, 1))
            if charging_head
            else None
        )

    def _register_constants(self, name, n, mean, scale) -> None:
        # fixed at training time and stored as hyperparameters, so not part of the state dict
        mean = torch.zeros(n) if mean is None else torch.tensor(mean, dtype=torch.float32)
        scale = torch.ones(n) if scale is None else torch.tensor(scale, dtype=torch.float32)
        if mean.shape != (n,) or scale.shape != (n,) or not bool((scale > 0).all()):
            raise KennelError(f"{ARCHITECTURE}: {name} normalisation needs {n} means and scales")
        self.register_buffer(f"{name}_mean", mean, persistent=False)
        self.register_buffer(f"{name}_scale", scale, persistent=False)

    def representation(self, signal: torch.Tensor, bases: torch.Tensor) -> torch.Tensor:
        """The pooled features both heads read: ``(n, channels + base_channels)``."""
        dtype = self.base_mean.dtype
        start, stop = self.bases_view
        bases = bases[:, start:stop].to(dtype)
        dwell = torch.log1p(bases[..., DWELL_FEATURE : DWELL_FEATURE + 1].clamp(min=0))
        bases = torch.cat(
            [bases[..., :DWELL_FEATURE], dwell, bases[..., DWELL_FEATURE + 1 :]], dim=-1
        )
        bases = (bases - self.base_mean) / self.base_scale
        pooled = [self.base_encoder(self.base_embed(bases).transpose(1, 2))]
        if self.use_signal:
            signal = (signal.to(dtype) - self.signal_mean[:, None]) / self.signal_scale[:, None]
            pooled.insert(0, self.signal_encoder(self.signal_stem(signal)))
        return torch.cat(pooled, dim=-1)

    def forward(
        self, signal: torch.Tensor, bases: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        features = self.representation(signal, bases)
        logits = self.head(features)
        if self.charging is None:
            return logits, None
        return logits, torch.sigmoid(self.charging(features)).squeeze(-1)
