"""A baskerville model (``params.json`` + a Keras ``model.h5``, as ``hound_snp`` loads it) in
PyTorch, so a lab's own Borzoi-family models score in kennel as they did in hound_snp.

``params["model"]`` lists the trunk's blocks and the heads; :class:`SeqNN` holds the same
network, built (:mod:`kennel.models.seqnn_builder`) block by block as baskerville's
``SeqNN.build_model`` does (global options passed to each block, representations saved for the
U-net blocks, the global activation after the trunk, head 0 as hound_snp restores it). The
blocks read are Borzoi's and their relatives: ``conv_dna``, ``conv_block``, ``conv_nac``,
``res_tower``, ``transformer_tower`` / ``transformer``, ``unet_conv``, ``Cropping1D`` and
``final``; anything else, or an option of theirs that would change the computation and is not
implemented, is refused by name.

The weights come from the HDF5 file by layer: Keras names a layer after its class and a counter
in creation order (``conv1d``, ``conv1d_1``, …), and the builder creates its layers in
baskerville's order, so the k-th ``conv1d`` the builder makes takes the k-th ``conv1d`` in the
file (the pairing ``load_weights`` makes between two builds of the same params).
"""

from __future__ import annotations

import torch
from torch import nn

from kennel.models.seqnn_blocks import Saved
from kennel.models.seqnn_builder import Builder
from kennel.models.seqnn_layers import PositionwiseDense


class SeqNN(nn.Module):
    """The trunk and head 0 of a baskerville model: one-hot ``(batch, length, 4)`` →
    ``(batch, bins, tracks)``, as Keras's ``model(x, training=False)``."""

    def __init__(self, model_params: dict, where: str = "params.json"):
        super().__init__()
        builder = Builder(model_params, where)
        self.trunk = nn.ModuleList(builder.trunk())
        self.head = nn.ModuleList(builder.head())
        self.wanted = frozenset(builder.wanted)
        self.seq_len = builder.seq_len
        self.stride = builder.max_scale  # seq_len must divide into whole positions here
        self.bin_size = builder.shape.scale
        self.target_length = builder.shape.length
        self.tracks = builder.shape.channels

    def select_tracks(self, track_index: list[int]) -> bool:
        """Compute only ``track_index`` of the output where the head ends in its dense layer
        (a 7,611-track head computed to keep a few would waste most of its work): that
        layer's rows. False, changing nothing, for another head."""
        last = self.head[-1].body
        if not (isinstance(last, nn.Sequential) and isinstance(last[0], PositionwiseDense)):
            return False
        last[0].keep_units(track_index)
        return True

    def forward(self, one_hot: torch.Tensor) -> torch.Tensor:
        x = one_hot.transpose(1, 2)
        saved = Saved(self.wanted)
        for block in self.trunk[:-1]:
            x = block(x, saved)
            saved.add(x)
        x = self.trunk[-1](x, saved)  # the global activation after the trunk
        for block in self.head:
            x = block(x, saved)
        return x.transpose(1, 2)
