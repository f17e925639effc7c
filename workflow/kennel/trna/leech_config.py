"""What a leech 0.16.0 bundle's config says, read as leech predict reads it.

The config itself (:func:`load_leech_config`: a bundle's or a checkpoint directory's), leech
predict's input options resolved against it (:class:`LeechPredictOptions`), and the dwell
template table it may name (:func:`load_dwell_template`, read by :func:`dwell_template`, checked
by :func:`checked_dwell_template`). What it says of the model's own inputs (feature rows and
window) is read in :mod:`kennel.models.leech_defaults`, which the networks share.
:class:`kennel.trna.leech_spec.LeechInputSpec` builds on these.
"""

from __future__ import annotations

import csv
import functools
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from kennel.errors import KennelError
from kennel.models.leech_defaults import config_feature_window


@dataclass(frozen=True)
class LeechPredictOptions:
    """leech predict's ``--motif``, ``--motif-offset``, ``--base-justify`` and ``--anchor``
    (None: not given), and how the run to reproduce extracted: ``--backend`` and whether
    leech-core was installed (:attr:`~kennel.trna.leech_spec.LeechInputSpec.leech_python_path`).

    leech resolves each against the model config: a recorded value wins and a given one that
    differs is refused (a model runs with what it was trained on); a config that records none
    (``leech model train`` without ``--motif`` writes ``motif: null``) takes the given value, or
    leech's default.
    """

    # the settings a model config may record (trna.leech's keys of the same names)
    CONFIG_KEYS: ClassVar[tuple[str, ...]] = ("motif", "motif_offset", "base_justify", "anchor")

    motif: str | None = None
    motif_offset: int | None = None
    base_justify: str | None = None
    anchor: str | None = None
    backend: str = "auto"
    leech_core: bool = True

    def given(self) -> dict[str, str | int]:
        values = {key: getattr(self, key) for key in self.CONFIG_KEYS}
        return {key: value for key, value in values.items() if value is not None}

    def resolve(self, config: Mapping) -> dict:
        """``config`` with the given settings it does not record filled in."""
        resolved = dict(config)
        for key, value in self.given().items():
            recorded = config.get(key)
            if recorded is None:
                resolved[key] = value
            elif recorded != value:
                raise KennelError(
                    f"leech {key} {value!r} conflicts with the model config's {recorded!r} "
                    "(leech predict refuses it too: a model runs with what it was trained on)"
                )
        return resolved


@dataclass(frozen=True)
class DwellTemplate:
    """A leech dwell template table: each amino acid's expected dwell at positions
    ``first..last`` from the focus base (``dwell_mean``, in samples)."""

    expected: np.ndarray  # (amino acids, positions) float32
    first: int
    motif_offset: int | None  # the focus base its positions count from, when recorded

    @property
    def rows(self) -> int:
        return self.expected.shape[0]

    @property
    def last(self) -> int:
        return self.first + self.expected.shape[1] - 1


@functools.cache
def dwell_template(text: str) -> DwellTemplate:
    """A dwell template table's text (TSV ``aa``, ``position``, ``dwell_mean`` after ``# key:
    value`` lines) read as leech reads it: amino acids in sorted order, a missing entry 1, an
    entry of 0 or less the mean of its position's entries."""
    lines = text.splitlines()
    header = {}
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            break
        key, sep, value = line.strip()[1:].partition(":")
        if key.strip() and sep:
            header[key.strip().lower()] = value.strip()
    body = [line for line in lines if not line.startswith("#")]
    try:
        rows = [
            (row["aa"], int(row["position"]), float(row["dwell_mean"]))
            for row in csv.DictReader(io.StringIO("\n".join(body)), delimiter="\t")
        ]
        offset = header.get("motif_offset")
        motif_offset = int(offset) if offset is not None else None
    except (KeyError, TypeError, ValueError) as error:
        raise KennelError(f"unreadable table ({error!r})") from None
    if not rows:
        raise KennelError("a table without rows")
    acids = sorted({aa for aa, _, _ in rows})
    first = min(position for _, position, _ in rows)
    width = max(position for _, position, _ in rows) - first + 1
    expected = np.ones((len(acids), width), np.float32)
    by_position: dict[int, list[float]] = {}
    for aa, position, value in rows:
        expected[acids.index(aa), position - first] = value
        by_position.setdefault(position, []).append(value)
    for column in range(width):
        values = by_position.get(first + column)
        fill = float(np.mean(values)) if values else 1.0
        expected[:, column] = np.where(expected[:, column] <= 0, fill, expected[:, column])
    return DwellTemplate(expected, first, motif_offset)


