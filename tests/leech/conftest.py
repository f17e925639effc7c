"""leech 0.16.0 reference material (shared/leech beside the checkout), read once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from kennel.models.leech import load_leech_model
from leech_reference import (
    DUMPS,
    LSTM_BUNDLE,
    PAIR_BUNDLE,
    TCN_BUNDLE,
    TCN_CHECKPOINT,
    as_inputs,
    one_torch_thread,
    require_leech_shared,
)


@pytest.fixture(autouse=True, scope="module")
def torch_threads():
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def leech_shared() -> Path:
    return require_leech_shared()


@pytest.fixture(scope="session")
def dumps(leech_shared) -> dict[str, dict[str, np.ndarray]]:
    return {name: dict(np.load(path)) for name, path in DUMPS.items()}


@pytest.fixture(scope="session")
def leech_models(leech_shared):
    return {
        "tcndwell": load_leech_model(TCN_BUNDLE),
        "tcndwell_checkpoint": load_leech_model(TCN_CHECKPOINT),
        "convlstmdwell": load_leech_model(LSTM_BUNDLE),
        "gly_phe": load_leech_model(PAIR_BUNDLE),
    }


@pytest.fixture(scope="session")
def gly_phe_logits(leech_models, dumps) -> np.ndarray:
    """kennel's Gly_Phe logits on every chunk of the TCNDwell dump (same preprocessing)."""
    model = leech_models["gly_phe"]
    dump = dumps["tcndwell"]
    with one_torch_thread():  # session fixtures are set up before the module-scoped one
        logits = [
            model.score(*as_inputs(dump, slice(start, start + 128))).logits
            for start in range(0, len(dump["read_id"]), 128)
        ]
    return torch.cat(logits).numpy()
