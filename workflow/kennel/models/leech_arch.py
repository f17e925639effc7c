"""Which of kennel's networks (:mod:`kennel.models.leech_nets`,
:mod:`kennel.models.leech_handwritten`, :mod:`kennel.models.leech_remora` and
:mod:`kennel.models.leech_signal_cnn`) each leech registry name is, and how a leech model config
shapes it: the settings leech pins per name, the config keys that override them (as leech's
config resolution does), leech's defaults for the rest.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch import nn

from kennel.models.leech_defaults import (
    CONV_LSTM_ATTENTION_ARCHITECTURES,
    FEATURELESS_ARCHITECTURES,
    HANDWRITTEN_ARCHITECTURES,
    NARROW_FEATURE_ARCHITECTURES,
    SIGNAL_KMER_CONTEXT,
    TCN_ARCHITECTURES,
    WIDE_FEATURE_ARCHITECTURES,
    config_feature_window,
)
from kennel.models.leech_handwritten import ConvOnlyNet, ResNetDwellNet, TransformerDwellNet
from kennel.models.leech_nets import (
    DEFAULT_CONV_CHANNELS,
    DEFAULT_DROPOUT,
    DEFAULT_LSTM_HIDDEN,
    DEFAULT_NUM_FEATURES,
    DWELL_CONV_CHANNELS,
    ConvLSTMDwellNet,
    TCNDwellNet,
)
from kennel.models.leech_remora import ConvLSTMRemoraBaseNet, ConvLSTMRemoraNet
from kennel.models.leech_signal_cnn import SignalCNNNet


def _tcn(norm_type: str, signal_in_channels: int, graph: str | None = None) -> dict[str, Any]:
    return {"norm_type": norm_type, "signal_in_channels": signal_in_channels, "graph": graph}


# what leech pins per registry name: five graphs (tcn_dwell*.toml), each with its norms
_TCN_VARIANTS: dict[str, dict[str, Any]] = {
    "TCNDwell": _tcn("batchnorm", 1),
    "TCNDwellGN": _tcn("groupnorm", 1),
    "TCNDwellLN": _tcn("layernorm", 1),
    "TCNDwellResidual": _tcn("batchnorm", 2),
    "TCNDwellResidualGN": _tcn("groupnorm", 2),
    "TCNDwellResidualLN": _tcn("layernorm", 2),
    # leech's experimental graphs on the residual TCN
    "TCNDwellSplitResidual": _tcn("batchnorm", 2, "split"),
    "TCNDwellSplitResidualLN": _tcn("layernorm", 2, "split"),
    "TCNDwellResidualMotor": _tcn("batchnorm", 2, "motor"),
    "TCNDwellResidualLNMotor": _tcn("layernorm", 2, "motor"),
    "TCNDwellResidualDwellAttn": _tcn("batchnorm", 2, "dwell_attn"),
    "TCNDwellResidualLNDwellAttn": _tcn("layernorm", 2, "dwell_attn"),
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

# leech's hand-written classes: kennel's network for each, and the defaults a registry name
# changes (TransformerDwellResidual is TransformerDwell with a two-channel signal); the rest are
# each constructor's own keyword defaults, which are leech's
_HANDWRITTEN_VARIANTS: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {
    "TransformerDwell": (TransformerDwellNet, {}),
    "TransformerDwellResidual": (TransformerDwellNet, {"signal_in_channels": 2}),
    "ResNetDwell": (ResNetDwellNet, {}),
    "ConvOnly": (ConvOnlyNet, {}),
    "ConvLSTMRemora": (ConvLSTMRemoraNet, {}),
    "ConvLSTMRemoraBase": (ConvLSTMRemoraBaseNet, {}),
    "SignalCNN": (SignalCNNNet, {}),
}

# the input extraction reads the families from leech_defaults: a new variant must be in both
assert set(_TCN_VARIANTS) == set(TCN_ARCHITECTURES)
assert {n for n, v in _CONV_LSTM_VARIANTS.items() if v["attention"]} == set(
    CONV_LSTM_ATTENTION_ARCHITECTURES
)
assert {n for n, v in _CONV_LSTM_VARIANTS.items() if not v["attention"]} == set(
    NARROW_FEATURE_ARCHITECTURES
) - set(HANDWRITTEN_ARCHITECTURES)
assert set(_HANDWRITTEN_VARIANTS) == set(HANDWRITTEN_ARCHITECTURES)
assert set(FEATURELESS_ARCHITECTURES) == {
    name for name, variant in _CONV_LSTM_VARIANTS.items() if not variant["has_features"]
} | {"ConvLSTMRemoraBase", "SignalCNN"}


def _pick(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """A config value, or ``default`` when the key is absent or null."""
    value = config.get(key, default)
    return default if value is None and default is not None else value


def _tcn_graph_arguments(graph: str | None, config: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of leech's experimental TCN graphs, with their TOML defaults."""
    if graph == "split":
        return {"split_residual": True}
    if graph == "motor":
        return {
            "motor_pool": (
                int(_pick(config, "motor_pool_start", 8)),
                int(_pick(config, "motor_pool_end", 13)),
            ),
            "motor_proj_dim": int(_pick(config, "motor_proj_dim", 64)),
        }
    if graph == "dwell_attn":
        # leech takes its default dwell branch for any false value, an empty list included
        channels = config.get("dwell_conv_channels") or DWELL_CONV_CHANNELS
        return {
            "dwell_attention": True,
            "num_dwell_features": int(_pick(config, "num_dwell_features", 5)),
            "dwell_conv_channels": tuple(int(c) for c in channels),
            "num_dwell_attn_heads": int(_pick(config, "num_dwell_attn_heads", 2)),
        }
    return {}