def load_dwell_template(path: str | os.PathLike, config: Mapping) -> str | None:
    """The dwell template table of a leech bundle or checkpoint directory whose config names
    one: the bundle's embedded copy (leech#369), else the named file, an absolute path or one
    relative to the bundle's folder (the checkpoint directory); None when none is named."""
    named = config.get("dwell_template_table")
    if not named:
        return None
    path = Path(path)
    if not path.is_dir():
        import torch

        bundle = torch.load(path, weights_only=True, map_location="cpu")
        embedded = bundle.get("dwell_template_table_bytes") if isinstance(bundle, dict) else None
        if embedded:
            return bytes(embedded).decode()
    table = Path(named)
    if not table.is_absolute():
        table = (path if path.is_dir() else path.parent) / table
    try:
        return table.read_text()
    except OSError:
        return None


def load_leech_config(path: str | os.PathLike) -> dict:
    """The ``config`` of a leech bundle (``.pt``) or a checkpoint directory's ``config.json``."""
    path = Path(path)
    if path.is_dir():
        import json

        try:
            return json.loads((path / "config.json").read_text())
        except (OSError, ValueError) as error:
            raise KennelError(f"{path}: unreadable leech checkpoint config ({error})") from None
    import torch

    try:
        bundle = torch.load(path, weights_only=True, map_location="cpu")
    except (OSError, RuntimeError, ValueError) as error:
        raise KennelError(f"{path}: unreadable leech bundle ({error})") from None
    if not isinstance(bundle, dict) or not isinstance(bundle.get("config"), dict):
        raise KennelError(f"{path}: not a leech bundle (no config)")
    config = dict(bundle["config"])
    # a bundle may name its architecture only in its metadata, as leech's loader reads it
    metadata = bundle.get("metadata")
    if not config.get("model_name") and isinstance(metadata, dict):
        config["model_name"] = metadata.get("architecture")
    return config


def checked_dwell_template(
    config: Mapping, text: str | None, channels: Sequence[str]
) -> DwellTemplate | None:
    """The dwell template table a config names (``text``, :func:`load_dwell_template`), read
    and checked as leech checks it before appending its rows; None when none is named."""
    if not config.get("dwell_template_table"):
        return None

    def refuse(why: str) -> KennelError:
        return KennelError(f"leech config key 'dwell_template_table': {why}")

    if text is None:
        raise refuse(
            f"{config['dwell_template_table']!r}: the table is neither in the bundle nor beside it"
        )
    try:
        template = dwell_template(text)
    except KennelError as error:
        raise refuse(str(error)) from None
    if "dwell" not in channels:
        raise refuse("the feature_channels have no dwell row")
    # leech appends the rows over the window the features were stored with, then cuts
    start, end = config_feature_window(config)
    if min(end, template.last) < max(start, template.first):
        raise refuse(
            f"positions {template.first}..{template.last} miss the feature window "
            f"{start}..{end} (leech refuses it too)"
        )
    motif_offset = int(config.get("motif_offset") or 0)  # null: leech's default
    if template.motif_offset not in (None, motif_offset):
        # the table's positions count from the focus base it was built for (leech#364)
        raise refuse(
            f"the table was built at motif_offset {template.motif_offset}, the model's is "
            f"{motif_offset} (leech refuses it too)"
        )
    return template
