"""kennel's own implementations of the networks in leech's TCN and ConvLSTM families (the
latter with and without attention pooling); which registry name is which network, and how a
config shapes it: :mod:`kennel.models.leech_arch`.

Written from what leech 0.16.0 documents and declares (its ``models/configs/*.toml`` graphs and
``models/components.py``), not from its code: each class here computes the same function as the
leech architecture of the same name and names its parameters so that a leech state dict loads
with ``strict=True``. Only inference is meant: dropout layers exist because they hold index
positions in ``nn.Sequential`` parameter names, not to be trained.

Every network takes ``(signal, sequence, features)``:

* ``signal`` ``(batch, signal_in_channels, signal_len)`` (a 2-D ``(batch, signal_len)`` is read as
  one channel);
* ``sequence`` ``(batch, 36, signal_len)`` for ``signal_kmer`` (one-hot of the 9-mer each sample is
  assigned to) or ``(batch, 4, kmer_len)`` for ``base_onehot``;
* ``features`` ``(batch, num_features, width)``: per-base features, ``width = kmer_len`` for
  the ConvLSTM family and ``feature_end - feature_start + 1`` for the TCN family and the
  ConvLSTM attention variants (their cross-attention reads the whole window); the ConvLSTMBase
  variants have no feature branch and ignore them.

``representation(...)`` is the vector the classification head reads (what leech's optional
charging-level head is fed); ``forward`` is the head applied to it, i.e. the logits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT
from kennel.models.leech_layers import (
    BinMean,
    ConvBranch,
    TemporalConvNet,
    attention_pool,
    classifier_head,
    conv_stack,
    cross_attend,
    make_norm,
    range_mean,
)

# leech's constants (leech/constants.py) for anything a config does not record
DEFAULT_CONV_CHANNELS = (4, 16, 256)
DEFAULT_DROPOUT = 0.1
DEFAULT_NUM_FEATURES = 5
DEFAULT_LSTM_HIDDEN = 96
LSTM_LAYERS = 2
FC_HIDDEN = 64
CLASSIFIER_HIDDEN = (256, 64)
# a dwell-attention model's dwell branch unless its config records dwell_conv_channels
DWELL_CONV_CHANNELS = (4, 16, 64)
CHARGING_HEAD_HIDDEN = 64


def sequence_channels(seq_encoding: str, context: Sequence[int]) -> int:
    if seq_encoding == "signal_kmer":
        return 4 * (int(context[0]) + int(context[1]) + 1)
    if seq_encoding == "base_onehot":
        return 4
    raise ValueError(f"unknown seq_encoding {seq_encoding!r} (signal_kmer, base_onehot)")


def _standardize(feature_mean, feature_std):
    if feature_mean is None and feature_std is None:
        return None
    if feature_mean is None or feature_std is None:
        raise ValueError("feature_mean and feature_std must both be given or both omitted")
    return feature_mean, feature_std


class LeechNet(nn.Module):
    """What every leech network shares: ``representation(signal, sequence, features)`` is the
    vector the classification head reads (what leech's optional charging-level head is fed);
    ``forward`` is the head applied to it, i.e. the logits; and the settings a model's input
    shapes are read from (``LeechModel.input_shapes``)."""

    # the head's attribute name: leech's charging head reads the input of the module so named,
    # as wide as the head's first Linear
    HEAD = "classifier"

    def __init__(self, kmer_len: int, num_out: int, signal_in_channels: int, seq_encoding: str):
        super().__init__()
        self.kmer_len = kmer_len
        self.num_out = num_out
        self.signal_in_channels = signal_in_channels
        self.seq_encoding = seq_encoding

    def forward(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        return self.head(self.representation(signal, sequence, features))

    def head(self, representation: torch.Tensor) -> torch.Tensor:
        return getattr(self, self.HEAD)(representation)

    @property
    def representation_width(self) -> int:
        head = getattr(self, self.HEAD)
        return next(m for m in head.modules() if isinstance(m, nn.Linear)).in_features


class TCNDwellNet(LeechNet):
    """leech's TCNDwell family: TCNDwell, -Residual, -SplitResidual, -ResidualMotor and
    -ResidualDwellAttn, with batchnorm, groupnorm or layernorm.

    Signal and sequence each go through a dilated TCN and are averaged down to ``kmer_len``
    positions; the concatenation queries a cross-attention whose keys and values are the
    feature branch's output over the whole feature window; a residual LayerNorm, attention
    pooling over the ``kmer_len`` positions and a normalised MLP head give the logits.

    ``split_residual`` gives the raw signal and the k-mer residual (signal channels 0 and 1, a
    one-channel signal feeding both) a TCN each. ``dwell_attention`` adds a second
    cross-attention, on the first ``num_dwell_features`` feature rows (the dwell ones) through a
    branch of their own, before the pooling. ``motor_pool`` (start and end, excluded, as base
    indices into the feature window: (8, 13) is bases 8 to 12) appends the mean of the feature
    branch over those bases, projected, to the pooled vector.
    """

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 1,
        signal_in_channels: int = 1,
        num_features: int = DEFAULT_NUM_FEATURES,
        seq_encoding: str = "base_onehot",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        hidden_channels: int = 64,
        num_layers: int = 6,
        kernel_size: int = 3,
        num_attn_heads: int = 4,
        norm_type: str = "batchnorm",
        causal: bool = True,
        dropout: float = DEFAULT_DROPOUT,
        feature_mean: Sequence[float] | None = None,
        feature_std: Sequence[float] | None = None,
        split_residual: bool = False,
        motor_pool: tuple[int, int] | None = None,
        motor_proj_dim: int = 64,
        dwell_attention: bool = False,
        num_dwell_features: int = 5,
        dwell_conv_channels: Sequence[int] = DWELL_CONV_CHANNELS,
        num_dwell_attn_heads: int = 2,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        self.split_residual = split_residual
        self.motor_pool = motor_pool
        self.num_dwell_features = num_dwell_features if dwell_attention else 0
        width = (3 if split_residual else 2) * hidden_channels
        feature_width = DEFAULT_CONV_CHANNELS[-1]

        def tcn(channels: int) -> TemporalConvNet:
            return TemporalConvNet(
                channels, hidden_channels, num_layers, kernel_size, norm_type, dropout, causal
            )

        self.signal_tcn = tcn(1 if split_residual else signal_in_channels)
        self.signal_pool = BinMean(kmer_len)
        if split_residual:
            self.residual_tcn = tcn(1)
        self.seq_tcn = tcn(sequence_channels(seq_encoding, signal_kmer_context))
        # base_onehot is already one position per base; signal_kmer is one per sample
        self.seq_pool = BinMean(kmer_len) if seq_encoding == "signal_kmer" else None
        standardize = _standardize(feature_mean, feature_std)
        self.feature_branch = ConvBranch(
            conv_stack(num_features, DEFAULT_CONV_CHANNELS, 3, norm_type, standardize)
        )
        self.cross_attn = nn.MultiheadAttention(
            width,
            num_attn_heads,
            dropout=dropout,
            kdim=feature_width,
            vdim=feature_width,
            batch_first=True,
        )
        self.attn_norm = nn.LayerNorm(width)
        self.pool_linear = nn.Linear(width, 1)
        context = width + (motor_proj_dim if motor_pool is not None else 0)
        self.classifier = classifier_head(context, CLASSIFIER_HIDDEN, num_out, dropout, norm_type)
        if motor_pool is not None:
            self.motor_proj = nn.Sequential(
                nn.Linear(feature_width, motor_proj_dim),
                nn.ReLU(),
                make_norm(norm_type, motor_proj_dim),
            )
        if dwell_attention:
            # the dwell rows' standardisation is the prefix of the features' (same row order)
            dwell_standardize = standardize and tuple(v[:num_dwell_features] for v in standardize)
            dwell_conv_channels = [int(c) for c in dwell_conv_channels]
            self.dwell_branch = ConvBranch(
                conv_stack(num_dwell_features, dwell_conv_channels, 3, norm_type, dwell_standardize)
            )
            self.dwell_attn = nn.MultiheadAttention(
                width,
                num_dwell_attn_heads,
                dropout=dropout,
                kdim=dwell_conv_channels[-1],
                vdim=dwell_conv_channels[-1],
                batch_first=True,
            )
            self.dwell_attn_norm = nn.LayerNorm(width)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if self.split_residual:
            if signal.dim() == 2:
                signal = signal.unsqueeze(1)
            residual = signal[:, 1:2] if signal.shape[1] > 1 else signal[:, :1]
            parts = [
                self.signal_pool(self.signal_tcn(signal[:, :1])),
                self.signal_pool(self.residual_tcn(residual)),
            ]
        else:
            parts = [self.signal_pool(self.signal_tcn(signal))]
        sequence_part = self.seq_tcn(sequence)
        if self.seq_pool is not None:
            sequence_part = self.seq_pool(sequence_part)
        feature_out = self.feature_branch(features)
        merged = torch.cat([*parts, sequence_part], dim=1).transpose(1, 2)
        combined = cross_attend(
            merged, feature_out.transpose(1, 2), self.cross_attn, self.attn_norm
        )
        if self.num_dwell_features:
            dwell = self.dwell_branch(features[:, : self.num_dwell_features])
            combined = cross_attend(
                combined, dwell.transpose(1, 2), self.dwell_attn, self.dwell_attn_norm
            )
        context = attention_pool(self.pool_linear(combined), combined)
        if self.motor_pool is None:
            return context
        motor = self.motor_proj(range_mean(feature_out, *self.motor_pool))
        return torch.cat([context, motor], dim=1)


class ConvLSTMDwellNet(LeechNet):
    """leech's ConvLSTM family: conv branches for signal, sequence and (``has_features``)
    features, each conv optionally normed, a 2-layer BiLSTM over ``kmer_len`` positions, one
    vector into an MLP head.

    Without ``attention`` the features join the LSTM's input and the vector is the centre
    position's output. With it (the ``*Attn`` variants) the LSTM reads signal and sequence only;
    a Dwell variant's LSTM outputs attend to the features over their whole window, then a
    residual LayerNorm, and attention pooling over the positions gives the vector (as the TCN
    family's tail); a Base variant pools its LSTM outputs directly.
    """

    HEAD = "fc"

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 1,
        signal_in_channels: int = 1,
        num_features: int = DEFAULT_NUM_FEATURES,
        seq_encoding: str = "base_onehot",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        conv_channels: Sequence[int] = DEFAULT_CONV_CHANNELS,
        lstm_hidden: int = DEFAULT_LSTM_HIDDEN,
        dropout: float = DEFAULT_DROPOUT,
        feature_mean: Sequence[float] | None = None,
        feature_std: Sequence[float] | None = None,
        has_features: bool = True,
        norm_type: str | None = None,
        attention: bool = False,
        num_attn_heads: int = 4,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        self.attention = attention
        conv_channels = [int(c) for c in conv_channels]
        self.signal_branch = ConvBranch(conv_stack(signal_in_channels, conv_channels, 5, norm_type))
        self.sequence_branch = ConvBranch(
            conv_stack(
                sequence_channels(seq_encoding, signal_kmer_context), conv_channels, 3, norm_type
            )
        )
        # declared in leech's order (signal, sequence, features): the state dict's key order
        self.feature_branch = (
            ConvBranch(
                conv_stack(
                    num_features,
                    conv_channels,
                    3,
                    norm_type,
                    _standardize(feature_mean, feature_std),
                )
            )
            if has_features
            else None
        )
        self.signal_pool = BinMean(kmer_len)
        self.seq_pool = BinMean(kmer_len) if seq_encoding == "signal_kmer" else None
        self.lstm = nn.LSTM(
            conv_channels[2] * (3 if has_features and not attention else 2),
            lstm_hidden,
            num_layers=LSTM_LAYERS,
            batch_first=True,
            bidirectional=True,
            dropout=dropout,
        )
        width = 2 * lstm_hidden
        if attention and has_features:
            self.cross_attn = nn.MultiheadAttention(
                width,
                num_attn_heads,
                dropout=dropout,
                kdim=conv_channels[2],
                vdim=conv_channels[2],
                batch_first=True,
            )
            self.attn_norm = nn.LayerNorm(width)
            self.pool_linear = nn.Linear(width, 1)
        elif attention:
            self.attn_linear = nn.Linear(width, 1)
        self.fc = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(2 * lstm_hidden, FC_HIDDEN),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(FC_HIDDEN, num_out),
        )

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        signal_part = self.signal_pool(self.signal_branch(signal))
        sequence_part = self.sequence_branch(sequence)
        if self.seq_pool is not None:
            sequence_part = self.seq_pool(sequence_part)
        parts = [signal_part, sequence_part]
        if self.feature_branch is not None and not self.attention:
            parts.append(self.feature_branch(features))
        merged = torch.cat(parts, dim=1).transpose(1, 2)
        outputs, _ = self.lstm(merged)
        if not self.attention:
            return outputs[:, self.kmer_len // 2]
        if self.feature_branch is None:
            return attention_pool(self.attn_linear(outputs), outputs)
        keys = self.feature_branch(features).transpose(1, 2)
        combined = cross_attend(outputs, keys, self.cross_attn, self.attn_norm)
        return attention_pool(self.pool_linear(combined), combined)


class ChargingHead(nn.Module):
    """leech's charging-level regression head: Linear -> ReLU -> Linear -> sigmoid, one value
    in [0, 1] per chunk, read from the network's representation."""

    def __init__(self, in_features: int, hidden: int = CHARGING_HEAD_HIDDEN):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, 1), nn.Sigmoid()
        )

    def forward(self, representation: torch.Tensor) -> torch.Tensor:
        return self.net(representation).squeeze(-1)
