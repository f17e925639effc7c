"""kennel's own implementation of leech's ConvLSTMRemoraBase, its reproduction of Remora's
ConvLSTM, and of ConvLSTMRemora, the same with leech's feature branch added; which registry name
is which network: :mod:`kennel.models.leech_arch`.

Written from the layer layout leech 0.16.0 declares for it (its ``models/conv_lstm_remora.py``,
read for shapes and parameter names), not from its code; parameter names load a leech state dict
with ``strict=True``. It takes ``(signal, sequence, features)`` as the other leech networks do
(:mod:`kennel.models.leech_nets`), with ``features`` over ``kmer_len`` bases (the Base one ignores
them). Its config's feature statistics are not used, as leech predict does not use them for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT
from kennel.models.leech_nets import DEFAULT_NUM_FEATURES, LeechNet, sequence_channels


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
    one linear layer (``fc``) on its output. Its parameters are exactly leech's class's, with
    its defaults: leech_arch builds it from the config keys its signature names, as leech's
    trainer passed them, so a key leech's class swallows unread never reaches it."""

    HEAD = "fc"

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 2,
        signal_in_channels: int = 1,
        num_features: int | None = DEFAULT_NUM_FEATURES,  # None: no feature branch (Base)
        seq_encoding: str = "signal_kmer",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        size: int = 64,
        dropout: float = 0.3,
    ):
        super().__init__(kmer_len, num_out, signal_in_channels, seq_encoding)
        sequence_in = sequence_channels(seq_encoding, signal_kmer_context)
        self.signal_branch = RemoraBranch(signal_in_channels, ((4, 5, 1), (16, 5, 1), (size, 9, 3)))
        self.seq_branch = RemoraBranch(sequence_in, ((16, 5, 1), (size, 13, 3)))
        self.feature_branch = None
        if num_features is not None:
            self.feature_branch = RemoraBranch(num_features, ((16, 5, 1), (size, 5, 3)))
        branches = 2 if num_features is None else 3
        self.merge_conv = nn.Sequential(*_conv_bn_silu(branches * size, size, 5))
        self.lstm = RemoraLSTM(size)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(size, num_out)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        parts = [self.signal_branch(signal), self.seq_branch(sequence)]
        if self.feature_branch is not None:
            parts.append(self.feature_branch(features))
        shortest = min(part.shape[2] for part in parts)
        merged = self.merge_conv(torch.cat([part[:, :, :shortest] for part in parts], dim=1))
        return self.dropout(self.lstm(merged.transpose(1, 2)))


class ConvLSTMRemoraBaseNet(ConvLSTMRemoraNet):
    """leech's ConvLSTMRemoraBase: Remora's ConvLSTM on signal and sequence only; its
    parameters are leech's class's (no ``num_features``: a config's is not read)."""

    def __init__(
        self,
        *,
        kmer_len: int,
        num_out: int = 2,
        signal_in_channels: int = 1,
        seq_encoding: str = "signal_kmer",
        signal_kmer_context: Sequence[int] = SIGNAL_KMER_CONTEXT,
        size: int = 64,
        dropout: float = 0.3,
    ):
        super().__init__(
            kmer_len=kmer_len,
            num_out=num_out,
            signal_in_channels=signal_in_channels,
            num_features=None,
            seq_encoding=seq_encoding,
            signal_kmer_context=signal_kmer_context,
            size=size,
            dropout=dropout,
        )
