"""Load a scoring model as a :class:`~kennel.snp.sequence_model.SequenceModel`: a kennel
bundle, a borzoi-pytorch directory, or a baskerville Keras model (``model.h5`` with the
``params.json`` hound_snp was given)."""

from __future__ import annotations

import os
from pathlib import Path

from kennel.errors import KennelError
from kennel.snp.borzoi import BORZOI_SEQ_LEN, BORZOI_STRIDE, load_borzoi
from kennel.snp.sequence_model import SequenceModel, check_stride

KERAS_SUFFIXES = (".h5", ".hdf5")


def load_sequence_model(
    path: str | os.PathLike, seq_len: int | None = None, params: str | os.PathLike | None = None
) -> SequenceModel:
    """Load a kennel bundle (a ``.pt`` file), a borzoi-pytorch model directory, or a Keras
    ``.h5`` model with its baskerville ``params`` file.

    ``seq_len`` None or 0 takes the model's own input length.
    """
    path = Path(path)
    if _is_keras(path, params):
        return _load_keras_model(path, Path(params), seq_len or None)
    if path.is_dir():
        return load_borzoi(path, seq_len or None)
    return _load_bundle_model(path, seq_len or None)


def model_seq_len(
    path: str | os.PathLike, seq_len: int | None = None, params: str | os.PathLike | None = None
) -> int:
    """The input length a scoring run will use, without building the model."""
    path = Path(path)
    if _is_keras(path, params):
        from kennel.models.seqnn_file import seqnn_layout

        # the builder refuses a seq_len that its pools do not divide
        return seqnn_layout(params, seq_len or None).seq_len
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


def _is_keras(path: Path, params) -> bool:
    """Whether ``path`` is a Keras model; one needs its params file, and only one uses it."""
    keras = path.suffix.lower() in KERAS_SUFFIXES
    if keras and params is None:
        raise KennelError(
            f"{path}: a Keras model needs the baskerville params.json it was trained with "
            "(hound_snp's params_file: --params, or the sample sheet's params column)"
        )
    if params is not None and not keras:
        raise KennelError(f"{params}: a params file goes with Keras .h5 models, not with {path}")
    return keras


def _load_keras_model(path: Path, params: Path, seq_len: int | None) -> SequenceModel:
    from kennel.models.seqnn_file import load_seqnn

    network = load_seqnn(params, path, seq_len)  # refuses a seq_len its pools do not divide
    return SequenceModel(
        module=network,
        path=path,
        kind="seqnn",
        seq_len=network.seq_len,
        stride=network.stride,
        bin_size=network.bin_size,
        target_length=network.target_length,
        n_tracks=network.tracks,
        params=params,
    )
