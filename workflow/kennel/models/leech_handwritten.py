"""kennel's own implementations of leech's hand-written networks: the wide-feature
TransformerDwell (and -Residual, the same network with a two-channel signal by default) and
ResNetDwell, and ConvLSTMRemora, leech's reproduction of Remora's ConvLSTM with its feature
branch; which registry name is which network: :mod:`kennel.models.leech_arch`.

Written from the layer layout leech 0.16.0 declares for them (its ``models/transformer_dwell.py``
and ``models/resnet_dwell.py`` classes, read for their shapes and parameter names), not from its
code: each class computes the same function and names its parameters so that a leech state dict
loads with ``strict=True``. The transformer towers are torch's own ``nn.TransformerEncoder``, as
in leech, so that inference takes the same kernels (torch's fused encoder path in inference
mode) and gives the same bits. Only inference is meant: dropout layers hold index positions in
``nn.Sequential`` parameter names.

Every network takes ``(signal, sequence, features)`` as the other leech networks do
(:mod:`kennel.models.leech_nets`). In the transformer and ResNet, ``features`` span the model's
whole feature window (``wide_features``): signal and sequence are reduced to ``kmer_len``
positions, which attend to the feature branch's output over every base of the window; a
residual LayerNorm, attention pooling over the positions and an MLP head give the logits.
ConvLSTMRemora reads ``kmer_len`` bases of features. leech's hand-written classes take no
feature standardisation (``feature_mean``/``feature_std`` in a config are not used, as leech
predict does not use them for these).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT
from kennel.models.leech_layers import (
    BinMean,
    ConvBranch,
    attention_pool,
    classifier_head,
    conv_stack,
    cross_attend,
)
from kennel.models.leech_nets import (
    DEFAULT_CONV_CHANNELS,
    DEFAULT_DROPOUT,
    DEFAULT_NUM_FEATURES,
    LeechNet,
    sequence_channels,
)

# leech's signal-branch kernel (DEFAULT_SIGNAL_KERNEL) and the TransformerDwell head's widths
SIGNAL_KERNEL = 5
TRANSFORMER_HEAD_HIDDEN = (512, 128)
# ResNetDwell: blocks in the signal and sequence towers, and its head's widths
SIGNAL_RESNET_BLOCKS = 8
SEQUENCE_RESNET_BLOCKS = 4
RESNET_HEAD_HIDDEN = (512, 128)


def sinusoid_positions(length: int, width: int) -> torch.Tensor:
    """``(1, length, width)`` sine/cosine position codes (Vaswani et al.): even columns
    ``sin(p / 10000^(i / width))``, odd ones the cosine. The buffer a state dict carries
    replaces these; they matter only to a network built without one."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))
    codes = torch.zeros(length, width)
    codes[:, 0::2] = torch.sin(position * frequency)
    codes[:, 1::2] = torch.cos(position * frequency)
    return codes[None]


class PositionCodes(nn.Module):
    """Adds the first ``positions`` rows of a fixed code table to ``(batch, positions, width)``
    (leech's ``pos_encoding``: the table is a persistent buffer named ``pe``)."""

    def __init__(self, width: int, max_len: int, dropout: float):
        super().__init__()
        self.register_buffer("pe", sinusoid_positions(max_len, width))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[:, : x.shape[1], :])


