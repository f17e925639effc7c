"""kennel's PyTorch SeqNN against independent references: a plain loop for the attention's
relative shift, borzoi-pytorch's port for the published Borzoi's layout, and the full output
for a cut-down head. (Against TensorFlow and hound_snp: tests/snp/test_hound_snp_run.py.)"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from kennel.models.seqnn import SeqNN
from kennel.models.seqnn_file import seqnn_layout
from kennel.models.seqnn_layers import relative_shift
from kennel.snp.sequence_model import SequenceModel

RUN = Path(__file__).parents[1] / "snp" / "hound_snp_run"


def test_the_relative_shift_gives_row_i_column_j_the_logit_of_distance_j_minus_i():
    length = 7
    logits = torch.randn(2, 3, length, 2 * length - 1)  # columns: distances -(L-1)..(L-1)
    expected = torch.empty(2, 3, length, length)
    for i in range(length):
        for j in range(length):
            expected[..., i, j] = logits[..., i, (j - i) + (length - 1)]
    assert torch.equal(relative_shift(logits), expected)


def test_the_published_borzoi_params_build_borzoi_pytorchs_network():
    """Borzoi's own params_pred.json (calico/borzoi examples/, copied beside the fixture) gives
    the layout of borzoi-pytorch's independent port: the same weights, shape for shape (its
    dense layers are width-1 convolutions there), and the same output geometry."""
    pytest.importorskip("borzoi_pytorch")
    from borzoi_pytorch import Borzoi
    from borzoi_pytorch.config_borzoi import BorzoiConfig

    kennel = seqnn_layout(RUN / "borzoi_params_pred.json")
    with torch.device("meta"):
        port = Borzoi(BorzoiConfig(return_center_bins_only=False))

    def shapes(module):
        return Counter(
            tuple(p.shape[:2]) if p.dim() == 3 and p.shape[2] == 1 else tuple(p.shape)
            for p in module.parameters()
        )

    assert shapes(kennel) == shapes(port)
    assert sum(p.numel() for p in kennel.parameters()) == 185_892_699
    geometry = (kennel.seq_len, kennel.bin_size, kennel.target_length, kennel.tracks)
    assert geometry == (524_288, 32, 16_384 - 32, port.human_head.out_channels)


def _random_network(model_params: dict) -> SeqNN:
    torch.manual_seed(3)
    network = SeqNN(model_params)
    with torch.no_grad():
        for name, tensor in network.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5 if "running_var" in name else
                             torch.randn_like(tensor) * 0.3)  # fmt: skip
    return network.eval()


@pytest.mark.parametrize("head_ends_in_final", [True, False])
def test_selected_tracks_are_the_full_outputs_columns(head_ends_in_final):
    """A head ending in its dense layer computes only the chosen rows; any other head's output
    is indexed by the scorer's track subset. Either way the output is the full output's
    columns, in the targets table's order."""
    model_params = json.loads((RUN / "params.json").read_text())["model"]
    if not head_ends_in_final:
        model_params["head_human"] = [model_params["head_human"], {"name": "Cropping1D",
                                                                   "cropping": 2}]  # fmt: skip
    network = _random_network(model_params)
    model = SequenceModel(network, RUN / "model.h5", "seqnn", network.seq_len, network.stride,
                          network.bin_size, network.target_length, network.tracks)  # fmt: skip
    targets = SimpleNamespace(index=[5, 0, 3], path="targets.txt", identifier=["a", "b", "c"])
    one_hot = torch.nn.functional.one_hot(torch.randint(0, 4, (2, 4096)), 4).float()
    with torch.inference_mode():
        full = network(one_hot)
        model.select_tracks(targets)
        chosen = model.module(one_hot)
    assert (model.module is network) is head_ends_in_final  # else wrapped in the subset
    torch.testing.assert_close(chosen, full[..., [5, 0, 3]], rtol=1e-6, atol=1e-6)
