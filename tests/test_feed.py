"""The GPU-feed helpers both arms use: device choice, compile policy, fixed-shape batches."""

from __future__ import annotations

import os

import pytest
import torch
from kennel import feed
from kennel.errors import KennelError


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert feed.resolve_device("auto") == torch.device("cpu")
    assert feed.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(KennelError, match="device: 'cuda' was requested but torch") as raised:
        feed.resolve_device("cuda")
    assert "\n" not in str(raised.value)
    with pytest.raises(KennelError, match="device: 'tpu' is not one of auto, cuda, cpu"):
        feed.resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert feed.resolve_device("auto") == torch.device("cuda")
    assert feed.resolve_device("cuda") == torch.device("cuda")


@pytest.mark.parametrize(
    ("mode", "items", "cache", "expected"),
    [
        ("on", 1, None, True),
        ("off", 10**9, "/cache", False),
        ("auto", 1500, None, False),
        ("auto", 1501, None, True),
        ("auto", 10, "/cache", True),
        ("auto", 10, "", False),
    ],
)
def test_should_compile(mode, items, cache, expected):
    assert feed.should_compile(mode, items, 1500, cache) is expected


def test_should_compile_rejects_unknown_modes():
    with pytest.raises(KennelError, match="compile: 'sometimes' is not one of auto, on, off"):
        feed.should_compile("sometimes", 1, 1, None)


def test_configure_inductor_cache(tmp_path, monkeypatch):
    import torch._inductor.config as inductor_config

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    feed.configure_inductor_cache(None)
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and not inductor_config.fx_graph_cache
    feed.configure_inductor_cache(tmp_path / "cache")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "cache").resolve())
    assert (tmp_path / "cache").is_dir() and inductor_config.fx_graph_cache


@pytest.mark.parametrize(
    ("device", "hooks", "mode"),
    [("cuda", False, "reduce-overhead"), ("cuda", True, None), ("cpu", False, None)],
)
def test_compile_for_picks_the_mode(monkeypatch, device, hooks, mode):
    seen = {}

    def fake_compile(module, **kwargs):
        seen.update(kwargs, module=module)
        return "compiled"

    monkeypatch.setattr(torch, "compile", fake_compile)
    module = torch.nn.Linear(2, 2)
    assert feed.compile_for(module, torch.device(device), hooks) == "compiled"
    assert seen == {"module": module, "backend": "inductor", "mode": mode, "dynamic": False}


def test_has_forward_hooks():
    module = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert not feed.has_forward_hooks(module)
    module[0].register_forward_hook(lambda *args: None)
    assert feed.has_forward_hooks(module)


def test_compile_count_counts_compiled_frames():
    module = torch.nn.Linear(3, 2)
    compiled = torch.compile(module, backend="eager", dynamic=False)
    before = feed.compile_count()
    for _ in range(3):
        compiled(torch.ones(4, 3))
    assert feed.compile_count() - before == 1
    compiled(torch.ones(5, 3))  # a new shape is a new compilation
    assert feed.compile_count() - before == 2


def test_pad_rows():
    batch = torch.arange(6, dtype=torch.float16).reshape(3, 2)
    padded = feed.pad_rows(batch, 5)
    assert padded.shape == (5, 2) and padded.dtype == torch.float16
    assert torch.equal(padded[:3], batch) and not padded[3:].any()
    assert feed.pad_rows(batch, 3) is batch
    with pytest.raises(ValueError, match="batch of 3 rows does not fit a fixed size of 2"):
        feed.pad_rows(batch, 2)
