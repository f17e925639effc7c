"""The leech architectures beyond the shared fixture's: parameter names leech would write (at
its default sizes too), and the behaviour leech's graphs declare (norm kinds, causal padding,
one chunk at a time). Bundles of them that leech trained are run against leech's own tags in
test_leech_made.py, and the attention variants, experimental TCNs and hand-written classes also
against leech's own logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from kennel.models.leech import load_leech_model
from kennel.models.leech_arch import build_network
from kennel.models.leech_defaults import (
    SUPPORTED_ARCHITECTURES,
    WIDE_FEATURE_ARCHITECTURES,
    config_feature_window,
)
from kennel.models.leech_layers import BinMean, TemporalConvNet, bin_mean_matrix
from kennel.models.leech_nets import ConvLSTMDwellNet
from leech_reference import LSTM_BUNDLE, TCN_BUNDLE

TCN_VARIANTS = {
    "TCNDwell": ("batchnorm", 1),
    "TCNDwellGN": ("groupnorm", 1),
    "TCNDwellLN": ("layernorm", 1),
    "TCNDwellResidual": ("batchnorm", 2),
    "TCNDwellResidualGN": ("groupnorm", 2),
    "TCNDwellResidualLN": ("layernorm", 2),
}
BATCHNORM_ONLY = ("running_mean", "running_var", "num_batches_tracked")
TINY = {
    "signal_len": 40,
    "kmer_len": 5,
    "num_out": 3,
    "num_features": 4,
    "hidden_channels": 8,
    "num_layers": 3,
    "seq_encoding": "signal_kmer",
    "signal_kmer_context": [1, 1],
    "feature_start": -4,
    "feature_end": 4,
}


@pytest.fixture(scope="module")
def leech_tcn_layout(leech_shared) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes leech wrote for a TCNDwell (2-channel signal, signal_kmer)."""
    bundle = torch.load(TCN_BUNDLE, map_location="cpu", weights_only=True)
    return {k: tuple(v.shape) for k, v in bundle["model"]["state_dict"].items()}


@pytest.fixture(scope="module")
def leech_tcn_config(leech_shared) -> dict:
    bundle = torch.load(TCN_BUNDLE, map_location="cpu", weights_only=True)
    return {**bundle["config"], "num_out": 4}


def expected_layout(leech_layout, norm_type: str, channels: int, sequence_channels: int = 36):
    """leech's TCNDwell layout, changed the way its config declares each variant differs."""
    layout = {}
    for key, shape in leech_layout.items():
        if norm_type != "batchnorm" and key.endswith(BATCHNORM_ONLY):
            continue
        if key in ("signal_tcn.network.0.conv1.weight", "signal_tcn.network.0.downsample.weight"):
            shape = (shape[0], channels, shape[2])
        if key in ("seq_tcn.network.0.conv1.weight", "seq_tcn.network.0.downsample.weight"):
            shape = (shape[0], sequence_channels, shape[2])
        layout[key] = shape
    return layout


@pytest.mark.parametrize("variant", TCN_VARIANTS)
def test_tcn_variant_parameter_names(leech_tcn_layout, leech_tcn_config, variant):
    norm_type, channels = TCN_VARIANTS[variant]
    config = {**leech_tcn_config, "model_name": variant}
    del config["signal_in_channels"]  # the variant's own default decides
    network = build_network(variant, config)
    layout = {k: tuple(v.shape) for k, v in network.state_dict().items()}
    assert layout == expected_layout(leech_tcn_layout, norm_type, channels)

    onehot = build_network(variant, {**config, "seq_encoding": "base_onehot"})
    layout = {k: tuple(v.shape) for k, v in onehot.state_dict().items()}
    assert layout == expected_layout(leech_tcn_layout, norm_type, channels, sequence_channels=4)


