"""Sequence masking (a config's ``mask_seq_side``, leech#256) against the sequence inputs leech
0.16.0's predict handed three bundles it trained with ``leech data prepare --mask-seq-side``
(tests/leech/leech_made/make.sh: a TCNDwell masked left and one masked right on signal_kmer
sequences, one masked left on base_onehot; masked_inputs.npz holds leech's one-hot tensors,
bit-packed). Their tags are test_leech_made's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kennel.trna.leech_inputs import extract_leech_chunks
from kennel.trna.leech_spec import LeechInputSpec, load_leech_config

LEECH_MADE = Path(__file__).parents[1] / "leech" / "leech_made"
MASKED = ("mask_left", "mask_right", "mask_left_onehot")


@pytest.fixture(scope="module")
def leech_masked() -> dict[str, np.ndarray]:
    with np.load(LEECH_MADE / "masked_inputs.npz") as arrays:
        return {key: arrays[key] for key in arrays.files}


def leechs_sequences(leech_masked, name: str) -> np.ndarray:
    shape = tuple(leech_masked[f"{name}.shape"])
    packed = leech_masked[f"{name}.sequence"]
    return np.unpackbits(packed, axis=-1, count=shape[-1]).reshape(shape)


@pytest.mark.parametrize("name", MASKED)
def test_masked_sequences_are_leechs(
    leech_masked, leech_reads, leech_signals, level_table, leech_dir, name
):
    config = load_leech_config(LEECH_MADE / f"fx_{name}.pt")
    spec = LeechInputSpec.from_config(config, level_table.sha256)
    assert spec.mask_seq_side == name.split("_")[1]
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    np.testing.assert_array_equal(chunks.read_id, leech_masked[f"{name}.read_id"])
    np.testing.assert_array_equal(chunks.base_idx, leech_masked[f"{name}.base_idx"])
    expected = leechs_sequences(leech_masked, name)
    assert np.array_equal(chunks.sequence_onehot(), expected)

    # the same config unmasked reads bases leech blanked in every chunk: the comparison above
    # would fail if kennel ignored the key
    unmasked = LeechInputSpec.from_config({**config, "mask_seq_side": None}, level_table.sha256)
    plain = extract_leech_chunks(leech_reads[0], leech_signals, unmasked, level_table)
    seen = plain.sequence_onehot().reshape(len(plain), -1).sum(axis=1)
    assert (seen > expected.reshape(len(expected), -1).sum(axis=1)).all()


def test_bundle_info_says_which_side_is_masked():
    from kennel.models.leech import load_leech_model
    from kennel.models.leech_describe import describe_leech_model

    described = describe_leech_model(load_leech_model(LEECH_MADE / "fx_mask_right.pt"))
    assert "signal_kmer (context 4,4), bases right of the focus base blanked" in described
    plain = describe_leech_model(load_leech_model(LEECH_MADE / "fx_TCNDwellGN.pt"))
    assert "blanked" not in plain
