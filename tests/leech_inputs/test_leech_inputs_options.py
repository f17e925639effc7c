"""Chunking options of ``leech data prepare`` that a model config records and leech predict
applies, against the inputs leech 0.16.0's predict handed bundles it trained with them
(tests/leech/leech_made/make.sh; their tags are test_leech_made's):

- sequence masking (``mask_seq_side``, leech#256): a TCNDwell masked left and one masked right
  on signal_kmer sequences, one masked left on base_onehot; masked_inputs.npz holds leech's
  one-hot tensors, bit-packed, and a SHA-256 of each feature tensor;
- a base-defined signal window (``signal_context_bases``): context_bases_inputs.npz holds a
  SHA-256 of each signal, sequence and feature tensor;
- soft-clip recovery (``recover_softclip_signal``), on the fixture reads with some alignments
  cut short near the motif (make_softclips.py): softclipped_inputs.npz holds a SHA-256 of each
  signal, sequence and feature tensor leech fed the fixture's TCNDwell with the setting and
  without;
- per-amino-acid dwell template rows (``dwell_template_table``, leech#369): a TCNDwell leech
  trained with the made-up dwell_template.tsv; dwell_template_inputs.npz holds the rows leech
  appended to each chunk's features, and a SHA-256 of each whole feature tensor;
- no signal-map refinement (``refine_signal_map: false``, leech's --no-refine-signal-map): a
  TCNDwell leech trained so (make_unrefined.py); unrefined_inputs.npz holds a SHA-256 of each
  signal, sequence and feature tensor leech fed it, as trained and masked;
- the feature window in leech's legacy keys (``feature_left``/``feature_right``,
  ``dwell_margin_left``/``dwell_margin_right``), set in the wide-window TCNDwell's config
  (make_legacy_windows.py): legacy_window_inputs.npz holds a SHA-256 of each tensor leech fed it;
- how the leech run extracted (leech predict's ``--backend python``, and leech without
  leech-core), the fixture's TCNDwell (make_backends.py): backend_inputs.npz holds a SHA-256 of
  each tensor leech fed it, also without leech-core with the skew and kurtosis rows;
- the other signal normalisations (``signal_norm``: zscore, quantile, pa_scaling), the fixture's
  TCNDwell with each (make_signal_norms.py): norm_inputs.npz holds a SHA-256 of each signal,
  sequence and feature tensor leech fed it.

leech predict extracts on its Python path for masking, soft-clip recovery and normalisations
other than median/MAD (its Rust path lacks them), whose dwell and k-mer residual features differ
from the Rust path's in the last bits: the features are compared too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from kennel.trna.leech_config import load_leech_config
from kennel.trna.leech_inputs import extract_leech_chunks
from kennel.trna.leech_spec import LeechInputSpec

from tests.leech.leech_reference import LEGACY_WINDOWS, OTHER_NORMALISATIONS
from tests.leech_inputs.conftest import LEECH_MADE, assert_leechs_tensors, sha256_rows

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
    # leech predict extracts masked chunks on its Python path: its features too
    assert (sha256_rows(chunks.features) == leech_masked[f"{name}.features_sha256"]).all()

    # the same config unmasked reads bases leech blanked in every chunk: the comparison above
    # would fail if kennel ignored the key
    unmasked = LeechInputSpec.from_config({**config, "mask_seq_side": None}, level_table.sha256)
    plain = extract_leech_chunks(leech_reads[0], leech_signals, unmasked, level_table)
    seen = plain.sequence_onehot().reshape(len(plain), -1).sum(axis=1)
    assert (seen > expected.reshape(len(expected), -1).sum(axis=1)).all()


def test_bundle_info_names_the_masked_side_and_the_base_window():
    from kennel.models.leech import load_leech_model
    from kennel.models.leech_describe import describe_leech_model

    described = describe_leech_model(load_leech_model(LEECH_MADE / "fx_mask_right.pt"))
    assert "signal_kmer (context 4,4), bases right of the focus base blanked" in described
    bases = describe_leech_model(load_leech_model(LEECH_MADE / "fx_context_bases.pt"))
    assert "(signal_len 400, bases -8..+4 of the focus base, norm median_mad" in bases
    model = load_leech_model(LEECH_MADE / "fx_TCNDwellGN.pt")
    strict = replace(model, config={**model.config, "skip_motif_indels": True})
    assert "skip_motif_indels True)" in describe_leech_model(strict)
    plain = describe_leech_model(model)
    assert "blanked" not in plain and "of the focus base, norm" not in plain
    assert "skip_motif_indels False)" in plain


def test_a_base_defined_window_gives_leechs_tensors(
    leech_reads, leech_signals, level_table, leech_dir
):
    """Bases -8..+4 of each focus base, zero-padded or centre-cropped to 400 samples: every
    chunk's signal (both channels), sequence and feature tensor is, bit for bit, the one leech
    fed."""
    config = load_leech_config(LEECH_MADE / "fx_context_bases.pt")
    spec = LeechInputSpec.from_config(config, level_table.sha256)
    assert spec.signal_context_bases == (8, 4)
    with np.load(LEECH_MADE / "context_bases_inputs.npz") as arrays:
        leechs = {key: arrays[key] for key in arrays.files}
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    assert chunks.signal.shape == tuple(leechs["shape"])
    assert_leechs_tensors(chunks, leechs)
    # both of leech's cases occur: spans shorter than 400 samples padded after their end, longer
    # ones cropped to their middle (no padding)
    padding = (chunks.signal[:, 0] == 0).sum(axis=1)
    assert (padding > 0).any() and (padding == 0).any()

    # the same config read as a sample window (200 samples either side of the focus) gives other
    # signals: the comparison above would fail if kennel ignored the key
    samples = LeechInputSpec.from_config(
        {**config, "signal_context_bases": None}, level_table.sha256
    )
    plain = extract_leech_chunks(leech_reads[0], leech_signals, samples, level_table)
    assert (sha256_rows(plain.signal) != leechs["signal_sha256"]).mean() > 0.9


def test_soft_clipped_signal_fills_the_window_as_leech_fills_it(leech_signals, level_table):
    """Windows past a cut alignment: zero-padded, or with recover_softclip_signal filled with
    the soft-clipped signal (first channel; the residual stays padded), bit for bit leech's, and
    so are the sequences and features."""
    from kennel.trna.leech_reads import iter_leech_inputs

    from tests.leech_inputs.conftest import BUNDLE, LEECH

    reads = []
    for batch, _ in iter_leech_inputs(
        LEECH_MADE / "fx_softclipped.bam", LEECH / "data" / "reference.fa"
    ):
        reads += batch
    with np.load(LEECH_MADE / "softclipped_inputs.npz") as arrays:
        leechs = {key: arrays[key] for key in arrays.files}
    config = load_leech_config(BUNDLE)
    signals, features = {}, {}
    for name, recover in (("plain", False), ("recovered", True)):
        spec = LeechInputSpec.from_config(
            {**config, "recover_softclip_signal": recover}, level_table.sha256
        )
        chunks = extract_leech_chunks(reads, leech_signals, spec, level_table)
        assert_leechs_tensors(chunks, leechs, f"{name}.")
        signals[name], features[name] = chunks.signal, chunks.features
    # leech predict extracts on its Python path when recovering, whose features differ from its
    # Rust path's in the last bits (kennel's plain ones are the Rust path's): in most chunks,
    # not only those whose window is filled
    path_differs = (sha256_rows(features["plain"]) != leechs["recovered.features_sha256"]).mean()
    assert path_differs > 0.5
    np.testing.assert_allclose(features["plain"], features["recovered"], rtol=1e-5, atol=1e-5)
    filled = (signals["plain"] != signals["recovered"]).any(axis=(1, 2))
    assert (
        filled.sum() == (leechs["plain.signal_sha256"] != leechs["recovered.signal_sha256"]).sum()
    )
    assert filled.sum() > 20
    # only the first channel is filled, and only where the plain window was padded
    assert (signals["plain"][:, 1] == signals["recovered"][:, 1]).all()
    changed = signals["plain"][:, 0] != signals["recovered"][:, 0]
    assert (signals["plain"][:, 0][changed] == 0).all()


@pytest.mark.parametrize(
    "settings", OTHER_NORMALISATIONS, ids=lambda settings: settings["signal_norm"]
)
def test_other_normalisations_give_leechs_tensors(
    leech_reads, leech_signals, level_table, leech_dir, settings
):
    """Each chunk's signal tensor (both channels: the residual is taken from the normalised
    signal and the refined map), sequence and features (leech's Python path) are bit for bit
    the ones leech fed the model."""
    from kennel.io.pod5 import Pod5Set

    from tests.leech_inputs.conftest import BUNDLE

    name = settings["signal_norm"]
    pod5 = Pod5Set(leech_dir / "data" / "fx.pod5", index_reads=False)
    calibrations = {
        meta.read_id: (meta.calibration_offset, meta.calibration_scale)
        for meta, _ in pod5.signals(list(leech_signals))
    }
    spec = LeechInputSpec.from_config({**load_leech_config(BUNDLE), **settings}, level_table.sha256)
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table, calibrations)
    with np.load(LEECH_MADE / "norm_inputs.npz") as arrays:
        assert_leechs_tensors(chunks, dict(arrays), f"{name}.")


def test_dwell_template_rows_are_leechs(leech_reads, leech_signals, level_table, leech_dir):
    """The base's dwell over each amino acid's expected one, for every chunk and position, bit
    for bit leech's: the table's entry of 0 (Leu at -2) takes its position's mean, its missing
    one (Gly at +3) is 1, so the row is the dwell itself; the window's two positions the table
    does not reach are 1."""
    from kennel.trna.leech_extract import leech_spec_for

    spec = leech_spec_for(LEECH_MADE / "fx_dwell_template.pt")
    assert spec.feature_rows == 16 and (spec.feature_start, spec.feature_end) == (-7, 7)
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    with np.load(LEECH_MADE / "dwell_template_inputs.npz") as arrays:
        np.testing.assert_array_equal(chunks.read_id, arrays["read_id"])
        leechs = arrays["template_rows"]
        assert (sha256_rows(chunks.features) == arrays["features_sha256"]).all()
    rows = chunks.features[:, 12:]
    np.testing.assert_array_equal(rows, leechs)
    assert (rows[:, :, [0, 14]] == 1).all()  # positions -7 and +7: outside the table
    np.testing.assert_array_equal(rows[:, 1, 10], chunks.features[:, 0, 10])  # Gly at +3
    assert (rows[:, :, 1:14] != 1).mean() > 0.9


def test_an_unrefined_model_gets_leechs_tensors(leech_reads, leech_signals, level_table):
    """The move-table map as it is, a one-channel signal and the nine rows that need no k-mer
    table: leech's tensors, on its Rust extraction path and (masked) on its Python one."""
    config = load_leech_config(LEECH_MADE / "fx_unrefined.pt")
    assert config["refine_signal_map"] is False and len(config["feature_channels"]) == 12
    spec = LeechInputSpec.from_config(config, level_table.sha256)
    assert spec.signal_channels == 1 and len(spec.feature_channels) == 9
    with np.load(LEECH_MADE / "unrefined_inputs.npz") as arrays:
        leechs = dict(arrays)
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    assert_leechs_tensors(chunks, leechs, "fx.")
    masked = replace(spec, mask_seq_side="left")
    assert_leechs_tensors(
        extract_leech_chunks(leech_reads[0], leech_signals, masked, level_table), leechs, "masked."
    )

    # refined, the same reads give other signal windows and features: the comparison above
    # fails if kennel refines anyway
    refined = replace(spec, refine_signal_map=True)
    other = extract_leech_chunks(leech_reads[0], leech_signals, refined, level_table)
    assert (sha256_rows(other.features) != leechs["fx.features_sha256"]).mean() > 0.5
    assert (sha256_rows(other.signal) != leechs["fx.signal_sha256"]).mean() > 0.5

    from kennel.models.leech import load_leech_model
    from kennel.models.leech_describe import describe_leech_model

    described = describe_leech_model(load_leech_model(LEECH_MADE / "fx_unrefined.pt"))
    assert "feature channels: " + ", ".join(spec.feature_channels) + "\n" in described
    assert (
        "signal-map refinement: off" in described and "k-mer table sha256: none read" in described
    )


@pytest.mark.parametrize("name", LEGACY_WINDOWS)
def test_a_window_in_legacy_keys_gives_leechs_tensors(
    leech_reads, leech_signals, level_table, name
):
    """feature_left/right count bases from the focus base; dwell_margin_left/right widen the
    k-mer window's half (5 bases for kmer_len 11): the windows leech read, and its tensors."""
    config = load_leech_config(LEECH_MADE / "fx_tcndwell_wide.pt")
    del config["feature_start"], config["feature_end"]
    keys, window = LEGACY_WINDOWS[name]
    spec = LeechInputSpec.from_config({**config, **keys}, level_table.sha256)
    assert (spec.feature_start, spec.feature_end) == window
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    with np.load(LEECH_MADE / "legacy_window_inputs.npz") as arrays:
        assert_leechs_tensors(chunks, dict(arrays), f"{name}.")

    from kennel.models.leech import load_leech_model
    from kennel.models.leech_describe import describe_leech_model

    model = load_leech_model(LEECH_MADE / "fx_tcndwell_wide.pt")
    del model.config["feature_start"], model.config["feature_end"]
    model.config.update(keys)
    described = describe_leech_model(model)
    assert f"features: (12, 15), bases {window[0]:+d}..{window[1]:+d} around" in described


MOMENTS = ["dwell", "dwell_log", "dwell_mean", "dwell_std", "dwell_ratio", "level_mean",
           "level_median", "level_std", "level_skew", "level_kurtosis", "kmer_residual",
           "kmer_residual_abs"]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "settings", "channels"),
    [
        ("backend_python", {"backend": "python"}, None),
        ("without_core", {"leech_core": False}, None),
        ("without_core_moments", {"leech_core": False}, MOMENTS),
    ],
)
def test_leechs_python_extraction_gives_leechs_tensors(
    leech_config, leech_reads, leech_signals, level_table, name, settings, channels
):
    """--backend python: the dwell and k-mer residual rows in float64; without leech-core, the
    level rows in numpy too (the moments among them): every tensor bit for bit leech's, where
    kennel's default (leech's Rust extraction) differs in most chunks' features."""
    config = {**leech_config, "feature_channels": channels or leech_config["feature_channels"]}
    spec = LeechInputSpec.from_config(config, level_table.sha256)
    run = replace(spec, **settings)
    assert run.leech_python_path
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, run, level_table)
    with np.load(LEECH_MADE / "backend_inputs.npz") as arrays:
        leechs = dict(arrays)
    assert_leechs_tensors(chunks, leechs, f"{name}.")
    rust = extract_leech_chunks(leech_reads[0], leech_signals, spec, level_table)
    assert (sha256_rows(rust.features) != leechs[f"{name}.features_sha256"]).mean() > 0.9
