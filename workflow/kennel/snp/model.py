"""Load a scoring model, a kennel bundle or a borzoi-pytorch directory, as a
:class:`~kennel.snp.sequence_model.SequenceModel`."""

from __future__ import annotations

import os
from pathlib import Path

from kennel.errors import KennelError
from kennel.snp.borzoi import BORZOI_SEQ_LEN, BORZOI_STRIDE, load_borzoi
from kennel.snp.sequence_model import SequenceModel, check_stride


def load_sequence_model(path: str | os.PathLike, seq_len: int | None = None) -> SequenceModel:
    """Load a kennel bundle (a ``.pt`` file) or a borzoi-pytorch model directory.

    ``seq_len`` None or 0 takes the model's own input length.
    """
    path = Path(path)
    if path.is_dir():
        return load_borzoi(path, seq_len or None)
    return _load_bundle_model(path, seq_len or None)


def model_seq_len(path: str | os.PathLike, seq_len: int | None = None) -> int:
    """The input length a scoring run will use, without building the model."""
    path = Path(path)
    if path.is_dir():
        check_stride(path, seq_len or BORZOI_SEQ_LEN, BORZOI_STRIDE)
        return seq_len or BORZOI_SEQ_LEN
    from kennel.models.bundle import load_bundle

    metadata = _coverage_metadata(path, load_bundle(path))
    chosen = seq_len or int(metadata["seq_len"])
    check_stride(path, chosen, int(metadata["bin_size"]))
    return chosen


def _coverage_metadata(path: Path, bundle: dict) -> dict:
    metadata = bundle["metadata"]
    if metadata.get("kind") != "sequence_to_coverage":
        raise KennelError(
            f"{path}: bundle holds a {metadata.get('kind', 'unknown')!r} model, "
            "not a sequence_to_coverage model"
        )
    if metadata.get("layout") != "length_tracks":
        raise KennelError(f"{path}: unsupported output layout {metadata.get('layout')!r}")
    for key in ("seq_len", "bin_size", "target_length", "n_targets"):
        if key not in metadata:
            raise KennelError(f"{path}: bundle metadata lacks {key!r}")
    return metadata


def _load_bundle_model(path: Path, seq_len: int | None) -> SequenceModel:
    from kennel.models.bundle import build_model, load_bundle

    bundle = load_bundle(path)
    metadata = _coverage_metadata(path, bundle)
    stride = int(metadata["bin_size"])
    native = int(metadata["seq_len"])
    seq_len = seq_len or native
    check_stride(path, seq_len, stride)
    target_length = int(metadata["target_length"])
    if seq_len != native:
        if "seq_len" not in bundle["hyperparameters"]:
            raise KennelError(f"{path}: this model takes only seq_len={native}")
        # the crop is fixed in bins, so a longer input adds its extra bins to the output
        bundle = {**bundle, "hyperparameters": {**bundle["hyperparameters"], "seq_len": seq_len}}
        target_length += (seq_len - native) // stride
    return SequenceModel(
        module=build_model(bundle, path),
        path=path,
        kind="bundle",
        seq_len=seq_len,
        stride=stride,
        bin_size=stride,
        target_length=target_length,
        n_tracks=int(metadata["n_targets"]),
    )
