"""leech's own logits for small random-weight networks whose configs set what the trained bundles
leave at leech's defaults and what a strict load cannot see (attention heads, the motor range,
the dwell branch's size, a one-channel signal into the split TCN, a feature window shorter than
the motor range, a config's norm and padding; feature statistics, as buffers; the hand-written
networks' sizes and default signal channels, and a one-hot sequence into ResNetDwell and
ConvOnly): each network is built by leech 0.16.0's own loader from the config, given seeded
random weights (batchnorm statistics included) and run on seeded random inputs; its logits and
the representation its head reads (what leech's charging-level head is fed) are kept. Writes
overrides.pt beside this file, and default_layouts.json (write_default_layouts).

Run with leech's Python (make.sh does): /opt/leech-venv/bin/python make_overrides.py
"""

import json
from pathlib import Path

import leech.model_loading
import torch
from leech.models import requires_features
from leech_runs import build_from_config

BASE = {"signal_len": 100, "kmer_len": 5, "num_features": 12, "num_out": 3}
BASE.update(seq_encoding="signal_kmer")
SMALL_TCN = {"hidden_channels": 8, "num_layers": 2}
SMALL_LSTM = {"conv_channels": [4, 8, 16], "lstm_hidden": 8}
SMALL_TF = {"d_model": 16, "nhead": 2, "num_layers": 2, "dim_feedforward": 32}
STATS = {
    "feature_mean": [0.1 * i for i in range(12)],
    "feature_std": [1 + 0.1 * i for i in range(12)],
}
# (registry name, config settings, signal channels fed, feature window width fed, what leech
# must have built from them: a check that the setting reached its network)
CASES = [
    ("ConvLSTMDwellAttn", {**SMALL_LSTM, "num_attn_heads": 2, **STATS}, 1, 15,
     lambda m: m.cross_attn.num_heads == 2),
    ("ConvLSTMBaseBNAttn", {**SMALL_LSTM, "signal_in_channels": 2}, 2, 15,
     lambda m: not hasattr(m, "cross_attn")),
    ("TCNDwellResidualDwellAttn",
     {**SMALL_TCN, "num_attn_heads": 2, "num_dwell_features": 3, "dwell_conv_channels": [4, 8, 12],
      "num_dwell_attn_heads": 4, **STATS}, 2, 15,
     lambda m: m.cross_attn.num_heads == 2 and m.dwell_attn.num_heads == 4),
    ("TCNDwellResidualLNMotor",
     {**SMALL_TCN, "motor_pool_start": 2, "motor_pool_end": 6, "motor_proj_dim": 8}, 2, 15,
     lambda m: (m.motor_pool.start, m.motor_pool.stop) == (2, 6)),
    ("TCNDwellResidualMotor", SMALL_TCN, 2, 5, lambda m: m.motor_pool.start == 8),
    ("TCNDwellSplitResidual", {**SMALL_TCN, "signal_in_channels": 1}, 1, 15,
     lambda m: m.signal_tcn.network[0].conv1.in_channels == 1),
    ("TCNDwellSplitResidualLN", {**SMALL_TCN, "norm_type": "groupnorm", "causal": False}, 2, 15,
     lambda m: "GroupNorm(4" in repr(m.classifier)),
    # the hand-written classes: sizes, a signal channel count left to the class's default, the
    # feature statistics they do not take
    ("TransformerDwell", {**SMALL_TF, **STATS}, 1, 15,
     lambda m: m.signal_conv[0].in_channels == 1 and len(m.signal_transformer.layers) == 2),
    ("TransformerDwellResidual", {**SMALL_TF, "nhead": 4}, 2, 7,
     lambda m: m.signal_conv[0].in_channels == 2 and m.cross_attn.num_heads == 4),
    ("ResNetDwell", {"base_channels": 8, "num_attn_heads": 2, **STATS}, 1, 15,
     lambda m: m.cross_attn.num_heads == 2 and m.seq_resnet.final_channels == 8),
    ("ConvLSTMRemora", {"size": 8, **STATS}, 1, 5, lambda m: m.fc.in_features == 8),
]  # fmt: skip
# appended after CASES (each case's seed is its index): a base_onehot sequence (fed the one-hot
# input) has one position per base, which ResNetDwell's sequence tower shrinks to one position
# and pools back up to kmer_len
MORE_CASES = [
    ("ResNetDwell", {"base_channels": 8, "seq_encoding": "base_onehot", "signal_in_channels": 2},
     2, 15, lambda m: m.seq_resnet.conv1[0].in_channels == 4),
    # ConvOnly pools a signal_kmer sequence to kmer_len positions, a one-hot one not at all
    ("ConvOnly", {"base_channels": 4, "num_blocks": 2, "num_attn_heads": 2, **STATS}, 1, 15,
     lambda m: m.cross_attn.num_heads == 2 and len(m.signal_conv) == 2),
    ("ConvOnly", {"base_channels": 2, "num_blocks": 3, "seq_encoding": "base_onehot"}, 1, 9,
     lambda m: len(m.seq_conv) == 3 and not hasattr(m, "seq_pool_sk")),  # leech's name
    # the two classes leech's loader builds at their defaults, built from the config as its
    # trainer builds them (build_from_config): sizes, a kernel, two signal channels
    ("ConvLSTMRemoraBase", {"size": 8, "signal_in_channels": 2, **STATS}, 2, 5,
     lambda m: m.fc.in_features == 8 and not hasattr(m, "feature_branch")),
    ("SignalCNN", {"channels": 4, "kernel_size": 5, "signal_in_channels": 2}, 2, 5,
     lambda m: m.fc.in_features == 8 and m.features[0][0].kernel_size == (5,)),
    # and a one-hot sequence into ConvLSTMRemoraBase, a one-channel signal into SignalCNN (an
    # even kernel: padding k // 2 lengthens each conv's output by one)
    ("ConvLSTMRemoraBase", {"size": 8, "seq_encoding": "base_onehot"}, 1, 5,
     lambda m: m.seq_branch.layers[0].in_channels == 4),
    ("SignalCNN", {"channels": 4, "kernel_size": 6}, 1, 5,
     lambda m: m.features[0][0].in_channels == 1 and m.features[0][0].kernel_size == (6,)),
]  # fmt: skip


