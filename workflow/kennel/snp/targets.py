"""Baskerville's targets table: which model tracks to score, their strands and transforms.

The table is tab-separated with the model's output track index as its first (unnamed) column,
then ``identifier``, ``description``, optionally ``strand_pair`` (the index of the track's
opposite-strand partner, its own index when unstranded; without the column every track is
unstranded, as hound_snp then neither swaps nor sums strands) and, for untransforming
predictions, ``clip_soft``, ``scale`` and ``sum_stat``. A table may list a subset of the
model's tracks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from kennel.errors import KennelError, fail

REQUIRED_COLUMNS = ("identifier", "description")
UNTRANSFORM_COLUMNS = ("clip_soft", "scale", "sum_stat")


@dataclass(frozen=True)
class Targets:
    """A parsed targets table; positions below are rows of this table, not model indices."""

    path: Path
    index: np.ndarray  # model output track of each row
    identifier: tuple[str, ...]
    description: tuple[str, ...]
    strand_pair: np.ndarray  # row of each row's partner (itself when unstranded)
    clip_soft: np.ndarray | None = None
    scale: np.ndarray | None = None
    sum_stat: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.identifier)

    @property
    def collapsed_rows(self) -> np.ndarray:
        """Rows that stand for their strand pair once pairs are summed (the '+' one, else the
        first), in table order; unstranded rows stand for themselves."""
        keep = []
        for row, partner in enumerate(self.strand_pair):
            if partner == row or self._represents(row, int(partner)):
                keep.append(row)
        return np.array(keep, dtype=np.int64)

    def _represents(self, row: int, partner: int) -> bool:
        minus_row = self.identifier[row].endswith("-")
        minus_partner = self.identifier[partner].endswith("-")
        if minus_row != minus_partner:
            return minus_partner
        return row < partner

    @property
    def collapsed_partners(self) -> np.ndarray:
        """Partner row of each collapsed row (itself when unstranded)."""
        return self.strand_pair[self.collapsed_rows]

    @property
    def has_untransform(self) -> bool:
        return self.clip_soft is not None


def read_targets(path: str | os.PathLike, require_untransform: bool = False) -> Targets:
    """Read and check a targets table; every problem is one line naming the file and row."""
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: targets file not found")
    try:
        table = pd.read_csv(path, sep="\t", index_col=0, dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise KennelError(f"{path}: not a tab-separated targets table ({message})") from None
    if table.empty:
        raise KennelError(f"{path}: targets table has no rows")
    needed = REQUIRED_COLUMNS + (UNTRANSFORM_COLUMNS if require_untransform else ())
    missing = [column for column in needed if column not in table.columns]
    if missing:
        raise KennelError(
            f"{path}: missing column(s) {', '.join(missing)} "
            f"(a baskerville targets table has {', '.join(REQUIRED_COLUMNS + UNTRANSFORM_COLUMNS)}"
            ", and strand_pair for stranded tracks)"
        )

    index = _integers(path, table.index, "index", table)
    if len(set(index.tolist())) != len(index):
        duplicated = pd.Series(index).duplicated()
        row = int(np.flatnonzero(duplicated)[0])
        raise fail(path, f"track index {index[row]} appears twice", record=f"row {row + 1}")
    if (index < 0).any():
        row = int(np.flatnonzero(index < 0)[0])
        raise fail(path, f"track index {index[row]} is negative", record=f"row {row + 1}")
    position = {int(track): row for row, track in enumerate(index)}
    if "strand_pair" in table.columns:
        pairs = _integers(path, table["strand_pair"], "strand_pair", table)
    else:
        pairs = index  # every track its own partner
    strand_pair = np.empty(len(index), dtype=np.int64)
    for row, partner in enumerate(pairs):
        where = f"row {row + 1} ({table['identifier'].iloc[row]})"
        if int(partner) not in position:
            raise fail(
                path,
                f"strand_pair {partner} is out of range (not a track index in this table)",
                record=where,
            )
        strand_pair[row] = position[int(partner)]
    for row, partner in enumerate(strand_pair):
        if strand_pair[partner] != row:
            where = f"row {row + 1} ({table['identifier'].iloc[row]})"
            raise fail(
                path,
                f"strand_pair {pairs[row]} does not point back (its strand_pair is "
                f"{pairs[partner]})",
                record=where,
            )

    untransform = {}
    if all(column in table.columns for column in UNTRANSFORM_COLUMNS):
        untransform = {
            "clip_soft": _numbers(path, table["clip_soft"], "clip_soft", table),
            "scale": _numbers(path, table["scale"], "scale", table),
            "sum_stat": tuple(table["sum_stat"]),
        }
        if (untransform["scale"] <= 0).any():
            row = int(np.flatnonzero(untransform["scale"] <= 0)[0])
            raise fail(path, "scale must be positive", record=f"row {row + 1}")
    return Targets(
        path=path,
        index=index,
        identifier=tuple(table["identifier"]),
        description=tuple(table["description"]),
        strand_pair=strand_pair,
        **untransform,
    )


def _integers(path: Path, values, column: str, table: pd.DataFrame) -> np.ndarray:
    return _parsed(path, values, column, table, int, np.int64, "an integer")


def _numbers(path: Path, values, column: str, table: pd.DataFrame) -> np.ndarray:
    return _parsed(path, values, column, table, float, np.float64, "a number")


def _parsed(path, values, column, table, convert, dtype, noun: str) -> np.ndarray:
    """``values`` converted one by one, so a bad cell is named by row and identifier."""
    result = np.empty(len(values), dtype=dtype)
    for row, value in enumerate(values):
        try:
            result[row] = convert(str(value).strip())
        except ValueError:
            where = f"row {row + 1} ({table['identifier'].iloc[row]})"
            raise fail(path, f"{column} {value!r} is not {noun}", record=where) from None
    return result


class Untransform:
    """Undo the training transforms of predictions ``(..., tracks)``, as hound_snp does.

    In order: soft clipping (values above ``clip_soft`` become
    ``clip_soft - 1 + (x - clip_soft + 1)**2``), the square root of ``*_sqrt`` sum stats
    (``(x + 1)**2 - 1``), and only with ``unscale`` the scale (``x / scale``): baskerville's
    ``untransform_preds`` defaults, which hound_snp calls, leave the scale in.

    ``old`` is hound_snp's ``-u`` (baskerville's ``untransform_preds1``), for models trained
    with the earlier transforms, the published Borzoi among them: divide by the scale, soft
    clip to ``clip_soft + (x - clip_soft)**2``, raise ``*_sqrt`` tracks to the power 4/3 (they
    were squashed by 3/4), and multiply the scale back unless ``unscale``.

    Computed in the predictions' dtype; the per-track constants are put on the device once.
    """

    def __init__(
        self,
        targets: Targets,
        device: torch.device | str = "cpu",
        unscale: bool = False,
        old: bool = False,
    ) -> None:
        if not targets.has_untransform:
            raise KennelError(
                f"{targets.path}: untransforming needs columns {', '.join(UNTRANSFORM_COLUMNS)}"
            )
        self.clip_soft = torch.as_tensor(targets.clip_soft, dtype=torch.float64, device=device)
        self.scale = torch.as_tensor(targets.scale, dtype=torch.float64, device=device)
        self.unscale, self.old = unscale, old
        sqrt = [stat.find("_sqrt") != -1 for stat in targets.sum_stat]
        self.sqrt = torch.as_tensor(sqrt, device=device) if any(sqrt) else None

    def __call__(self, predictions: torch.Tensor) -> torch.Tensor:
        clip_soft = self.clip_soft.to(predictions.dtype)
        scale = self.scale.to(predictions.dtype)
        if self.old:
            result = predictions / scale
            result = torch.where(result > clip_soft, clip_soft + (result - clip_soft) ** 2, result)
            if self.sqrt is not None:
                result = torch.where(self.sqrt, result ** (4 / 3), result)
            return result if self.unscale else result * scale
        unclipped = clip_soft - 1 + (predictions - clip_soft + 1) ** 2
        result = torch.where(predictions > clip_soft, unclipped, predictions)
        if self.sqrt is not None:
            result = torch.where(self.sqrt, (result + 1) ** 2 - 1, result)
        return result / scale if self.unscale else result


def untransform(
    predictions: torch.Tensor, targets: Targets, unscale: bool = False, old: bool = False
) -> torch.Tensor:
    """:class:`Untransform` for one call."""
    return Untransform(targets, predictions.device, unscale, old)(predictions)
