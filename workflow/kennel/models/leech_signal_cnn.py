"""kennel's own implementation of leech's SignalCNN, a classifier of the signal window alone
(leech wrote it for tasks where only the signal carries the label, such as barcodes in the
adapter signal); which registry name is which network: :mod:`kennel.models.leech_arch`.

Written from the layer layout leech 0.16.0 declares for it (its ``models/signal_cnn.py``, read for
shapes and parameter names), not from its code; parameter names load a leech state dict with
``strict=True``. It takes ``(signal, sequence, features)`` as the other leech networks do
(:mod:`kennel.models.leech_nets`) and reads only the signal.
"""

from __future__ import annotations

import torch
from torch import nn

from kennel.models.leech_nets import LeechNet


def _block(in_channels: int, out_channels: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv1d(in_channels, out_channels, kernel, padding=kernel // 2),
        nn.BatchNorm1d(out_channels),
        nn.ReLU(),
    )


class SignalCNNNet(LeechNet):
    """leech's SignalCNN: three conv -> batchnorm -> ReLU blocks (``channels``, then twice as
    many), max-pooled by 2 after the first two, averaged over the whole window, and one linear
    layer (``fc``). ``num_out`` names the classes where given, else ``num_classes``."""

    HEAD = "fc"

    def __init__(
        self,
        *,
        kmer_len: int,
        num_classes: int = 2,
        num_out: int | None = None,
        channels: int = 32,
        signal_in_channels: int = 1,
        kernel_size: int = 7,
        seq_encoding: str = "base_onehot",
    ):
        outputs = num_classes if num_out is None else num_out
        super().__init__(kmer_len, outputs, signal_in_channels, seq_encoding)
        self.features = nn.Sequential(
            _block(signal_in_channels, channels, kernel_size),
            nn.MaxPool1d(2),
            _block(channels, 2 * channels, kernel_size),
            nn.MaxPool1d(2),
            _block(2 * channels, 2 * channels, kernel_size),
            nn.AdaptiveAvgPool1d(1),
        )
        self.fc = nn.Linear(2 * channels, outputs)

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        if signal.dim() == 2:
            signal = signal.unsqueeze(1)
        return self.features(signal).squeeze(-1)