def main() -> None:
    build_from_config()
    generator = torch.Generator().manual_seed(1)
    signal = torch.randn(4, 2, BASE["signal_len"], generator=generator)
    codes = torch.randint(0, 36, (4, BASE["signal_len"]), generator=generator)
    sequence = torch.nn.functional.one_hot(codes, 36).transpose(1, 2).float()
    features = torch.randn(4, 12, 15, generator=generator)
    bases = torch.randint(0, 4, (4, BASE["kmer_len"]), generator=generator)
    onehot = torch.nn.functional.one_hot(bases, 4).transpose(1, 2).float()
    cases = []
    for index, (name, settings, channels, width, built) in enumerate(CASES + MORE_CASES):
        config = {**BASE, **settings, "model_name": name}
        fed = onehot if config["seq_encoding"] == "base_onehot" else sequence
        torch.manual_seed(index)
        model = leech.model_loading._instantiate_model(dict(config)).eval()
        assert built(model), f"{name}: leech did not build what the config says"
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.2 * torch.randn_like(parameter))
            for module in model.modules():
                if isinstance(module, torch.nn.BatchNorm1d):
                    module.running_mean.normal_(0, 0.5)
                    module.running_var.uniform_(0.5, 2.0)
            # what leech's charging-level head reads: the input of the module named classifier
            # (else fc), caught as leech's inference wrapper catches it
            head = getattr(model, "classifier", None) or model.fc
            caught: list[torch.Tensor] = []
            hook = head.register_forward_pre_hook(
                lambda module, args, into=caught: into.append(args[0])
            )
            inputs = (signal[:, :channels], fed, features[:, :, :width])
            logits = model(*inputs[: 3 if requires_features(name) else 2])
            hook.remove()
        state = {key: value.clone() for key, value in model.state_dict().items()}
        cases.append({"config": config, "signal_channels": channels, "feature_width": width,
                      "state_dict": state, "logits": logits,
                      "representation": caught[0]})  # fmt: skip
    inputs = {"signal": signal, "sequence": sequence, "onehot": onehot, "features": features}
    torch.save({"inputs": inputs, "cases": cases}, Path(__file__).parent / "overrides.pt")
    write_default_layouts()


def write_default_layouts() -> None:
    """default_layouts.json, for every registry name leech's loader builds from a config (the
    two it builds at their defaults whatever the config says, as build_from_config builds
    them), from a config recording only the inputs, so each class's own defaults (signal
    channels included) decide the rest: the parameter names and shapes at leech's default
    sizes (``layouts``), and the feature window leech predict resolves (``windows``:
    wide_features, then start and end with the window unrecorded, without and with a recorded
    dwell_margin of 3)."""
    from leech.chunking.extractor import resolve_feature_window
    from leech.inference.helpers import InferenceSpec
    from leech.models import MODEL_REGISTRY, wide_features

    layouts, windows = {}, {}
    for name in sorted(MODEL_REGISTRY):
        config = {"model_name": name, "signal_len": 400, "kmer_len": 11, "num_features": 12}
        config.update(seq_encoding="signal_kmer", num_out=4, motif="CCAGGC", motif_offset=2)
        model = leech.model_loading._instantiate_model(config)
        layouts[name] = {key: list(value.shape) for key, value in model.state_dict().items()}
        resolved = [wide_features(name)]
        for margin in (None, 3):
            recorded = config if margin is None else {**config, "dwell_margin": margin}
            spec = InferenceSpec.from_config(
                recorded,
                model_type=name,
                strict_model_type=True,
                model_dwell_margin=lambda c=recorded: getattr(
                    leech.model_loading._instantiate_model(c), "dwell_margin", 0
                ),
            )
            resolved.append(
                list(resolve_feature_window(spec.feature_start, spec.feature_end, 5)[:2])
            )
        windows[name] = resolved
    path = Path(__file__).parent / "default_layouts.json"
    text = json.dumps({"layouts": layouts, "windows": windows}, indent=0, sort_keys=True)
    path.write_text(text + "\n")


if __name__ == "__main__":
    main()
