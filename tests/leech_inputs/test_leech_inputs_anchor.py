"""Basecall-anchored models (``leech data prepare --anchor basecall``; the config records
``anchor: basecall``) against the inputs leech 0.16.0's predict handed a TCNDwell it trained
that way (tests/leech/leech_made/make_basecall.py; its tags are test_leech_made's).

The motif is still found in the reference and mapped through the CIGAR, but the chunk is cut
from the read's SEQ, soft clips included, and the whole read's signal: the focus base is the
motif's mapped start in SEQ, and windows are not cropped to the alignment. basecall_inputs.npz
holds a SHA-256 of each signal, sequence and feature tensor leech fed the model, on the fixture
reads and on those make_softclips.py cut short near the motif.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from kennel.errors import KennelError
from kennel.trna.leech_config import load_leech_config
from kennel.trna.leech_inputs import extract_leech_chunks
from kennel.trna.leech_reads import iter_leech_inputs
from kennel.trna.leech_spec import LeechInputSpec

from tests.leech_inputs.conftest import LEECH, LEECH_MADE, assert_leechs_tensors, sha256_rows

BASECALL = LEECH_MADE / "fx_basecall.pt"


@pytest.fixture(scope="module")
def leechs() -> dict[str, np.ndarray]:
    with np.load(LEECH_MADE / "basecall_inputs.npz") as arrays:
        return {key: arrays[key] for key in arrays.files}


@pytest.fixture(scope="module")
def basecall_spec(level_table) -> LeechInputSpec:
    spec = LeechInputSpec.from_config(load_leech_config(BASECALL), level_table.sha256)
    assert spec.anchor == "basecall" and spec.require_query_mapping
    return spec


def test_basecall_anchored_chunks_are_leechs(
    leech_reads, leech_signals, level_table, basecall_spec, leechs
):
    """Every chunk's read, focus base (in SEQ), signal, sequence and features: leech's."""
    chunks = extract_leech_chunks(leech_reads[0], leech_signals, basecall_spec, level_table)
    assert_leechs_tensors(chunks, leechs, "fx.")

    # anchored to the reference, the same model would get other inputs: the comparison above
    # fails if kennel ignores the key (soft clips and indels before the motif move the focus
    # base; the reference's bases and a window cropped to the alignment change the tensors)
    reference = replace(basecall_spec, anchor="reference")
    other = extract_leech_chunks(leech_reads[0], leech_signals, reference, level_table)
    assert len(other) == len(chunks)
    assert (other.base_idx != chunks.base_idx).mean() > 0.2
    assert (sha256_rows(other.signal) != leechs["fx.signal_sha256"]).mean() > 0.4
    assert (sha256_rows(other.features) != leechs["fx.features_sha256"]).mean() > 0.4


def test_basecall_anchored_windows_read_past_the_alignment(
    leech_signals, level_table, basecall_spec, leechs
):
    """On reads whose alignment was cut short near the motif, a basecall-anchored window reads
    the soft-clipped signal as any other (it is the read's); recover_softclip_signal then has
    nothing to fill, and only sends leech predict down its Python path (features in float64)."""
    reads = []
    for batch, _ in iter_leech_inputs(
        LEECH_MADE / "fx_softclipped.bam", LEECH / "data" / "reference.fa"
    ):
        reads += batch
    signals = leech_signals  # the same reads as the fixture's
    runs = {}
    for name, recover in (("softclipped", False), ("softclipped.recovered", True)):
        spec = replace(basecall_spec, recover_softclip_signal=recover)
        runs[name] = extract_leech_chunks(reads, signals, spec, level_table)
        assert_leechs_tensors(runs[name], leechs, f"{name}.")
    plain, recovered = runs["softclipped"], runs["softclipped.recovered"]
    np.testing.assert_array_equal(plain.signal, recovered.signal)
    assert (sha256_rows(plain.features) != sha256_rows(recovered.features)).mean() > 0.5

    # the reference anchor pads those windows with zeros where this one reads signal
    reference = extract_leech_chunks(
        reads, signals, replace(basecall_spec, anchor="reference"), level_table
    )
    zeros = (reference.signal[:, 0] == 0).sum(axis=1)
    assert (zeros > (plain.signal[:, 0] == 0).sum(axis=1)).sum() > 20


def test_basecall_anchor_without_the_query_mapping_is_refused(leech_config):
    """leech refuses it too: the focus base is the motif's query position, which needs the
    mapping."""
    config = {**leech_config, "anchor": "basecall", "require_query_mapping": False}
    with pytest.raises(KennelError, match="require_query_mapping.*needs anchor 'reference'"):
        LeechInputSpec.from_config(config)
    for anchor in ("signal", 1):
        with pytest.raises(KennelError, match="'anchor'.*reference or basecall"):
            LeechInputSpec.from_config({**leech_config, "anchor": anchor})


def test_bundle_info_names_the_anchor():
    from kennel.models.leech import load_leech_model
    from kennel.models.leech_describe import describe_leech_model

    assert "(anchor basecall, base_justify center," in describe_leech_model(
        load_leech_model(BASECALL)
    )
    model = load_leech_model(BASECALL)
    del model.config["anchor"]
    assert "(anchor reference (leech's default; not recorded: trna.leech.anchor sets it)," in (
        describe_leech_model(model)
    )


def test_basecall_anchored_signal_is_the_whole_read(
    leech_reads, leech_signals, level_table, basecall_spec
):
    """leech crops the signal only to a reference span (preparation/reader.py): under the
    basecall anchor the samples past the last base's end, where a move table opens on stays,
    stay in the signal windows are cut from (the fixture's move tables all open on a move, and
    its windows never reach that far, so the tensors above cannot show it)."""
    from kennel.trna.leech_signal import process_read

    read = leech_reads[0][0]
    # two stays first: every base starts two strides later, the last still ends at ns
    opened = replace(read, moves=np.concatenate([np.zeros(2, np.uint8), read.moves]))
    raw = leech_signals[read.read_id]
    processed = process_read(opened, raw, basecall_spec, level_table)
    assert len(processed.signal) == read.num_samples - read.trim
    assert processed.boundaries[-1] == len(processed.signal) - 2 * read.stride
    assert (np.diff(processed.boundaries) >= 0).all()
    cropped = process_read(opened, raw, replace(basecall_spec, anchor="reference"), level_table)
    assert len(cropped.signal) < len(processed.signal)
