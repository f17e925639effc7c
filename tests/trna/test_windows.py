"""Window and chunk assembly: the batch form equals the per-read definition, at read edges and
in the features written through either."""

from __future__ import annotations

import kennel.trna.extract as extract_module
import numpy as np
import pytest
from kennel.trna.signal_maps import ReadInput
from kennel.trna.windows import assemble_windows, assemble_windows_per_read, padded_rows

from tests.conftest import extract_shards


def test_features_equal_those_of_the_per_read_assembly(
    trna_sim, sharded, features, tmp_path, monkeypatch
):
    """The whole extraction with the batched window assembly against the per-read one."""
    from kennel.trna.features import FeatureFile

    monkeypatch.setattr(extract_module, "assemble_windows", assemble_windows_per_read)
    reference, _ = extract_shards(sharded, trna_sim, tmp_path / "per_read")
    for batched_path, reference_path in zip(features, reference, strict=True):
        with FeatureFile(batched_path) as batched, FeatureFile(reference_path) as per_read_file:
            a, b = next(batched.batches(len(batched))), next(per_read_file.batches(len(batched)))
        assert len(a) == len(b) > 0
        for name in ("signal", "bases", "boundaries", "chunk_start", "scale", "shift"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("justify", ["start", "center", "end"])
def test_batched_assembly_equals_the_per_read_one_at_read_edges(justify):
    """Synthetic reads whose chunks run off either end, and a map that stops short of the
    signal's end (a move table whose first block is no move): equal values, residual 0 there."""
    from dataclasses import replace

    import escapepod

    spec = replace(spec_for_synthetic(), justify=justify)
    rng = np.random.default_rng(3)
    kept = []
    for n_bases, dwell_scale, tail in ((40, 4, 0), (60, 30, 0), (45, 8, 17), (90, 12, 0)):
        dwell = rng.integers(1, dwell_scale + 1, n_bases)
        refined = np.concatenate([[0], np.cumsum(dwell)])
        signal = rng.normal(size=int(refined[-1]) + tail).astype(np.float32)
        expected = rng.normal(size=n_bases).astype(np.float32)
        anchor = int(rng.integers(spec.upstream, n_bases - spec.downstream))
        read = ReadInput("r", "A" * n_bases, np.zeros(1, np.int64), 0, len(signal), anchor)
        kept.append((read, signal, refined, expected))
    offsets = np.concatenate([[0], np.cumsum([len(s) for _, s, _, _ in kept])])
    flat = np.concatenate([s for _, s, _, _ in kept])
    scale = rng.uniform(0.5, 2, len(kept)).astype(np.float32)
    shift = rng.normal(size=len(kept)).astype(np.float32)
    maps = padded_rows([refined for _, _, refined, _ in kept], -1, np.int64)
    expected_padded = padded_rows([expected for *_, expected in kept], 0.0, np.float32)
    ours = assemble_windows(kept, spec, scale, shift, flat, offsets, maps, expected_padded)
    reference = assemble_windows_per_read(kept, spec, scale, shift, flat, offsets)
    for name in ("boundaries", "expected", "chunk_start", "chunk_signal"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name), err_msg=name)
    # the window statistics read from each one's samples (ours holds only the stretches the
    # windows and chunks cover, the reference whole reads)
    statistics = [
        np.stack(
            escapepod.span_statistics_batch(
                w.span_signal, w.span_offsets, w.spans.reshape(-1, 2), spec.window
            )
        )
        for w in (ours, reference)
    ]
    np.testing.assert_array_equal(*statistics)
    assert len(ours.span_signal) < len(reference.span_signal)
    # the cases reached: chunks that run off a read, a tail no base covers (residual 0)
    lengths = np.diff(offsets)
    assert ((ours.chunk_start < 0) | (ours.chunk_start + spec.chunk_length > lengths)).any()
    tail = slice(offsets[2] + kept[2][2][-1], offsets[3])
    assert reference.span_signal[tail].all()
    residual = _residual_at(ours, tail, offsets)
    if justify != "end":  # an end-justified chunk stops at the window, before the tail
        assert len(residual) and not residual.any()


def _residual_at(windows, samples: slice, offsets) -> np.ndarray:
    """The residual channel's values at flat sample positions that fall inside a chunk."""
    values = []
    for i in range(len(offsets) - 1):
        for position in range(samples.start, samples.stop):
            local = position - offsets[i] - windows.chunk_start[i]
            if (
                offsets[i] <= position < offsets[i + 1]
                and 0 <= local < windows.chunk_signal.shape[-1]
            ):
                values.append(windows.chunk_signal[i, 1, local])
    return np.array(values)


def spec_for_synthetic():
    from kennel.trna.features import FeatureSpec

    return FeatureSpec(kmer_k=5, kmer_sha256="x", upstream=10, downstream=14, chunk_length=256)