def _conv_relu_pair(in_channels: int, hidden: int, out: int, kernel: int) -> nn.Sequential:
    """conv -> ReLU -> conv -> ReLU, 'same' padding: the transformer's input projections."""
    return nn.Sequential(
        nn.Conv1d(in_channels, hidden, kernel, padding=kernel // 2),
        nn.ReLU(),
        nn.Conv1d(hidden, out, kernel, padding=kernel // 2),
        nn.ReLU(),
    )


class TransformerDwellNet(LeechNet):
    """leech's TransformerDwell and TransformerDwellResidual.

    Signal: two convs to ``d_model`` channels, averaged down to ``kmer_len`` positions, position
    codes, a transformer encoder. Sequence: two convs (then averaged down for ``signal_kmer``),
    position codes, an encoder of its own. Features: conv -> batchnorm -> ReLU twice, to
    ``d_model`` channels. The two towers side by side (``2 * d_model`` wide) query the
    features.
    """

    def __init__(
        self,
        *,
        kmer_len: int,
        signal_len: int,
        num_out: int = 1,
        signal_in_channels: int = 1,
        num_features: int = DEFAULT_NUM_FEATURES,
        seq_encoding: str = "base_onehot",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        d_model: int = 256,
        nhead: int = 8,
        num_layers: int = 4,
        dim_feedforward: int = 1024,
        dropout: float = DEFAULT_DROPOUT,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        hidden = 64
        self.signal_conv = _conv_relu_pair(signal_in_channels, hidden, d_model, SIGNAL_KERNEL)
        self.signal_pool = BinMean(kmer_len)
        self.seq_conv = _conv_relu_pair(
            sequence_channels(seq_encoding, signal_kmer_context), hidden, d_model, 3
        )
        if seq_encoding == "signal_kmer":
            self.seq_pool = BinMean(kmer_len)
        else:
            self.seq_pool = None
        self.feature_conv = conv_stack(num_features, (hidden, d_model), 3, "batchnorm")
        self.pos_encoding = PositionCodes(d_model, max(kmer_len, signal_len), dropout)

        def encoder() -> nn.TransformerEncoder:
            layer = nn.TransformerEncoderLayer(
                d_model, nhead, dim_feedforward, dropout, batch_first=True
            )
            return nn.TransformerEncoder(layer, num_layers)

        self.signal_transformer = encoder()
        self.seq_transformer = encoder()
        width = 2 * d_model
        self.cross_attn = nn.MultiheadAttention(
            width, nhead, dropout=dropout, kdim=d_model, vdim=d_model, batch_first=True
        )
        self.attn_norm = nn.LayerNorm(width)
        self.pool_linear = nn.Linear(width, 1)
        # Dropout, (Linear, ReLU, Dropout) x2, Linear: the head without a norm layer
        layers: list[nn.Module] = [nn.Dropout(dropout)]
        previous = width
        for size in TRANSFORMER_HEAD_HIDDEN:
            layers += [nn.Linear(previous, size), nn.ReLU(), nn.Dropout(dropout)]
            previous = size
        layers.append(nn.Linear(previous, num_out))
        self.classifier = nn.Sequential(*layers)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        signal_part = self.signal_pool(self.signal_conv(signal)).transpose(1, 2)
        signal_part = self.signal_transformer(self.pos_encoding(signal_part))
        sequence_part = self.seq_conv(sequence)
        if self.seq_pool is not None:
            sequence_part = self.seq_pool(sequence_part)
        sequence_part = self.seq_transformer(self.pos_encoding(sequence_part.transpose(1, 2)))
        keys = self.feature_conv(features).transpose(1, 2)
        # concatenated along the width after the towers (positions first), as leech does
        merged = torch.cat([signal_part, sequence_part], dim=2)
        combined = cross_attend(merged, keys, self.cross_attn, self.attn_norm)
        return attention_pool(self.pool_linear(combined), combined)


class ResidualBlock(nn.Module):
    """conv -> batchnorm -> ReLU -> (dropout) -> conv -> batchnorm, plus the input (through a
    1x1 conv and batchnorm when the stride or width changes), then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float):
        super().__init__()
        self.conv1 = nn.Conv1d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.norm1 = nn.BatchNorm1d(out_channels)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv1d(out_channels, out_channels, 3, padding=1)
        self.norm2 = nn.BatchNorm1d(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.skip: nn.Module = nn.Sequential(
                nn.Conv1d(in_channels, out_channels, 1, stride=stride),
                nn.BatchNorm1d(out_channels),
            )
        else:
            self.skip = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dropout(self.relu(self.norm1(self.conv1(x))))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.skip(x))


class ResNetTower(nn.Module):
    """A 1-D ResNet: a stride-2 k7 conv, batchnorm, ReLU and stride-2 max pool, then ``blocks``
    residual blocks; block ``i`` is ``base * 2 ** (i // 2)`` wide and halves the length at
    every even ``i > 0``."""

    def __init__(self, in_channels: int, base: int, blocks: int, dropout: float):
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv1d(in_channels, base, 7, stride=2, padding=3),
            nn.BatchNorm1d(base),
            nn.ReLU(),
            nn.MaxPool1d(3, stride=2, padding=1),
        )
        layers = []
        previous = base
        for i in range(blocks):
            width = base * 2 ** (i // 2)
            layers.append(ResidualBlock(previous, width, 2 if i % 2 == 0 and i > 0 else 1, dropout))
            previous = width
        self.res_blocks = nn.Sequential(*layers)
        self.out_channels = previous

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_blocks(self.conv1(x))


class ResNetDwellNet(LeechNet):
    """leech's ResNetDwell: an 8-block ResNet on the signal, a 4-block one half as wide on the
    sequence, each averaged to ``kmer_len`` positions (the sequence's too, whatever its
    encoding; a tower's output shorter than ``kmer_len`` is spread over it); the feature branch
    is leech's conv branch with batchnorm (4, 16, 256 channels); a head with batchnorm."""

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 1,
        signal_in_channels: int = 1,
        num_features: int = DEFAULT_NUM_FEATURES,
        seq_encoding: str = "base_onehot",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        base_channels: int = 64,
        num_attn_heads: int = 4,
        dropout: float = DEFAULT_DROPOUT,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        self.signal_resnet = ResNetTower(
            signal_in_channels, base_channels, SIGNAL_RESNET_BLOCKS, dropout
        )
        self.seq_resnet = ResNetTower(
            sequence_channels(seq_encoding, signal_kmer_context),
            base_channels // 2,
            SEQUENCE_RESNET_BLOCKS,
            dropout,
        )
        self.signal_pool = BinMean(kmer_len)
        self.seq_pool = BinMean(kmer_len)
        self.feature_branch = ConvBranch(
            conv_stack(num_features, DEFAULT_CONV_CHANNELS, 3, "batchnorm")
        )
        width = self.signal_resnet.out_channels + self.seq_resnet.out_channels
        self.cross_attn = nn.MultiheadAttention(
            width,
            num_attn_heads,
            dropout=dropout,
            kdim=DEFAULT_CONV_CHANNELS[-1],
            vdim=DEFAULT_CONV_CHANNELS[-1],
            batch_first=True,
        )
        self.attn_norm = nn.LayerNorm(width)
        self.pool_linear = nn.Linear(width, 1)
        self.classifier = classifier_head(width, RESNET_HEAD_HIDDEN, num_out, dropout, "batchnorm")

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        signal_part = self.signal_pool(self.signal_resnet(signal))
        sequence_part = self.seq_pool(self.seq_resnet(sequence))
        keys = self.feature_branch(features).transpose(1, 2)
        # concatenated along the channels, then positions first, as leech does
        merged = torch.cat([signal_part, sequence_part], dim=1).transpose(1, 2)
        combined = cross_attend(merged, keys, self.cross_attn, self.attn_norm)
        return attention_pool(self.pool_linear(combined), combined)


def _conv_bn_silu(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> list:
    return [
        nn.Conv1d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2),
        nn.BatchNorm1d(out_channels),
        nn.SiLU(),
    ]


class RemoraBranch(nn.Module):
    """Conv -> batchnorm -> SiLU per ``(width, kernel, stride)`` step, under ``layers``."""

    def __init__(self, in_channels: int, steps: Sequence[tuple[int, int, int]]):
        super().__init__()
        layers: list[nn.Module] = []
        for width, kernel, stride in steps:
            layers += _conv_bn_silu(in_channels, width, kernel, stride)
            in_channels = width
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class RemoraLSTM(nn.Module):
    """Two 2-layer LSTMs, one over the positions and one over them reversed; the mean of their
    last outputs (Remora's bidirectional LSTM)."""

    def __init__(self, width: int):
        super().__init__()
        self.lstm_fwd = nn.LSTM(width, width, num_layers=2, batch_first=True)
        self.lstm_rev = nn.LSTM(width, width, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        forward_out, _ = self.lstm_fwd(x)
        reverse_out, _ = self.lstm_rev(x.flip(1))
        return (forward_out[:, -1, :] + reverse_out[:, -1, :]) / 2


class ConvLSTMRemoraNet(LeechNet):
    """leech's ConvLSTMRemora: strided conv branches (batchnorm, SiLU) for signal, sequence and
    features, each cut to the shortest one's positions, a merging conv, the two-way LSTM and
    one linear layer (``fc``) on its output."""

    HEAD = "fc"

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 2,
        signal_in_channels: int = 1,
        num_features: int = DEFAULT_NUM_FEATURES,
        seq_encoding: str = "signal_kmer",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        size: int = 64,
        dropout: float = 0.3,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        sequence_in = sequence_channels(seq_encoding, signal_kmer_context)
        self.signal_branch = RemoraBranch(signal_in_channels, ((4, 5, 1), (16, 5, 1), (size, 9, 3)))
        self.seq_branch = RemoraBranch(sequence_in, ((16, 5, 1), (size, 13, 3)))
        self.feature_branch = RemoraBranch(num_features, ((16, 5, 1), (size, 5, 3)))
        self.merge_conv = nn.Sequential(*_conv_bn_silu(3 * size, size, 5))
        self.lstm = RemoraLSTM(size)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(size, num_out)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        parts = [
            self.signal_branch(signal),
            self.seq_branch(sequence),
            self.feature_branch(features),
        ]
        shortest = min(part.shape[2] for part in parts)
        merged = self.merge_conv(torch.cat([part[:, :, :shortest] for part in parts], dim=1))
        return self.dropout(self.lstm(merged.transpose(1, 2)))
