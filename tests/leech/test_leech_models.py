"""leech models load safely into kennel's own networks and reproduce leech's logits."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
from kennel.cli import main
from kennel.errors import KennelError
from kennel.models.bundle import register_architecture, save_bundle
from kennel.models.leech import load_leech_model
from kennel.models.leech_arch import build_network
from kennel.models.leech_defaults import SUPPORTED_ARCHITECTURES
from kennel.models.leech_describe import describe_leech_model
from kennel.models.leech_files import is_leech_bundle
from kennel.models.leech_model import BINARY, MULTICLASS, PAIRWISE
from leech_reference import (
    LSTM_BUNDLE,
    PAIR_BUNDLE,
    TCN_BUNDLE,
    TCN_CHECKPOINT,
    as_inputs,
    one_vs_all_bundle,
)

TOLERANCE = 1e-5
# nearly every test here starts from one of leech's reference models
pytestmark = pytest.mark.usefixtures("leech_shared")


def raw_bundle(path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def save(tmp_path, bundle: dict, name: str = "b.pt"):
    path = tmp_path / name
    torch.save(bundle, path)
    return path


@pytest.mark.parametrize("name", ["tcndwell", "convlstmdwell"])
def test_logits_match_leech_dump(leech_models, dumps, name):
    dump = dumps[name]
    logits = [
        leech_models[name].score(*as_inputs(dump, slice(start, start + 128))).logits
        for start in range(0, len(dump["read_id"]), 128)
    ]
    difference = np.abs(torch.cat(logits).numpy() - dump["logits"]).max()
    print(f"{name}: max |kennel - leech| logit difference {difference:.3g}")
    assert difference < TOLERANCE, f"{name}: max |kennel - leech| logit difference {difference}"
    # the dump's probabilities are torch.softmax of its logits, which the tags rely on
    probs = torch.softmax(torch.from_numpy(dump["logits"]), dim=-1).numpy()
    assert np.array_equal(probs, dump["probs"])


def test_checkpoint_directory_is_the_bundled_model(leech_models, dumps):
    bundled, checkpoint = leech_models["tcndwell"], leech_models["tcndwell_checkpoint"]
    assert checkpoint.source == "checkpoint" and checkpoint.kind == MULTICLASS
    assert checkpoint.class_names == bundled.class_names == ("Ala", "Gly", "Leu", "Phe")
    ours = bundled.networks["model"].module.state_dict()
    theirs = checkpoint.networks["model"].module.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    dump = dumps["tcndwell"]
    logits = checkpoint.score(*as_inputs(dump, slice(0, 3))).logits.numpy()
    assert np.abs(logits - dump["logits"][:3]).max() < TOLERANCE


def test_kinds_classes_and_inputs(leech_models):
    pair = leech_models["gly_phe"]
    assert pair.kind == PAIRWISE and pair.pairs == ("Gly_Phe",)
    assert pair.pair_classes("Gly_Phe") == ("Gly", "Phe")  # empty pair_labels: name split
    assert pair.class_names == ("Gly", "Phe")
    single = load_leech_model(PAIR_BUNDLE, pair="Gly_Phe")
    assert single.kind == BINARY and single.class_names == ("Gly", "Phe")
    for model in leech_models.values():
        assert model.input_shapes == {
            "signal": (2, 400),
            "sequence": (36, 400),
            "features": (12, 11),
        }


def test_pairwise_bundle_shares_the_dumped_preprocessing(leech_models):
    """The pairwise BAM test feeds the TCNDwell dump to the Gly_Phe network: fair only if
    both bundles extract chunks the same way."""
    model_keys = {"model_name", "num_out", "label_map", "cl_regression"}
    pair_config = leech_models["gly_phe"].config
    tcn_config = raw_bundle(TCN_BUNDLE)["config"]
    differing = {
        key
        for key in pair_config.keys() | tcn_config.keys()
        if pair_config.get(key) != tcn_config.get(key)
    }
    assert differing <= model_keys, differing


def test_leech_key_spellings_are_accepted(tmp_path, leech_models):
    bundle = raw_bundle(LSTM_BUNDLE)
    bundle["model"]["state_dict"] = {
        f"_orig_mod.{k}": v for k, v in bundle["model"]["state_dict"].items()
    }
    loaded = load_leech_model(save(tmp_path, bundle))
    assert loaded.networks["model"].parameter_count > 0

    bundle = raw_bundle(PAIR_BUNDLE)
    old = {
        k.replace(".norm1.", ".bn1.").replace(".norm2.", ".bn2."): v
        for k, v in bundle["models"]["Gly_Phe"]["state_dict"].items()
    }
    assert any(".bn1." in k for k in old)
    bundle["models"]["Gly_Phe"]["state_dict"] = old
    loaded = load_leech_model(save(tmp_path, bundle, "old.pt"))
    ours = loaded.networks["Gly_Phe"].module.state_dict()
    reference = leech_models["gly_phe"].networks["Gly_Phe"].module.state_dict()
    assert all(torch.equal(ours[k], reference[k]) for k in reference)


# ---- calibration, Platt scaling, charging head: formulas from leech's calibration.py,
# ---- inference/bundle.py and losses.RegressionHead, recomputed here in float64 numpy


def _raw_logits(model, inputs) -> np.ndarray:
    network = model.networks["model"].module
    with torch.inference_mode():
        return network(*inputs).double().numpy()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


MATRIX = [[1.2, 0.1, 0.0, -0.2], [0.0, 0.9, 0.3, 0.0], [0.1, 0.0, 1.1, 0.0], [0, 0, 0, 0.8]]
BIAS = [0.1, -0.2, 0.0, 0.3]
ALPHA, BETA = [1.1, 0.9, 1.3, 0.7], [0.0, 0.2, -0.1, 0.05]
CALIBRATIONS = {
    "temperature": ({"temperature": 1.7}, lambda z: z / 1.7),
    "matrix": ({"W": MATRIX, "b": BIAS}, lambda z: z @ np.array(MATRIX).T + np.array(BIAS)),
    "dirichlet": (
        {"alpha": ALPHA, "beta": BETA},
        lambda z: np.array(ALPHA) * _log_softmax(z) + np.array(BETA),
    ),
}


@pytest.mark.parametrize("method", CALIBRATIONS)
def test_multiclass_calibration_is_applied_before_softmax(tmp_path, dumps, method):
    params, formula = CALIBRATIONS[method]
    bundle = raw_bundle(LSTM_BUNDLE)
    calibration = {"method": method, **params, "ece_before": 0.2, "ece_after": 0.1}
    bundle["model"]["calibration"] = calibration
    model = load_leech_model(save(tmp_path, bundle))
    assert model.calibration is not None and model.calibration.method == method
    inputs = as_inputs(dumps["convlstmdwell"], slice(0, 3))
    expected = formula(_raw_logits(model, inputs))
    calibrated = model.score(*inputs).logits.double().numpy()
    assert np.abs(calibrated - expected).max() < TOLERANCE
    assert method in describe_leech_model(model)
    if method != "temperature":
        _assert_the_calibration_is_the_modules(model, inputs, list(params.values()), calibrated)


def _assert_the_calibration_is_the_modules(model, inputs, values, calibrated) -> None:
    """The calibration's weight and bias are the module's buffers, which its forward reads:
    they move with it to the device (in a CUDA forward a tensor left on the CPU would cost a
    copy a batch and keep inductor from CUDA graphs)."""
    module = copy.deepcopy(model.module())
    held = []
    for value in values:  # leech's float32 values
        expected = torch.tensor(value, dtype=torch.float32)
        [found] = [
            t for t in module.buffers() if t.shape == expected.shape and torch.equal(t, expected)
        ]
        held.append(found)
    moved = copy.deepcopy(module).to(torch.float64)
    assert sum(t.dtype == torch.float64 for t in moved.buffers()) >= len(values)
    for buffer in held:  # the forward reads these, not a copy kept elsewhere
        buffer.zero_()
    with torch.inference_mode():
        changed = module(*inputs)[0].double().numpy()
    assert np.abs(changed - calibrated).max() > 1e-3


def test_a_pair_listed_twice_is_refused(tmp_path):
    bundle = raw_bundle(PAIR_BUNDLE)
    bundle["metadata"]["pairs"] = ["Gly_Phe", "Gly_Phe"]
    with pytest.raises(KennelError, match="lists pair 'Gly_Phe' twice"):
        load_leech_model(save(tmp_path, bundle))


def test_unknown_calibration_is_refused(tmp_path):
    bundle = raw_bundle(LSTM_BUNDLE)
    bundle["model"]["calibration"] = {"method": "isotonic"}
    with pytest.raises(KennelError, match="unknown calibration method 'isotonic'"):
        load_leech_model(save(tmp_path, bundle))


def test_platt_scaling_applies_to_the_whole_pairwise_bundle_only(tmp_path, dumps):
    bundle = raw_bundle(PAIR_BUNDLE)
    bundle["models"]["Gly_Phe"]["platt_a"] = 0.8
    bundle["models"]["Gly_Phe"]["platt_b"] = -0.3
    path = save(tmp_path, bundle)
    model = load_leech_model(path)
    inputs = as_inputs(dumps["tcndwell"], slice(0, 2))
    with torch.inference_mode():
        raw = model.networks["Gly_Phe"].module(*inputs).double().numpy().reshape(-1)
    scaled = model.score(*inputs).logits.double().numpy().reshape(-1)
    assert np.abs(scaled - (0.8 * raw - 0.3)).max() < TOLERANCE
    # leech predict --pair loads the network alone, without its Platt parameters
    single = load_leech_model(path, pair="Gly_Phe")
    assert np.abs(single.score(*inputs).logits.double().numpy().reshape(-1) - raw).max() < 1e-6


def test_charging_head_reads_the_representation(tmp_path, dumps):
    generator = torch.Generator().manual_seed(3)
    width = 192  # ConvLSTMDwell: the BiLSTM's centre output, 2 x 96
    head = {
        "net.0.weight": torch.randn(64, width, generator=generator) * 0.1,
        "net.0.bias": torch.randn(64, generator=generator) * 0.1,
        "net.2.weight": torch.randn(1, 64, generator=generator) * 0.1,
        "net.2.bias": torch.randn(1, generator=generator) * 0.1,
    }
    bundle = raw_bundle(LSTM_BUNDLE)
    bundle["model"]["cl_regression_head_state_dict"] = head
    model = load_leech_model(save(tmp_path, bundle))
    inputs = as_inputs(dumps["convlstmdwell"], slice(0, 3))
    scores = model.score(*inputs)
    network = model.networks["model"].module
    with torch.inference_mode():
        representation = network.representation(*inputs).double().numpy()
    hidden = np.maximum(
        representation @ head["net.0.weight"].double().numpy().T
        + head["net.0.bias"].double().numpy(),
        0,
    )
    value = hidden @ head["net.2.weight"].double().numpy().T + head["net.2.bias"].double().numpy()
    expected = 1 / (1 + np.exp(-value[:, 0]))
    assert np.abs(scores.charging.double().numpy() - expected).max() < TOLERANCE
    # the logits are untouched by the head
    assert np.abs(scores.logits.numpy() - dumps["convlstmdwell"]["logits"][:3]).max() < TOLERANCE

    bundle["model"]["cl_regression_head_state_dict"] = {
        **head,
        "net.0.weight": torch.zeros(64, 10),
    }
    with pytest.raises(KennelError, match="charging head does not fit"):
        load_leech_model(save(tmp_path, bundle, "bad_head.pt"))


# ---- other leech bundle formats


def test_format_4_stacked_bundle(tmp_path, leech_models, dumps):
    pair = raw_bundle(PAIR_BUNDLE)
    state = pair["models"]["Gly_Phe"]["state_dict"]
    bundle = {
        "metadata": {**pair["metadata"], "format_version": 4, "vmap": True},
        "config": pair["config"],
        "stacked_params": {
            k: v.unsqueeze(0)
            for k, v in state.items()
            if "running" not in k and "num_batches" not in k
        },
        "stacked_buffers": {
            k: v.unsqueeze(0) for k, v in state.items() if "running" in k or "num_batches" in k
        },
        "platt_a": torch.tensor([1.0]),
        "platt_b": torch.tensor([0.0]),
    }
    model = load_leech_model(save(tmp_path, bundle))
    inputs = as_inputs(dumps["tcndwell"], slice(0, 2))
    expected = leech_models["gly_phe"].score(*inputs).logits
    assert torch.equal(model.score(*inputs).logits, expected)


def test_format_3_exported_weights_are_read_without_unpickling(tmp_path):
    """A torch.export archive's raw weight payloads, mapped onto kennel's network."""
    config = {
        "model_name": "TCNDwellResidualLN",
        "signal_len": 40,
        "kmer_len": 5,
        "num_out": 1,
        "signal_in_channels": 2,  # leech's bundler always records it
        "num_features": 3,
        "hidden_channels": 4,
        "num_layers": 2,
        "seq_encoding": "base_onehot",
        "feature_start": -3,
        "feature_end": 3,
    }
    torch.manual_seed(5)
    network = build_network("TCNDwellResidualLN", config).eval()

    class Carrier(torch.nn.Module):
        """Holds the network's parameters under their own names; a trivial graph exports fast."""

        def __init__(self, inner):
            super().__init__()
            for name, child in inner.named_children():
                self.add_module(name, child)

        def forward(self, x):
            return x + self.pool_linear.bias

    program = torch.export.export(Carrier(network), (torch.randn(2, 1),))
    archive = io.BytesIO()
    torch.export.save(program, archive)
    bundle = {
        "metadata": {
            "format_version": 3,
            "comparison_type": "pairwise",
            "pairs": ["A_B"],
            "torchscript": True,
            "architecture": "TCNDwellResidualLN",
        },
        "config": config,
        "models": {"A_B": {"exported_bytes": archive.getvalue(), "best_epoch": 1}},
    }
    model = load_leech_model(save(tmp_path, bundle))
    loaded = model.networks["A_B"].module.state_dict()
    reference = network.state_dict()
    assert loaded.keys() == reference.keys()
    assert all(torch.equal(loaded[k], reference[k]) for k in reference)


