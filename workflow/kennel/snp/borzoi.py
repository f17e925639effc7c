"""Optional adapter for real Borzoi weights through borzoi-pytorch (``pip install kennel[borzoi]``).

The model is loaded from a local directory with ``Borzoi.from_pretrained`` (nothing is fetched).
Borzoi takes ``(batch, 4, seq_len)`` and returns ``(batch, tracks, bins)``; the adapter transposes
both so the scorer sees kennel's ``(batch, length, 4) -> (batch, bins, tracks)`` layout. Its
attention caches relative positional embeddings for the first input length it sees, so one
model instance serves one ``seq_len``.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch
from torch import nn

from kennel.errors import KennelError
from kennel.snp.sequence_model import SequenceModel, check_stride

logger = logging.getLogger(__name__)

BORZOI_SEQ_LEN = 524_288
BORZOI_STRIDE = 128  # seven halvings down to the transformer; outputs come back at 32 bp
BORZOI_BIN_SIZE = 32
BORZOI_UNCROPPED_BINS = 16_384 - 32


def borzoi_available() -> bool:
    """Whether the optional borzoi-pytorch package is installed."""
    return importlib.util.find_spec("borzoi_pytorch") is not None


def default_targets_path() -> Path:
    """borzoi-pytorch's own targets table (the human head's 7,611 tracks)."""
    spec = importlib.util.find_spec("borzoi_pytorch")
    return Path(spec.origin).parent / "precomputed" / "targets.txt"


class BorzoiAdapter(nn.Module):
    """kennel's layout around a borzoi-pytorch ``Borzoi``."""

    def __init__(self, borzoi: nn.Module) -> None:
        super().__init__()
        self.borzoi = borzoi

    def forward(self, one_hot: torch.Tensor) -> torch.Tensor:
        return self.borzoi(one_hot.transpose(1, 2)).transpose(1, 2)

    def select_tracks(self, track_index: list[int]) -> bool:
        """Keep only ``track_index`` in the human head (cheaper than computing all and slicing)."""
        if track_index != list(range(self.borzoi.human_head.out_channels)):
            self.borzoi.set_track_subset(track_index)
        return True


def _from_pretrained(model_dir: Path) -> nn.Module:
    """The model the directory holds, every weight from its checkpoint: transformers only warns
    about a weight the checkpoint lacks and leaves it random, so that stops the job here (one it
    holds beyond the network is only logged). A Flashzoi (``flashed``) config is built with kennel's
    own attention (:mod:`kennel.snp.flashzoi`), which needs no flash_attn."""
    from borzoi_pytorch import Borzoi
    from borzoi_pytorch.config_borzoi import BorzoiConfig

    try:
        config = BorzoiConfig.from_pretrained(str(model_dir), local_files_only=True)
        if getattr(config, "flashed", False):
            from kennel.snp.flashzoi import check_flashed_config, rotary_borzoi

            check_flashed_config(str(model_dir), config.dim, config.heads)
            network = rotary_borzoi()
        else:
            network = Borzoi
        borzoi, loading = network.from_pretrained(
            str(model_dir), config=config, local_files_only=True, output_loading_info=True
        )
    except (OSError, ValueError, RuntimeError) as error:
        message = str(error).strip().splitlines()[0]
        raise KennelError(f"{model_dir}: cannot load Borzoi ({message})") from None
    missing, unused = loading["missing_keys"], loading["unexpected_keys"]
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
    seq_len = seq_len or BORZOI_SEQ_LEN
    check_stride(model_dir, seq_len, BORZOI_STRIDE)
    borzoi = _from_pretrained(model_dir)
    config = borzoi.config
    target_length = (
        config.bins_to_return if config.return_center_bins_only else BORZOI_UNCROPPED_BINS
    )
    if target_length > seq_len // BORZOI_BIN_SIZE:
        raise KennelError(
            f"{model_dir}: model output length {target_length} bins needs seq_len >= "
            f"{target_length * BORZOI_BIN_SIZE}, got {seq_len}"
        )
    return SequenceModel(
        module=BorzoiAdapter(borzoi.eval()),
        path=model_dir,
        kind="borzoi",
        seq_len=seq_len,
        stride=BORZOI_STRIDE,
        bin_size=BORZOI_BIN_SIZE,
        target_length=int(target_length),
        n_tracks=int(borzoi.human_head.out_channels),
        default_targets=default_targets_path(),
    )
