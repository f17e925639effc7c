"""Bundles load without executing code and say clearly when they cannot be used."""

from __future__ import annotations

import pickle

import pytest
import torch
from kennel.cli import main
from kennel.errors import KennelError
from kennel.models.bundle import (
    build_model,
    load_bundle,
    register_architecture,
    save_bundle,
    strip_compiled_prefix,
)


@register_architecture("test_linear")
class TinyLinear(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.layer = torch.nn.Linear(width, 2)

    def forward(self, x):
        return self.layer(x)


class Payload:
    """Unpickling this needs code execution (a class lookup), which weights_only forbids."""

    def __reduce__(self):
        return (print, ("this must never run",))


def test_round_trip_keeps_weights_and_contract(tmp_path):
    torch.manual_seed(0)
    model = TinyLinear(4)
    path = tmp_path / "m.pt"
    save_bundle(path, model, {"width": 4}, metadata={"class_names": ["a", "b"]})
    bundle = load_bundle(path)
    rebuilt = build_model(bundle, path)
    x = torch.randn(3, 4)
    torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
    assert bundle["metadata"]["class_names"] == ["a", "b"]
    assert bundle["provenance"]["kennel_version"]
    assert not rebuilt.training


def test_compiled_prefix_is_stripped(tmp_path):
    model = TinyLinear(3)
    prefixed = {f"_orig_mod.{k}": v for k, v in model.state_dict().items()}
    assert set(strip_compiled_prefix(prefixed)) == set(model.state_dict())
    compiled = torch.compile(model)  # wrapping only; no forward, so nothing is compiled here
    path = tmp_path / "c.pt"
    save_bundle(path, compiled, {"width": 3})
    assert all(not k.startswith("_orig_mod.") for k in load_bundle(path)["state_dict"])


def test_pickle_needing_code_is_refused(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"format": "kennel-bundle", "payload": Payload()}, path)
    with pytest.raises(KennelError, match="refusing to load a bundle that needs code execution"):
        load_bundle(path)
    assert main(["bundle-info", str(path)]) == 2
    captured = capsys.readouterr()
    assert "this must never run" not in captured.out + captured.err
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": "other"}, "not a kennel bundle"),
        ({"format_version": 99}, "format version 99 is not supported"),
        ({"architecture": "resnet9000"}, "unknown architecture 'resnet9000'"),
    ],
)
def test_bad_bundle_fields(tmp_path, change, message):
    path = tmp_path / "m.pt"
    save_bundle(path, TinyLinear(2), {"width": 2})
    bundle = torch.load(path, weights_only=True)
    bundle.update(change)
    torch.save(bundle, path)
    with pytest.raises(KennelError, match=message):
        load_bundle(path)


def test_weights_of_another_shape_are_a_clear_error(tmp_path):
    path = tmp_path / "m.pt"
    save_bundle(path, TinyLinear(2), {"width": 5})
    with pytest.raises(KennelError, match="weights do not fit architecture 'test_linear'"):
        build_model(load_bundle(path), path)


def test_truncated_and_missing_files(tmp_path):
    path = tmp_path / "m.pt"
    save_bundle(path, TinyLinear(2), {"width": 2})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(KennelError, match="not a readable model bundle"):
        load_bundle(path)
    with pytest.raises(KennelError, match="model bundle not found"):
        load_bundle(tmp_path / "absent.pt")


def test_bundle_info_prints_contract(tmp_path, capsys):
    path = tmp_path / "m.pt"
    save_bundle(path, TinyLinear(2), {"width": 2}, metadata={"class_names": ["x", "y"]})
    assert main(["bundle-info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "architecture: test_linear" in out and "class_names: ['x', 'y']" in out


def test_pickle_module_error_type_is_what_torch_raises(tmp_path):
    """Guard: if torch changes the exception type, the refusal path must still be hit."""
    path = tmp_path / "evil.pt"
    torch.save(Payload(), path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