def _handwritten_arguments(architecture: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """leech builds a hand-written class from the config keys its constructor takes and drops
    the rest (feature statistics among them); kennel's classes take leech's parameter names, so
    the same filter on their signatures gives the same arguments (and none names a parameter
    that leech's class would take into ``**kwargs`` unread, so such a key in a config changes
    neither network). An unrecorded key keeps the constructor's default; a null
    one is refused (leech passes it on: most classes fail on it, a null seq_encoding builds
    another sequence branch, SignalCNN counts num_classes outputs, which the bundle's num_out
    would not describe)."""
    network, defaults = _HANDWRITTEN_VARIANTS[architecture]
    recorded = {key: config[key] for key in inspect.signature(network).parameters if key in config}
    null = [key for key, value in recorded.items() if value is None]
    if null:
        raise ValueError(f"config key {null[0]!r} is null")
    return {**defaults, **recorded}


def network_arguments(architecture: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments for ``architecture`` from a leech model config.

    For the TCN family config keys override the variant's pinned settings, as leech's config
    resolution does (``norm_type`` and ``signal_in_channels`` included); the ConvLSTM family's
    ``has_features`` and ``norm_type`` are not among its graphs' parameters, so leech drops them
    from a config and the registry name decides (and whether it pools by attention). Anything
    unrecorded takes leech's default. A hand-written class takes the config keys its
    constructor names, as leech's loader passes them (:func:`_handwritten_arguments`).
    """
    if architecture in _HANDWRITTEN_VARIANTS:
        return _handwritten_arguments(architecture, config)
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
            **_tcn_graph_arguments(variant["graph"], config),
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
    if architecture in _HANDWRITTEN_VARIANTS:
        return _HANDWRITTEN_VARIANTS[architecture][0](**arguments)
    return ConvLSTMDwellNet(**arguments)


def feature_width(architecture: str, config: Mapping[str, Any]) -> int:
    """How many bases the ``features`` input spans for this architecture and config."""
    if architecture not in WIDE_FEATURE_ARCHITECTURES:
        return int(config["kmer_len"])
    start, end = config_feature_window({**config, "model_name": architecture})
    return end - start + 1
