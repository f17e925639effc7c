"""The sequence-to-coverage contract the scorer relies on, for kennel bundles and Borzoi.

Whatever the model, the scorer calls one module mapping one-hot ``(batch, seq_len, 4)`` floats to
coverage ``(batch, target_length, tracks)``, with ``tracks`` already cut down to the targets
table's rows in table order. ``stride`` is the granularity ``seq_len`` must respect and
``bin_size`` the bases an output bin covers: equal for kennel bundles, 128 and 32 for Borzoi
(seven halvings down to the transformer, two upsamplings back) and the Keras models of its
family, 128 and 16 for Borzoi Prime (three upsamplings). A leaf module: the loaders
(:mod:`kennel.snp.model`, :mod:`kennel.snp.borzoi`) build on it.
"""

from __future__ import annotations

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
    kind: str  # "bundle", "borzoi" or "seqnn" (a baskerville Keras model)
    seq_len: int
    stride: int
    bin_size: int
    target_length: int
    n_tracks: int  # output tracks before subsetting
    default_targets: Path | None = None  # used when no targets table is given
    params: Path | None = None  # a Keras model's baskerville params.json

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
        index = [int(i) for i in targets.index]
        if self.kind in ("borzoi", "seqnn") and self.module.select_tracks(index):
            return  # the head was cut down (cheaper than computing every track and slicing)
        if index != list(range(self.n_tracks)):
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


def check_stride(path: Path, seq_len: int, stride: int) -> None:
    if seq_len <= 0 or seq_len % stride:
        raise KennelError(
            f"{path}: seq_len={seq_len} is not a positive multiple of the model's stride ({stride})"
        )