@pytest.mark.parametrize("variant", TCN_VARIANTS)
def test_tcn_variant_norms(leech_tcn_config, variant):
    norm_type, _ = TCN_VARIANTS[variant]
    network = build_network(variant, {**leech_tcn_config, "model_name": variant})
    norms = [network.signal_tcn.network[0].norm1, network.classifier[3]]
    norms.append(network.feature_branch.conv_layers[1])
    for norm in norms:
        if norm_type == "batchnorm":
            assert isinstance(norm, torch.nn.BatchNorm1d)
        else:
            # leech's "layernorm" is GroupNorm with one group; "groupnorm" uses min(4, C) groups
            assert isinstance(norm, torch.nn.GroupNorm)
            assert norm.num_groups == (1 if norm_type == "layernorm" else 4)


def random_state(network: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, value in network.state_dict().items():
        if key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(7)
        elif key.endswith("running_var"):
            state[key] = torch.rand(value.shape, generator=generator) + 0.5
        else:
            state[key] = torch.randn(value.shape, generator=generator) * 0.3
    return state


def tiny_inputs(batch: int, channels: int, seq_encoding: str = "signal_kmer", seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    signal = torch.randn(batch, channels, TINY["signal_len"], generator=generator)
    if seq_encoding == "signal_kmer":
        sequence = torch.zeros(batch, 12, TINY["signal_len"])
        picks = torch.randint(0, 4, (batch, 3, TINY["signal_len"]), generator=generator)
        for k in range(3):
            sequence.scatter_(1, (4 * k + picks[:, k]).unsqueeze(1), 1.0)
    else:
        sequence = torch.eye(4)[torch.randint(0, 4, (batch, TINY["kmer_len"]))].transpose(1, 2)
    features = torch.randn(batch, TINY["num_features"], 9, generator=generator)
    return signal, sequence, features


@pytest.mark.parametrize("variant", TCN_VARIANTS)
def test_tcn_variant_loads_from_a_leech_bundle_and_scores(tmp_path, variant):
    """A random-weight pair bundle in leech's layout loads strictly and behaves per chunk."""
    _, channels = TCN_VARIANTS[variant]
    # leech's bundler always records the signal channels (1 where a config lacks them)
    config = {**TINY, "model_name": variant, "num_out": 1, "signal_in_channels": channels}
    state = random_state(build_network(variant, config), seed=len(variant))
    path = tmp_path / f"{variant}.pt"
    torch.save(
        {
            "metadata": {"format_version": 1, "comparison_type": "pairwise", "pairs": ["A_B"]},
            "config": config,
            "models": {"A_B": {"state_dict": state}},
        },
        path,
    )
    model = load_leech_model(path)
    assert model.architecture == variant
    network = model.networks["A_B"].module
    assert all(torch.equal(network.state_dict()[k], v) for k, v in state.items())

    inputs = tiny_inputs(6, channels)
    logits = model.score(*inputs).logits
    assert logits.shape == (6, 1) and torch.isfinite(logits).all()
    # eval mode: a chunk's logit does not depend on what else is in the batch
    alone = model.score(*(x[2:3] for x in inputs)).logits
    torch.testing.assert_close(alone, logits[2:3], rtol=0, atol=1e-5)
    if channels == 1:
        flat = model.score(inputs[0][:, 0], inputs[1], inputs[2]).logits
        torch.testing.assert_close(flat, logits, rtol=0, atol=0)


def test_group_and_layer_norm_differ():
    config = {**TINY, "signal_in_channels": 1}
    gn = build_network("TCNDwellGN", config).eval()
    ln = build_network("TCNDwellLN", config).eval()
    ln.load_state_dict(gn.state_dict())  # same names and shapes, different grouping
    inputs = tiny_inputs(3, 1)
    with torch.inference_mode():
        assert not torch.allclose(gn(*inputs), ln(*inputs))


@pytest.mark.parametrize("causal", [True, False])
def test_temporal_blocks_pad_causally_by_default(causal):
    """leech's TCN pads left only (causal, its default): no output sees a later sample."""
    torch.manual_seed(0)
    # BatchNorm in eval mode normalises each position on its own, so only the padding and the
    # dilated convolutions decide which outputs a change reaches
    tcn = TemporalConvNet(1, 4, 3, 3, "batchnorm", 0.0, causal).eval()
    signal = torch.randn(1, 1, 64)
    changed = signal.clone()
    changed[..., 40] += 5.0
    with torch.inference_mode():
        moved = (tcn(changed) - tcn(signal)).abs().amax(dim=1)[0] > 0
    assert moved[40]
    assert moved[41:].any()
    assert moved[:40].any() != causal


def test_bin_means_follow_adaptive_pooling():
    x = torch.randn(2, 3, 400, dtype=torch.float64)
    for bins in (11, 9, 7, 400):
        matrix = bin_mean_matrix(400, bins).double()
        expected = torch.nn.functional.adaptive_avg_pool1d(x, bins)
        torch.testing.assert_close(x @ matrix, expected, rtol=0, atol=1e-6)


def test_bin_means_compile_once():
    """The pooling matrix is part of the compiled graph: one compilation serves every call (a
    matrix cached by the first compiled call made the second compile again)."""
    from torch._dynamo.utils import counters

    pool = BinMean(9)
    x = torch.randn(4, 8, 512)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(pool)
    with torch.inference_mode():
        outputs = [compiled(x) for _ in range(3)]
        eager = pool(x)
    assert counters["stats"]["unique_graphs"] == 1
    for output in outputs:
        torch.testing.assert_close(output, eager, rtol=0, atol=1e-6)


def test_feature_standardisation_shifts_leech_indices(leech_shared):
    bundle = torch.load(LSTM_BUNDLE, map_location="cpu", weights_only=True)
    config = {**bundle["config"], "num_out": 4}
    plain = build_network("ConvLSTMDwell", config).eval()
    plain.load_state_dict(bundle["model"]["state_dict"])
    mean, std = [0.5] * 12, [2.0] * 12
    standardised = build_network(
        "ConvLSTMDwell", {**config, "feature_mean": mean, "feature_std": std}
    )
    state = {}
    for key, value in bundle["model"]["state_dict"].items():
        if key.startswith("feature_branch.conv_layers."):
            index = int(key.split(".")[2])
            key = key.replace(f"conv_layers.{index}.", f"conv_layers.{index + 1}.", 1)
        state[key] = value
    state["feature_branch.conv_layers.0.mean"] = torch.full((1, 12, 1), 0.5)
    state["feature_branch.conv_layers.0.std"] = torch.full((1, 12, 1), 2.0)
    standardised.load_state_dict(state, strict=True)
    standardised.eval()
    assert isinstance(standardised, ConvLSTMDwellNet)
    generator = torch.Generator().manual_seed(1)
    signal = torch.randn(2, 2, 400, generator=generator)
    sequence = torch.zeros(2, 36, 400)
    sequence[:, ::4] = 1.0
    features = torch.randn(2, 12, 11, generator=generator)
    with torch.inference_mode():
        torch.testing.assert_close(
            standardised(signal, sequence, features),
            plain(signal, sequence, (features - 0.5) / 2.0),
            rtol=0,
            atol=1e-5,
        )


def test_convlstm_base_onehot_shapes():
    network = build_network(
        "ConvLSTMDwell", {**TINY, "seq_encoding": "base_onehot", "signal_in_channels": 1}
    ).eval()
    assert network.sequence_branch.conv_layers[0].in_channels == 4
    assert network.seq_pool is None
    signal, sequence, _ = tiny_inputs(3, 1, "base_onehot")
    features = torch.randn(3, TINY["num_features"], TINY["kmer_len"])
    with torch.inference_mode():
        logits = network(signal[:, 0], sequence, features)
    assert logits.shape == (3, TINY["num_out"])


LEECH_MADE = Path(__file__).parent / "leech_made"


# each registry name's conv norm, as leech's conv_lstm.toml and conv_lstm_attn.toml pin it
CONV_LSTM_NORMS = {
    "ConvLSTMDwellBN": "batchnorm",
    "ConvLSTMBase": None,
    "ConvLSTMBaseBN": "batchnorm",
    "ConvLSTMBaseAttn": None,
    "ConvLSTMBaseBNAttn": "batchnorm",
    "ConvLSTMDwellAttn": None,
    "ConvLSTMDwellBNAttn": "batchnorm",
    "ConvLSTMDwellGNAttn": "groupnorm",
    "ConvLSTMDwellLNAttn": "layernorm",
}
ATTENTION_VARIANTS = tuple(name for name in CONV_LSTM_NORMS if name.endswith("Attn"))


@pytest.mark.parametrize("name", CONV_LSTM_NORMS)
def test_the_convlstm_variants_leech_trained_load_and_read_what_they_declare(name):
    """The bundles leech trained (no shared data needed): each loads strictly into the variant
    its registry name pins (its conv norm, a feature branch or not, attention pooling or the
    centre position), and a model without a feature branch gives the same logits whatever
    features it is handed."""
    from kennel.models.leech_describe import describe_leech_model

    model = load_leech_model(LEECH_MADE / f"fx_{name}.pt")
    (network,) = [wrapped.module for wrapped in model.networks.values()]
    network.eval()
    norms = set()
    for module in network.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            norms.add("batchnorm")
        elif isinstance(module, torch.nn.GroupNorm):  # leech's layernorm is one group
            norms.add("layernorm" if module.num_groups == 1 else "groupnorm")
    assert norms == ({CONV_LSTM_NORMS[name]} - {None})
    featureless = name.startswith("ConvLSTMBase")
    assert (network.feature_branch is None) == featureless
    assert network.attention == name.endswith("Attn")
    shapes = model.input_shapes
    generator = torch.Generator().manual_seed(0)
    signal = torch.randn(3, *shapes["signal"], generator=generator)
    sequence = torch.zeros(3, *shapes["sequence"])
    sequence[:, 0] = 1
    features = [torch.randn(3, 12, shapes["features"][1], generator=generator) for _ in range(2)]
    with torch.no_grad():
        logits = [network(signal, sequence, each) for each in features]
    assert torch.equal(logits[0], logits[1]) == featureless
    described = describe_leech_model(model)
    assert ("features: not read (no feature branch)" in described) == featureless


def test_a_convlstm_config_cannot_unpin_its_variant():
    """leech's ConvLSTM graph takes no has_features or norm_type parameter: a config recording
    them changes nothing, the registry name decides (a TCN config's norm_type does count)."""
    config = {**TINY, "conv_channels": [4, 8, 8], "lstm_hidden": 8}
    plain = build_network("ConvLSTMDwell", config)
    recorded = build_network(
        "ConvLSTMDwell", {**config, "has_features": False, "norm_type": "batchnorm"}
    )
    assert plain.state_dict().keys() == recorded.state_dict().keys()
    assert recorded.feature_branch is not None


# leech's experimental TCN graphs (split residual, motor pooling, dwell-only cross-attention)
EXPERIMENTAL_TCNS = (
    *("TCNDwellSplitResidual", "TCNDwellSplitResidualLN", "TCNDwellResidualMotor"),
    *("TCNDwellResidualLNMotor", "TCNDwellResidualDwellAttn", "TCNDwellResidualLNDwellAttn"),
)


# leech's hand-written classes
HANDWRITTEN = ("TransformerDwell", "TransformerDwellResidual", "ResNetDwell", "ConvOnly")
HANDWRITTEN += ("ConvLSTMRemora", "ConvLSTMRemoraBase", "SignalCNN")


@pytest.mark.parametrize("name", [*ATTENTION_VARIANTS, *EXPERIMENTAL_TCNS, *HANDWRITTEN])
def test_networks_compute_leechs_own_logits(name, dumps):
    """leech's own network, loaded from each bundle by the loader leech predict uses (building
    ConvLSTMRemoraBase and SignalCNN from the config, which it does not do itself:
    make_config_built.py), scored the first 64 chunks of the shared TCNDwell dump (make.sh;
    these networks take any feature width): kennel's network gives the same logits to float32
    rounding."""
    reference = np.load(LEECH_MADE / "leech_logits.npz")[name]
    chunks = dumps["tcndwell"]
    model = load_leech_model(LEECH_MADE / f"fx_{name}.pt")
    (network,) = [wrapped.module for wrapped in model.networks.values()]
    count, channels = len(reference), model.input_shapes["signal"][0]
    inputs = (
        torch.from_numpy(chunks["signal"][:count, :channels].copy()),
        torch.from_numpy(chunks["sequence"][:count]).float(),
        torch.from_numpy(chunks["features"][:count]),
    )
    with torch.no_grad():
        logits = network(*inputs)
        alone = network(*(x[5:6] for x in inputs))
    assert count == 64 and logits.shape == reference.shape
    np.testing.assert_allclose(logits.numpy(), reference, rtol=0, atol=2e-6)
    # a chunk's logits do not depend on what else is in the batch
    torch.testing.assert_close(alone, logits[5:6], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["ConvLSTMRemoraBase", "SignalCNN"])
def test_classes_leech_predict_cannot_load_are_built_from_their_configs(name):
    """leech's loader builds these two at the class defaults (one signal channel, two outputs),
    which fit no bundle its trainer writes; kennel builds the config's network and says so."""
    from kennel.models.leech_describe import describe_leech_model

    model = load_leech_model(LEECH_MADE / f"fx_{name}.pt")
    (network,) = [wrapped.module for wrapped in model.networks.values()]
    assert (network.signal_in_channels, network.num_out) == (2, 4)
    described = describe_leech_model(model)
    assert "built from the config, as leech's trainer built it" in described
    assert "features: not read (no feature branch)" in described
    assert ("(not read: the signal alone)" in described) == (name == "SignalCNN")
    # keys leech's class takes into **kwargs unread (its trainer records --model-config's keys)
    # change nothing: ConvLSTMRemoraBase has no feature branch whatever a config says
    stray = {**model.config, "with_features": True, "num_features": None, "feature_mean": None}
    rebuilt = build_network(name, stray)
    rebuilt.load_state_dict(network.state_dict(), strict=True)


OVERRIDES = torch.load(LEECH_MADE / "overrides.pt", weights_only=True)


@pytest.mark.parametrize(
    "case", OVERRIDES["cases"], ids=[case["config"]["model_name"] for case in OVERRIDES["cases"]]
)
def test_config_settings_reach_the_network_as_in_leech(case):
    """Settings a strict load cannot check (attention heads, the motor range, a one-channel
    signal into the split TCN, a window shorter than the motor range, a TCN config's norm and
    padding; the feature statistics are buffers the state dict carries, and the hand-written
    networks take none; a one-hot sequence into ResNetDwell's and ConvOnly's towers): leech
    built each
    network from its config, with random weights (make_overrides.py); kennel's from the same
    config gives leech's logits, and the representation leech's charging-level head reads."""
    config, inputs = case["config"], OVERRIDES["inputs"]
    network = build_network(config["model_name"], config)
    network.load_state_dict(case["state_dict"], strict=True)
    network.eval()
    onehot = config["seq_encoding"] == "base_onehot"
    fed = (
        inputs["signal"][:, : case["signal_channels"]],
        inputs["onehot" if onehot else "sequence"],
        inputs["features"][:, :, : case["feature_width"]],
    )
    with torch.no_grad():
        logits = network(*fed)
        representation = network.representation(*fed)
    torch.testing.assert_close(logits, case["logits"], rtol=0, atol=1e-5)
    # what a charging-level head reads: the input leech's wrapper catches at the head
    assert network.representation_width == case["representation"].shape[1]
    torch.testing.assert_close(representation, case["representation"], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "architecture", ["TCNDwellResidual", "ConvLSTMDwellAttn", "TransformerDwell", "ResNetDwell"]
)
def test_a_leech_network_compiles_once(architecture):
    """Later batches run on the first call's graphs: no recompilation (the LSTM is a graph
    break dynamo does not trace, so that network is several graphs, each compiled once)."""
    from torch._dynamo.utils import counters

    model = load_leech_model(LEECH_MADE / f"fx_{architecture}.pt")
    network = next(iter(model.networks.values())).module.eval()
    shapes = model.input_shapes
    inputs = [torch.rand(8, *shapes[name]) for name in ("signal", "sequence", "features")]
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(network, backend="eager")  # dynamo's graphs and guards only
    with torch.inference_mode():
        compiled(*inputs)  # first: an eager call before it would fill the caches it must not need
        first = counters["stats"]["unique_graphs"]
        outputs = [compiled(*inputs) for _ in range(2)]
        expected = network(*inputs)
    assert first >= 1 and counters["stats"]["unique_graphs"] == first
    for output in outputs:
        torch.testing.assert_close(output, expected, rtol=0, atol=1e-6)


LEECH_DEFAULTS = json.loads((LEECH_MADE / "default_layouts.json").read_text())
DEFAULT_LAYOUTS = LEECH_DEFAULTS["layouts"]


def test_default_layouts_cover_every_supported_architecture():
    assert set(DEFAULT_LAYOUTS) == set(LEECH_DEFAULTS["windows"]) == set(SUPPORTED_ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(LEECH_DEFAULTS["windows"]))
def test_feature_windows_are_the_ones_leech_predict_resolves(name):
    """Whether the network reads the whole feature window, and the window of a config that
    records none (without and with a dwell_margin), as leech's InferenceSpec resolved them for
    each architecture (make_overrides.py): the TCN and ConvLSTM attention families widen it by
    their dwell margin, the hand-written classes (no such attribute) do not."""
    wide, unrecorded, margin_3 = LEECH_DEFAULTS["windows"][name]
    config = {"model_name": name, "kmer_len": 11}
    assert (name in WIDE_FEATURE_ARCHITECTURES) == wide
    assert list(config_feature_window(config)) == unrecorded
    assert list(config_feature_window({**config, "dwell_margin": 3})) == margin_3


@pytest.mark.parametrize("name", sorted(DEFAULT_LAYOUTS))
def test_default_sizes_have_leechs_layout(name):
    """At leech's default sizes, from a config recording only the inputs (so each class's own
    defaults decide the rest, the signal channels included), kennel's network has the
    parameter names and shapes leech's loader gave (make_overrides.py): a bundle of any
    architecture trained at its default size loads."""
    config = {"model_name": name, "signal_len": 400, "kmer_len": 11, "num_features": 12}
    config.update(seq_encoding="signal_kmer", num_out=4)
    network = build_network(name, config)
    layout = {key: list(value.shape) for key, value in network.state_dict().items()}
    assert layout == DEFAULT_LAYOUTS[name]


def test_a_null_setting_of_a_hand_written_class_is_refused(tmp_path):
    """leech passes a hand-written class every config key its constructor names, null ones
    too, and then fails (or, for a null seq_encoding, builds another sequence branch): kennel
    refuses the bundle with one line naming the key rather than take a default."""
    from kennel.errors import KennelError

    bundle = torch.load(LEECH_MADE / "fx_ConvLSTMRemora.pt", weights_only=True)
    bundle["config"]["seq_encoding"] = None
    path = tmp_path / "null.pt"
    torch.save(bundle, path)
    with pytest.raises(KennelError, match="config key 'seq_encoding' is null") as caught:
        load_leech_model(path)
    assert "\n" not in str(caught.value) and "ConvLSTMRemora" in str(caught.value)


def test_a_class_default_the_config_does_not_record_is_refused(tmp_path):
    """A leech checkpoint's kind comes from its config's num_out (1, binary, when unrecorded);
    ConvLSTMRemora's own default is 2 outputs, so a config without num_out would give a binary
    model two logit columns; TransformerDwellResidual's default of 2 signal channels would meet
    one-channel inputs: refused, naming the key."""
    from kennel.errors import KennelError

    bundle = torch.load(LEECH_MADE / "fx_ConvLSTMRemora.pt", weights_only=True)
    state = bundle["model"]["state_dict"]
    state["fc.weight"], state["fc.bias"] = state["fc.weight"][:2], state["fc.bias"][:2]
    config = {key: value for key, value in bundle["config"].items() if key != "num_out"}
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    torch.save({"model_state_dict": state}, directory / "model_best.pt")
    with pytest.raises(KennelError, match="num_out None, read as 1, but ConvLSTMRemora builds 2"):
        load_leech_model(directory)
    # the same for the inputs: a two-channel default the extraction would not give
    bundle = torch.load(LEECH_MADE / "fx_TransformerDwellResidual.pt", weights_only=True)
    del bundle["config"]["signal_in_channels"]
    torch.save(bundle, tmp_path / "residual.pt")
    with pytest.raises(KennelError, match="signal_in_channels None, read as 1, but Transformer"):
        load_leech_model(tmp_path / "residual.pt")
