"""kennel's own implementations of leech's hand-written cross-attention networks,
TransformerDwell (and -Residual, the same network with a two-channel signal by default),
ResNetDwell and ConvOnly (leech's ConvLSTMRemora: :mod:`kennel.models.leech_remora`); which
registry name is which network: :mod:`kennel.models.leech_arch`.

Written from the layer layout leech 0.16.0 declares for them (its ``models/transformer_dwell.py``,
``models/resnet_dwell.py`` and ``models/conv_only.py`` classes, read for their shapes and
parameter names), not from its code: each class computes the same function and names its
parameters so that a leech state dict loads with ``strict=True``. The transformer towers are
torch's own ``nn.TransformerEncoder``, as in leech, so that inference takes the same kernels
(torch's fused encoder path in inference mode) and gives the same bits. The dropout layers are
kept only because they hold index positions in ``nn.Sequential`` parameter names (in eval
mode they pass their input through).

Every network takes ``(signal, sequence, features)`` as the other leech networks do
(:mod:`kennel.models.leech_nets`), with ``features`` over the model's whole feature window
(``wide_features``): signal and sequence are reduced to ``kmer_len`` positions, which attend to
the feature branch's output over every base of the window; a residual LayerNorm, attention
pooling over the positions and an MLP head give the logits. leech's hand-written classes take
no feature standardisation (``feature_mean``/``feature_std`` in a config are not used, as leech
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

# leech's signal-branch kernel (DEFAULT_SIGNAL_KERNEL); the heads' hidden widths (all three)
SIGNAL_KERNEL = 5
HEAD_HIDDEN = (512, 128)
# ResNetDwell: blocks in the signal and sequence towers
SIGNAL_RESNET_BLOCKS = 8
SEQUENCE_RESNET_BLOCKS = 4


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


class FeatureQueryNet(LeechNet):
    """The tail all three share: positions ``(batch, kmer_len, width)`` attend to the feature
    branch's output over the feature window, plus a residual LayerNorm (``cross_attn``,
    ``attn_norm``), then attention pooling (``pool_linear``) gives the representation."""

    def add_attention(self, width: int, heads: int, key_width: int, dropout: float) -> None:
        self.cross_attn = nn.MultiheadAttention(
            width, heads, dropout=dropout, kdim=key_width, vdim=key_width, batch_first=True
        )
        self.attn_norm = nn.LayerNorm(width)
        self.pool_linear = nn.Linear(width, 1)

    def add_feature_branch_and_head(
        self, num_features: int, width: int, heads: int, num_out: int, dropout: float
    ) -> None:
        """ResNetDwell's and ConvOnly's: leech's conv branch with batchnorm (4, 16, 256
        channels) on the features, and a head with batchnorm."""
        self.feature_branch = ConvBranch(
            conv_stack(num_features, DEFAULT_CONV_CHANNELS, 3, "batchnorm")
        )
        self.add_attention(width, heads, DEFAULT_CONV_CHANNELS[-1], dropout)
        self.classifier = classifier_head(width, HEAD_HIDDEN, num_out, dropout, "batchnorm")

    def attend(self, merged: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        combined = cross_attend(merged, keys, self.cross_attn, self.attn_norm)
        return attention_pool(self.pool_linear(combined), combined)

    def attend_features(
        self, signal_part: torch.Tensor, sequence_part: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        """Signal and sequence ``(batch, channels, kmer_len)`` side by side, concatenated
        along the channels and then positions first (the order leech takes)."""
        keys = self.feature_branch(features).transpose(1, 2)
        merged = torch.cat([signal_part, sequence_part], dim=1).transpose(1, 2)
        return self.attend(merged, keys)


class TransformerDwellNet(FeatureQueryNet):
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
        # conv -> ReLU twice, no norm: the input projections
        channels = (hidden, d_model)
        self.signal_conv = conv_stack(signal_in_channels, channels, SIGNAL_KERNEL, None)
        self.signal_pool = BinMean(kmer_len)
        self.seq_conv = conv_stack(
            sequence_channels(seq_encoding, signal_kmer_context), channels, 3, None
        )
        if seq_encoding == "signal_kmer":
            self.seq_pool = BinMean(kmer_len)
        else:
            self.seq_pool = None
        self.feature_conv = conv_stack(num_features, channels, 3, "batchnorm")
        self.pos_encoding = PositionCodes(d_model, max(kmer_len, signal_len), dropout)

        def encoder() -> nn.TransformerEncoder:
            layer = nn.TransformerEncoderLayer(
                d_model, nhead, dim_feedforward, dropout, batch_first=True
            )
            return nn.TransformerEncoder(layer, num_layers)

        self.signal_transformer = encoder()
        self.seq_transformer = encoder()
        width = 2 * d_model
        self.add_attention(width, nhead, d_model, dropout)
        self.classifier = classifier_head(width, HEAD_HIDDEN, num_out, dropout, None)

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
        return self.attend(torch.cat([signal_part, sequence_part], dim=2), keys)


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


class ResNetDwellNet(FeatureQueryNet):
    """leech's ResNetDwell: an 8-block ResNet on the signal, a 4-block one half as wide on the
    sequence, each averaged to ``kmer_len`` positions (the sequence's too, whatever its
    encoding; a tower's output shorter than ``kmer_len`` is spread over it)."""

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
        width = self.signal_resnet.out_channels + self.seq_resnet.out_channels
        self.add_feature_branch_and_head(num_features, width, num_attn_heads, num_out, dropout)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        signal_part = self.signal_pool(self.signal_resnet(signal))
        sequence_part = self.seq_pool(self.seq_resnet(sequence))
        return self.attend_features(signal_part, sequence_part, features)


class InceptionBlock(nn.Module):
    """Parallel branches over one input, concatenated along the channels: conv -> batchnorm ->
    ReLU for kernels 1, 3, 5 and 7 ('same' padding), and a stride-1 max pool (3) followed by a
    1x1 conv, batchnorm and ReLU: ``5 * out_channels`` channels out."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(in_channels, out_channels, kernel, padding=kernel // 2),
                nn.BatchNorm1d(out_channels),
                nn.ReLU(),
            )
            for kernel in (1, 3, 5, 7)
        )
        self.pool_branch = nn.Sequential(
            nn.MaxPool1d(3, stride=1, padding=1),
            nn.Conv1d(in_channels, out_channels, 1),
            nn.BatchNorm1d(out_channels),
            nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([*(branch(x) for branch in self.branches), self.pool_branch(x)], dim=1)


def _inception_tower(in_channels: int, base: int, blocks: int) -> nn.ModuleList:
    """``blocks`` inception blocks, block ``i`` ``base * 2 ** i`` per branch."""
    tower = nn.ModuleList()
    for i in range(blocks):
        tower.append(InceptionBlock(in_channels, base * 2**i))
        in_channels = 5 * base * 2**i
    return tower


class ConvOnlyNet(FeatureQueryNet):
    """leech's ConvOnly (deprecated there, still run by leech predict): ``num_blocks``
    inception blocks on the signal and on the sequence, each max-pooled (torch's adaptive max
    pool) to ``kmer_len`` positions (the sequence only for ``signal_kmer``)."""

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 1,
        signal_in_channels: int = 1,
        num_features: int = DEFAULT_NUM_FEATURES,
        seq_encoding: str = "base_onehot",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        base_channels: int = 16,
        num_blocks: int = 3,
        num_attn_heads: int = 4,
        dropout: float = DEFAULT_DROPOUT,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        self.signal_conv = _inception_tower(signal_in_channels, base_channels, num_blocks)
        self.signal_pool = nn.AdaptiveMaxPool1d(kmer_len)
        self.seq_conv = _inception_tower(
            sequence_channels(seq_encoding, signal_kmer_context), base_channels, num_blocks
        )
        if seq_encoding == "signal_kmer":
            self.seq_pool = nn.AdaptiveMaxPool1d(kmer_len)
        else:
            self.seq_pool = None
        width = 2 * 5 * base_channels * 2 ** (num_blocks - 1)
        self.add_feature_branch_and_head(num_features, width, num_attn_heads, num_out, dropout)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        for block in self.signal_conv:
            signal = block(signal)
        for block in self.seq_conv:
            sequence = block(sequence)
        if self.seq_pool is not None:
            sequence = self.seq_pool(sequence)
        return self.attend_features(self.signal_pool(signal), sequence, features)
