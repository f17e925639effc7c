"""Which of kennel's networks (:mod:`kennel.models.leech_nets`,
:mod:`kennel.models.leech_handwritten` and :mod:`kennel.models.leech_remora`) each leech registry
name is, and how a leech model config shapes it: the settings leech pins per name, the config
keys that override them (as leech's config resolution does), leech's defaults for the rest.
"""

from __future__ import annotations

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
from kennel.models.leech_remora import ConvLSTMRemoraNet
from kennel.trna.leech_spec import config_feature_window


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

# leech's hand-written classes: the network, and the class's defaults where they are not the
# other families' (the signal channels, Remora's two outputs and signal_kmer sequence)
_HANDWRITTEN_VARIANTS: dict[str, dict[str, Any]] = {
    "TransformerDwell": {"network": TransformerDwellNet, "signal_in_channels": 1},
    "TransformerDwellResidual": {"network": TransformerDwellNet, "signal_in_channels": 2},
    "ResNetDwell": {"network": ResNetDwellNet, "signal_in_channels": 1},
    "ConvOnly": {"network": ConvOnlyNet, "signal_in_channels": 1},
    "ConvLSTMRemora": {
        "network": ConvLSTMRemoraNet,
        "signal_in_channels": 1,
        "num_out": 2,
        "seq_encoding": "signal_kmer",
        "dropout": 0.3,
    },
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
}


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
    if architecture in _HANDWRITTEN_VARIANTS:
        variant = _HANDWRITTEN_VARIANTS[architecture]
        # leech passes a hand-written class only the config keys its constructor takes:
        # no feature standardisation among them
        del common["feature_mean"], common["feature_std"]
        common["signal_in_channels"] = int(
            _pick(config, "signal_in_channels", variant["signal_in_channels"])
        )
        if variant["network"] is ConvLSTMRemoraNet:
            return {
                **common,
                "num_out": int(_pick(config, "num_out", variant["num_out"])),
                "seq_encoding": str(_pick(config, "seq_encoding", variant["seq_encoding"])),
                "dropout": float(_pick(config, "dropout", variant["dropout"])),
                "size": int(_pick(config, "size", 64)),
            }
        if variant["network"] is ResNetDwellNet:
            return {
                **common,
                "base_channels": int(_pick(config, "base_channels", 64)),
                "num_attn_heads": int(_pick(config, "num_attn_heads", 4)),
            }
        if variant["network"] is ConvOnlyNet:
            return {
                **common,
                "base_channels": int(_pick(config, "base_channels", 16)),
                "num_blocks": int(_pick(config, "num_blocks", 3)),
                "num_attn_heads": int(_pick(config, "num_attn_heads", 4)),
            }
        return {
            **common,
            "signal_len": int(config["signal_len"]),
            "d_model": int(_pick(config, "d_model", 256)),
            "nhead": int(_pick(config, "nhead", 8)),
            "num_layers": int(_pick(config, "num_layers", 4)),
            "dim_feedforward": int(_pick(config, "dim_feedforward", 1024)),
        }
    raise KeyError(architecture)


def build_network(architecture: str, config: Mapping[str, Any]) -> nn.Module:
    """An untrained network of ``architecture`` shaped by a leech model config."""
    arguments = network_arguments(architecture, config)
    if architecture in _TCN_VARIANTS:
        return TCNDwellNet(**arguments)
    if architecture in _HANDWRITTEN_VARIANTS:
        return _HANDWRITTEN_VARIANTS[architecture]["network"](**arguments)
    return ConvLSTMDwellNet(**arguments)


def feature_width(architecture: str, config: Mapping[str, Any]) -> int:
    """How many bases the ``features`` input spans for this architecture and config."""
    if architecture not in WIDE_FEATURE_ARCHITECTURES:
        return int(config["kmer_len"])
    start, end = config_feature_window({**config, "model_name": architecture})
    return end - start + 1