def test_format_2_torchscript_is_refused(tmp_path):
    bundle = raw_bundle(PAIR_BUNDLE)
    bundle["metadata"]["format_version"] = 2
    bundle["models"]["Gly_Phe"] = {"traced_bytes": b"PK"}
    path = save(tmp_path, bundle)
    with pytest.raises(KennelError) as caught:
        load_leech_model(path)
    message = str(caught.value)
    assert str(path) in message and "format 2" in message and "\n" not in message


# ---- refusals: one line naming the file


class Payload:
    """Unpickling this needs code execution (a callable), which weights_only forbids."""

    def __reduce__(self):
        return (print, ("this must never run",))


def _one_line_error(path, match: str) -> str:
    with pytest.raises(KennelError) as caught:
        load_leech_model(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert match in message, message
    return message


def test_unsupported_architecture_is_named(tmp_path):
    bundle = raw_bundle(PAIR_BUNDLE)
    bundle["config"]["model_name"] = "TracedModelWrapper"
    message = _one_line_error(save(tmp_path, bundle), "'TracedModelWrapper' is not supported")
    assert all(name in message for name in SUPPORTED_ARCHITECTURES)


def test_pickle_needing_code_execution_is_refused(tmp_path, capsys):
    bundle = raw_bundle(PAIR_BUNDLE)
    bundle["metadata"]["note"] = Payload()
    path = tmp_path / "evil.pt"
    torch.save(bundle, path)
    _one_line_error(path, "refusing to load a bundle that needs code execution")
    assert "must never run" not in capsys.readouterr().out
    assert not is_leech_bundle(path)


def test_truncated_bundle(tmp_path):
    data = PAIR_BUNDLE.read_bytes()
    path = tmp_path / "short.pt"
    path.write_bytes(data[: len(data) // 2])
    _one_line_error(path, "truncated or corrupt")


def test_checkpoint_directory_needs_config(tmp_path):
    (tmp_path / "model_best.pt").write_bytes((TCN_CHECKPOINT / "model_best.pt").read_bytes())
    _one_line_error(tmp_path, "has no config.json")


def test_checkpoint_numpy_allowance_is_only_numpy(tmp_path):
    """model_best.pt may pickle numpy arrays (the real one loads); anything else is refused."""
    (tmp_path / "config.json").write_bytes((TCN_CHECKPOINT / "config.json").read_bytes())
    state = {"rng": np.arange(3, dtype=np.uint32), "extra": Payload()}
    torch.save({"model_state_dict": {}, **state}, tmp_path / "model_best.pt")
    message = _one_line_error(tmp_path, "needs code execution")
    assert "model_best.pt" in message


def test_weights_that_do_not_fit(tmp_path):
    bundle = raw_bundle(PAIR_BUNDLE)
    del bundle["models"]["Gly_Phe"]["state_dict"]["attn_norm.weight"]
    _one_line_error(save(tmp_path, bundle), "weights do not fit TCNDwell (1 missing")


def test_kennel_bundles_are_not_leech_bundles(tmp_path):
    @register_architecture("leech_test_linear")
    class Linear(torch.nn.Linear):
        pass

    path = tmp_path / "kennel.pt"
    save_bundle(path, Linear(2, 2), {"in_features": 2, "out_features": 2})
    assert not is_leech_bundle(path)
    _one_line_error(path, "a kennel bundle, not a leech model")
    assert not is_leech_bundle(tmp_path / "missing.pt")


def test_detection(leech_shared):
    for path in (TCN_BUNDLE, TCN_CHECKPOINT, LSTM_BUNDLE, PAIR_BUNDLE):
        assert is_leech_bundle(path), path
    assert not is_leech_bundle(leech_shared / "data" / "fx.bam")


def test_bundle_info_prints_leech_bundles(capsys, leech_shared):
    assert main(["bundle-info", str(PAIR_BUNDLE)]) == 0
    out = capsys.readouterr().out
    for text in (
        "leech bundle, format 1",
        "leech version: 0.16.0",
        "architecture: TCNDwell",
        "kind: pairwise",
        "pair Gly_Phe: Gly (0) vs Phe (1)",
        "signal_kmer (context 4,4)",
        "features: (12, 11), bases -5..+5",
        "motif: CCAGGC offset 2",
        "k-mer table sha256: f11fda3f7fed",
        "signal-map refinement: on (scale_iters 2, half_bandwidth 5",
    ):
        assert text in out, text
    assert main(["bundle-info", str(TCN_CHECKPOINT)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint directory" in out and "classes: Ala, Gly, Leu, Phe" in out
    assert "kind: multiclass (4 classes" in out


def test_abstain_on_junction_indel_is_refused_for_one_pair_as_leech_refuses_it():
    """One pair of a pairwise bundle is a binary model: leech predict stops on the flag (its
    MP/ML tags have no call to abstain from); the whole bundle runs and ignores it."""
    from kennel.trna.model_job import ClassifySettings
    from kennel.trna.tag import tagging_for

    settings = ClassifySettings(abstain_on_junction_indel=True, pair="Gly_Phe")
    with pytest.raises(KennelError, match="applies to multiclass models only .*binary model"):
        tagging_for(PAIR_BUNDLE, settings)


@pytest.mark.parametrize(
    ("bundle", "pair", "applies"),
    [
        (PAIR_BUNDLE, None, True),
        (PAIR_BUNDLE, "Gly_Phe", False),
        (TCN_BUNDLE, None, False),
        ("one_vs_all", None, False),
    ],
    ids=["pairwise", "one_pair", "multiclass", "one_vs_all"],
)
def test_aggregation_applies_to_a_whole_pairwise_bundle_only(
    caplog, tmp_path, bundle, pair, applies
):
    """leech predict --aggregation chooses how a whole pairwise bundle votes; a multiclass
    model, one pair (a binary model) or a one-vs-all bundle ignores it there, so kennel ignores
    it too, saying so."""
    from kennel.trna.leech_classify import leech_tag_options
    from kennel.trna.model_job import ClassifySettings

    if bundle == "one_vs_all":
        bundle = one_vs_all_bundle(tmp_path / "ova.pt")
    model = load_leech_model(bundle, pair=pair)
    assert model.kind != PAIRWISE or applies
    settings = ClassifySettings(aggregation="tournament", pair=pair)
    with caplog.at_level("WARNING"):
        options = leech_tag_options(model, settings, bundle)
    assert options.aggregation == ("tournament" if applies else "naive")
    assert ("aggregation tournament is ignored" in caplog.text) != applies
    with pytest.raises(KennelError, match="aggregation must be one of naive, weighted"):
        ClassifySettings(aggregation="vote").check()
