"""The sequence-to-coverage contract the scorer relies on, for kennel bundles and Borzoi.

Whatever the model, the scorer calls one module mapping one-hot ``(batch, seq_len, 4)`` floats to
coverage ``(batch, target_length, tracks)``, with ``tracks`` already cut down to the targets
table's rows in table order. ``stride`` is the granularity ``seq_len`` must respect.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from kennel.errors import KennelError
from kennel.snp.targets import Targets


@dataclass
class SequenceModel:
    module: nn.Module
    path: Path
    kind: str  # "bundle" or "borzoi"
    seq_len: int
    stride: int
    target_length: int
    n_tracks: int  # output tracks before subsetting
    default_targets: Path | None = None  # used when no targets table is given

    def select_tracks(self, targets: Targets) -> None:
        """Make the module return only the targets table's tracks, in table order."""
        too_big = [int(i) for i in targets.index if i >= self.n_tracks]
        if too_big:
            row = int(list(targets.index).index(too_big[0]))
            raise KennelError(
                f"{targets.path}: row {row + 1} ({targets.identifier[row]}): track index "
                f"{too_big[0]} is out of range (the model at {self.path} has "
                f"{self.n_tracks} tracks)"
            )
        if self.kind == "borzoi":
            from kennel.snp.borzoi import select_borzoi_tracks

            select_borzoi_tracks(self.module, [int(i) for i in targets.index])
        elif list(targets.index) != list(range(self.n_tracks)):
            self.module = _TrackSubset(self.module, targets.index)

    def check_output(self, output: torch.Tensor, n_selected: int) -> None:
        """Fail with one line when the model's output does not have the promised shape."""
        length, tracks = int(output.shape[1]), int(output.shape[2])
        if length != self.target_length:
            raise KennelError(
                f"{self.path}: model output length {length} bins does not match the expected "
                f"{self.target_length} (seq_len {self.seq_len}, stride {self.stride})"
            )
        if tracks != n_selected:
            raise KennelError(
                f"{self.path}: model returns {tracks} tracks, "
                f"the targets table selects {n_selected}"
            )


class _TrackSubset(nn.Module):
    def __init__(self, module: nn.Module, index) -> None:
        super().__init__()
        self.inner = module
        self.register_buffer("index", torch.as_tensor(list(index), dtype=torch.long))

    def forward(self, one_hot: torch.Tensor) -> torch.Tensor:
        return self.inner(one_hot).index_select(-1, self.index)


def load_sequence_model(path: str | os.PathLike, seq_len: int | None = None) -> SequenceModel:
    """Load a kennel bundle (a ``.pt`` file) or a borzoi-pytorch model directory.

    ``seq_len`` None or 0 takes the model's own input length.
    """
    path = Path(path)
    if path.is_dir():
        from kennel.snp.borzoi import load_borzoi

        return load_borzoi(path, seq_len or None)
    return _load_bundle_model(path, seq_len or None)


def model_seq_len(path: str | os.PathLike, seq_len: int | None = None) -> int:
    """The input length a scoring run will use, without building the model."""
    path = Path(path)
    if path.is_dir():
        from kennel.snp.borzoi import BORZOI_SEQ_LEN, BORZOI_STRIDE

        _check_stride(path, seq_len or BORZOI_SEQ_LEN, BORZOI_STRIDE)
        return seq_len or BORZOI_SEQ_LEN
    from kennel.models.bundle import load_bundle

    metadata = _coverage_metadata(path, load_bundle(path))
    chosen = seq_len or int(metadata["seq_len"])
    _check_stride(path, chosen, int(metadata["bin_size"]))
    return chosen


def _check_stride(path: Path, seq_len: int, stride: int) -> None:
    if seq_len <= 0 or seq_len % stride:
        raise KennelError(
            f"{path}: seq_len={seq_len} is not a positive multiple of the model's stride ({stride})"
        )


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
    _check_stride(path, seq_len, stride)
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
        target_length=target_length,
        n_tracks=int(metadata["n_targets"]),
    )
