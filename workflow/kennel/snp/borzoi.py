"""Optional adapter for real Borzoi weights through borzoi-pytorch (``pip install kennel[borzoi]``).

The model is loaded from a local directory with ``from_pretrained`` (nothing is fetched): a
Borzoi (32-bp bins) or a Borzoi Prime (``model_type: prime``: a third U-net level, 16-bp bins),
either of them Flashzoi-style (``flashed``). It takes ``(batch, 4, seq_len)`` and returns
``(batch, tracks, bins)``; the adapter transposes both so the scorer sees kennel's
``(batch, length, 4) -> (batch, bins, tracks)`` layout. The relative-position attention caches
its positional embeddings for the first input length it sees, so one model instance serves one
``seq_len``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from kennel.errors import KennelError
from kennel.snp.sequence_model import SequenceModel, check_stride

logger = logging.getLogger(__name__)

BORZOI_SEQ_LEN = 524_288
BORZOI_STRIDE = 128  # seven halvings down to the transformer, for both families


@dataclass(frozen=True)
class Family:
    """What differs between borzoi-pytorch's networks, by their config's ``model_type``."""

    network: str  # the borzoi_pytorch class
    config: str  # its config class in borzoi_pytorch.config_borzoi
    bin_size: int  # bases per output bin: the U-net's upsamplings back from the stride
    uncropped_bins: int  # the output without return_center_bins_only
    package_targets: bool  # borzoi-pytorch's targets table describes this human head


FAMILIES = {
    "borzoi": Family("Borzoi", "BorzoiConfig", 32, 16_384 - 32, True),
    "prime": Family("Prime", "PrimeConfig", 16, 32_768 - 32, False),  # 5,431 tracks: no table
}


def borzoi_available() -> bool:
    """Whether the optional borzoi-pytorch package is installed."""
    return importlib.util.find_spec("borzoi_pytorch") is not None


def default_targets_path() -> Path:
    """borzoi-pytorch's own targets table (the human head's 7,611 tracks)."""
    spec = importlib.util.find_spec("borzoi_pytorch")
    return Path(spec.origin).parent / "precomputed" / "targets.txt"


class BorzoiAdapter(nn.Module):
    """kennel's layout around a borzoi-pytorch network, through the head it scores with: the
    human head, or the mouse head of a model whose config turns the human head off (borzoi-
    pytorch's mouse replicates)."""

    def __init__(self, borzoi: nn.Module, model_dir: Path) -> None:
        super().__init__()
        self.borzoi = borzoi
        self.human = hasattr(borzoi, "human_head")
        if not self.human and not hasattr(borzoi, "mouse_head"):
            raise KennelError(f"{model_dir}/config.json: the config turns both heads off")
        self.head_name = "human_head" if self.human else "mouse_head"

    @property
    def head(self) -> nn.Conv1d:
        return getattr(self.borzoi, self.head_name)

    def forward(self, one_hot: torch.Tensor) -> torch.Tensor:
        return self.borzoi(one_hot.transpose(1, 2), is_human=self.human).transpose(1, 2)

    def select_tracks(self, track_index: list[int]) -> bool:
        """Keep only ``track_index`` in the head (cheaper than computing all and slicing). Done
        here for either head: borzoi-pytorch's ``set_track_subset`` cuts only the human head,
        and keeps a second copy of it."""
        head = self.head
        if track_index != list(range(head.out_channels)):
            subset = nn.Conv1d(head.in_channels, len(track_index), 1)
            subset.to(head.weight.device, head.weight.dtype)
            with torch.no_grad():
                subset.weight.copy_(head.weight[track_index])
                subset.bias.copy_(head.bias[track_index])
            setattr(self.borzoi, self.head_name, subset)
        return True


def model_family(model_dir: Path) -> Family:
    """The network a borzoi-pytorch directory's ``config.json`` names, in one line if none."""
    try:
        model_type = json.loads((model_dir / "config.json").read_text()).get("model_type", "borzoi")
    except (OSError, ValueError, AttributeError) as error:
        raise KennelError(f"{model_dir}/config.json: not a model config ({error})") from None
    if model_type not in FAMILIES:
        raise KennelError(
            f"{model_dir}/config.json: model_type {model_type!r} is not one of borzoi-pytorch's "
            f"networks kennel runs ({', '.join(FAMILIES)})"
        )
    return FAMILIES[model_type]


def _from_pretrained(model_dir: Path, family: Family) -> nn.Module:
    """The model the directory holds, every weight from its checkpoint: transformers only warns
    about a weight the checkpoint lacks and leaves it random, so that stops the job here (one it
    holds beyond the network is only logged). A Flashzoi-style (``flashed``) config is built
    with kennel's own attention (:mod:`kennel.snp.flashzoi`), which needs no flash_attn."""
    import borzoi_pytorch
    from borzoi_pytorch import config_borzoi

    network = getattr(borzoi_pytorch, family.network)
    try:
        config = getattr(config_borzoi, family.config).from_pretrained(
            str(model_dir), local_files_only=True
        )
        if getattr(config, "flashed", False):
            from kennel.snp.flashzoi import check_flashed_config, rotary

            check_flashed_config(str(model_dir), config.dim, config.heads)
            network = rotary(network)
        borzoi, loading = network.from_pretrained(
            str(model_dir), config=config, local_files_only=True, output_loading_info=True
        )
    except (OSError, ValueError, RuntimeError) as error:
        message = str(error).strip().splitlines()[0]
        raise KennelError(f"{model_dir}: cannot load Borzoi ({message})") from None
    unused = loading["unexpected_keys"]
    # BatchNorm's step counter only counts training steps: conversions to borzoi-pytorch that
    # build the state dict by hand leave it out, and transformers sets it to 0 as saved ones hold
    missing = [k for k in loading["missing_keys"] if not k.endswith(".num_batches_tracked")]
    if missing:
        raise KennelError(
            f"{model_dir}: the checkpoint lacks {len(missing)} of the weights its config.json "
            f"describes ({_some(missing)}): another network's checkpoint, or a config edited since"
        )
    if unused:  # e.g. a head the config turns off: computes nothing, so say so and go on
        logger.warning(
            "%s: %d tensors of the checkpoint are not in the network its config.json "
            "describes, and are not used (%s)", model_dir, len(unused), _some(unused),
        )  # fmt: skip
    return borzoi


def _some(names: list[str]) -> str:
    return ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")


def load_borzoi(model_dir: str | Path, seq_len: int | None = None):
    """Load Borzoi from a local ``from_pretrained`` directory as a scorer-ready model."""
    model_dir = Path(model_dir)
    if not borzoi_available():
        raise KennelError(
            f"{model_dir}: scoring with Borzoi needs borzoi-pytorch (pip install 'kennel[borzoi]')"
        )
    if not (model_dir / "config.json").is_file():
        raise KennelError(f"{model_dir}: not a borzoi-pytorch model directory (no config.json)")
    family = model_family(model_dir)
    seq_len = seq_len or BORZOI_SEQ_LEN
    check_stride(model_dir, seq_len, BORZOI_STRIDE)
    borzoi = _from_pretrained(model_dir, family)
    config = borzoi.config
    target_length = (
        config.bins_to_return if config.return_center_bins_only else family.uncropped_bins
    )
    if target_length > seq_len // family.bin_size:
        raise KennelError(
            f"{model_dir}: model output length {target_length} bins needs seq_len >= "
            f"{target_length * family.bin_size}, got {seq_len}"
        )
    adapter = BorzoiAdapter(borzoi.eval(), model_dir)
    return SequenceModel(
        module=adapter,
        path=model_dir,
        kind="borzoi",
        seq_len=seq_len,
        stride=BORZOI_STRIDE,
        bin_size=family.bin_size,
        target_length=int(target_length),
        n_tracks=int(adapter.head.out_channels),
        default_targets=default_targets_path()
        if family.package_targets and adapter.human
        else None,
    )
