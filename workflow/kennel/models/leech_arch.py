"""kennel's own implementations of the networks in leech's TCN and ConvLSTM families (the
latter with and without attention pooling).

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

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from kennel.models.leech_defaults import (
    CONV_LSTM_ATTENTION_ARCHITECTURES,
    FEATURELESS_ARCHITECTURES,
    NARROW_FEATURE_ARCHITECTURES,
    SIGNAL_KMER_CONTEXT,
    TCN_ARCHITECTURES,
    WIDE_FEATURE_ARCHITECTURES,
)
from kennel.models.leech_layers import (
    BinMean,
    ConvBranch,
    TemporalConvNet,
    attention_pool,
    classifier_head,
    conv_stack,
    cross_attention_pool,
)
from kennel.trna.leech_spec import config_feature_window

# leech's constants (leech/constants.py) for anything a config does not record
DEFAULT_CONV_CHANNELS = (4, 16, 256)
DEFAULT_DROPOUT = 0.1
DEFAULT_NUM_FEATURES = 5
DEFAULT_LSTM_HIDDEN = 96
LSTM_LAYERS = 2
FC_HIDDEN = 64
CLASSIFIER_HIDDEN = (256, 64)
CHARGING_HEAD_HIDDEN = 64

# name -> (family, variant settings); the variant settings are what leech pins per registry name
_TCN_VARIANTS: dict[str, dict[str, Any]] = {
    "TCNDwell": {"norm_type": "batchnorm", "signal_in_channels": 1},
    "TCNDwellGN": {"norm_type": "groupnorm", "signal_in_channels": 1},
    "TCNDwellLN": {"norm_type": "layernorm", "signal_in_channels": 1},
    "TCNDwellResidual": {"norm_type": "batchnorm", "signal_in_channels": 2},
    "TCNDwellResidualGN": {"norm_type": "groupnorm", "signal_in_channels": 2},
    "TCNDwellResidualLN": {"norm_type": "layernorm", "signal_in_channels": 2},
}
# two graphs (leech's conv_lstm.toml and conv_lstm_attn.toml), ten registry names: with or
# without the feature branch, a norm after each conv or none, the centre position or attention
# pooling (a cross-attention on the features for the Dwell ones)
_CONV_LSTM_VARIANTS: dict[str, dict[str, Any]] = {
    "ConvLSTMDwell": {"has_features": True, "norm_type": "none", "attention": False},
    "ConvLSTMDwellBN": {"has_features": True, "norm_type": "batchnorm", "attention": False},
    "ConvLSTMBase": {"has_features": False, "norm_type": "none", "attention": False},
    "ConvLSTMBaseBN": {"has_features": False, "norm_type": "batchnorm", "attention": False},
    "ConvLSTMBaseAttn": {"has_features": False, "norm_type": "none", "attention": True},
    "ConvLSTMBaseBNAttn": {"has_features": False, "norm_type": "batchnorm", "attention": True},
    "ConvLSTMDwellAttn": {"has_features": True, "norm_type": "none", "attention": True},
    "ConvLSTMDwellBNAttn": {"has_features": True, "norm_type": "batchnorm", "attention": True},
    "ConvLSTMDwellGNAttn": {"has_features": True, "norm_type": "groupnorm", "attention": True},
    "ConvLSTMDwellLNAttn": {"has_features": True, "norm_type": "layernorm", "attention": True},
}

# the input extraction reads the families from leech_defaults: a new variant must be in both
assert set(_TCN_VARIANTS) == set(TCN_ARCHITECTURES)
assert {n for n, v in _CONV_LSTM_VARIANTS.items() if v["attention"]} == set(
    CONV_LSTM_ATTENTION_ARCHITECTURES
)
assert {n for n, v in _CONV_LSTM_VARIANTS.items() if not v["attention"]} == set(
    NARROW_FEATURE_ARCHITECTURES
)
assert set(FEATURELESS_ARCHITECTURES) == {
    name for name, variant in _CONV_LSTM_VARIANTS.items() if not variant["has_features"]
}


def _sequence_channels(seq_encoding: str, context: Sequence[int]) -> int:
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


class TCNDwellNet(nn.Module):
    """leech's TCNDwell family (plain, GN, LN, Residual, ResidualGN, ResidualLN).

    Signal and sequence each go through a dilated TCN and are averaged down to ``kmer_len``
    positions; the concatenation queries a cross-attention whose keys and values are the
    feature branch's output over the whole feature window; a residual LayerNorm, attention
    pooling over the ``kmer_len`` positions and a normalised MLP head give the logits.
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
    ):
        super().__init__()
        self.kmer_len = kmer_len
        self.num_out = num_out
        self.signal_in_channels = signal_in_channels
        self.seq_encoding = seq_encoding
        width = 2 * hidden_channels
        feature_width = DEFAULT_CONV_CHANNELS[-1]

        def tcn(channels: int) -> TemporalConvNet:
            return TemporalConvNet(
                channels, hidden_channels, num_layers, kernel_size, norm_type, dropout, causal
            )

        self.signal_tcn = tcn(signal_in_channels)
        self.signal_pool = BinMean(kmer_len)
        self.seq_tcn = tcn(_sequence_channels(seq_encoding, signal_kmer_context))
        # base_onehot is already one position per base; signal_kmer is one per sample
        self.seq_pool = BinMean(kmer_len) if seq_encoding == "signal_kmer" else None
        self.feature_branch = ConvBranch(
            conv_stack(
                num_features,
                DEFAULT_CONV_CHANNELS,
                3,
                norm_type,
                _standardize(feature_mean, feature_std),
            )
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
        self.classifier = classifier_head(width, CLASSIFIER_HIDDEN, num_out, dropout, norm_type)

    @property
    def representation_width(self) -> int:
        return self.pool_linear.in_features

    def representation(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        signal_part = self.signal_pool(self.signal_tcn(signal))
        sequence_part = self.seq_tcn(sequence)
        if self.seq_pool is not None:
            sequence_part = self.seq_pool(sequence_part)
        keys = self.feature_branch(features).transpose(1, 2)
        merged = torch.cat([signal_part, sequence_part], dim=1).transpose(1, 2)
        return cross_attention_pool(merged, keys, self.cross_attn, self.attn_norm, self.pool_linear)

    def head(self, representation: torch.Tensor) -> torch.Tensor:
        return self.classifier(representation)

    def forward(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        return self.head(self.representation(signal, sequence, features))


class ConvLSTMDwellNet(nn.Module):
    """leech's ConvLSTM family: conv branches for signal, sequence and (``has_features``)
    features, each conv optionally normed, a 2-layer BiLSTM over ``kmer_len`` positions, one
    vector into an MLP head.

    Without ``attention`` the features join the LSTM's input and the vector is the centre
    position's output. With it (the ``*Attn`` variants) the LSTM reads signal and sequence only;
    a Dwell variant's LSTM outputs attend to the features over their whole window, then a
    residual LayerNorm, and attention pooling over the positions gives the vector (as the TCN
    family's tail); a Base variant pools its LSTM outputs directly.
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
        super().__init__()
        self.kmer_len = kmer_len
        self.attention = attention
        self.num_out = num_out
        self.signal_in_channels = signal_in_channels
        self.seq_encoding = seq_encoding
        conv_channels = [int(c) for c in conv_channels]
        self.signal_branch = ConvBranch(conv_stack(signal_in_channels, conv_channels, 5, norm_type))
        self.sequence_branch = ConvBranch(
            conv_stack(
                _sequence_channels(seq_encoding, signal_kmer_context), conv_channels, 3, norm_type
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

    @property
    def representation_width(self) -> int:
        return self.fc[1].in_features

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
        return cross_attention_pool(
            outputs, keys, self.cross_attn, self.attn_norm, self.pool_linear
        )

    def head(self, representation: torch.Tensor) -> torch.Tensor:
        return self.fc(representation)

    def forward(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> torch.Tensor:
        return self.head(self.representation(signal, sequence, features))


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


def _pick(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """A config value, or ``default`` when the key is absent or null."""
    value = config.get(key, default)
    return default if value is None and default is not None else value


def network_arguments(architecture: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments for ``architecture`` from a leech model config.

    For the TCN family config keys override the variant's pinned settings, as leech's config
    resolution does (``norm_type`` and ``signal_in_channels`` included); the ConvLSTM family's
    ``has_features`` and ``norm_type`` are not among its graphs' parameters, so leech drops them
    from a config and the registry name decides (and whether it pools by attention). Anything
    unrecorded takes leech's default.
    """
    common = {
        "kmer_len": int(config["kmer_len"]),
        "num_out": int(_pick(config, "num_out", 1)),
        "num_features": int(_pick(config, "num_features", DEFAULT_NUM_FEATURES)),
        "seq_encoding": str(_pick(config, "seq_encoding", "base_onehot")),
        "signal_kmer_context": tuple(
            int(c) for c in _pick(config, "signal_kmer_context", SIGNAL_KMER_CONTEXT)
        ),
        "dropout": float(_pick(config, "dropout", DEFAULT_DROPOUT)),
        "feature_mean": config.get("feature_mean"),
        "feature_std": config.get("feature_std"),
    }
    if architecture in _TCN_VARIANTS:
        variant = _TCN_VARIANTS[architecture]
        return {
            **common,
            "signal_in_channels": int(
                _pick(config, "signal_in_channels", variant["signal_in_channels"])
            ),
            "hidden_channels": int(_pick(config, "hidden_channels", 64)),
            "num_layers": int(_pick(config, "num_layers", 6)),
            "kernel_size": int(_pick(config, "kernel_size", 3)),
            "num_attn_heads": int(_pick(config, "num_attn_heads", 4)),
            "norm_type": str(_pick(config, "norm_type", variant["norm_type"])),
            "causal": bool(_pick(config, "causal", True)),
        }
    if architecture in _CONV_LSTM_VARIANTS:
        variant = _CONV_LSTM_VARIANTS[architecture]
        return {
            **common,
            "has_features": variant["has_features"],
            "norm_type": None if variant["norm_type"] == "none" else variant["norm_type"],
            "attention": variant["attention"],
            "num_attn_heads": int(_pick(config, "num_attn_heads", 4)),
            "signal_in_channels": int(_pick(config, "signal_in_channels", 1)),
            "conv_channels": tuple(
                int(c) for c in _pick(config, "conv_channels", DEFAULT_CONV_CHANNELS)
            ),
            "lstm_hidden": int(_pick(config, "lstm_hidden", DEFAULT_LSTM_HIDDEN)),
        }
    raise KeyError(architecture)


def build_network(architecture: str, config: Mapping[str, Any]) -> nn.Module:
    """An untrained network of ``architecture`` shaped by a leech model config."""
    arguments = network_arguments(architecture, config)
    if architecture in _TCN_VARIANTS:
        return TCNDwellNet(**arguments)
    return ConvLSTMDwellNet(**arguments)


def feature_width(architecture: str, config: Mapping[str, Any]) -> int:
    """How many bases the ``features`` input spans for this architecture and config."""
    if architecture not in WIDE_FEATURE_ARCHITECTURES:
        return int(config["kmer_len"])
    start, end = config_feature_window({**config, "model_name": architecture})
    return end - start + 1
