"""A classify job's model outputs file: what the GPU job hands the CPU job that tags the BAM.

Tagging a BAM is Python per record (~8-13k reads/s on one core), several times slower than a
GPU scores them, so a GPU job that tagged its own BAM would spend most of its GPU-hours
waiting on the writer. ``kennel classify`` writes each batch's outputs here instead (a few
milliseconds a batch) and ``kennel tag`` (:mod:`kennel.trna.tag`), a CPU job, replays them
through the same tagging writer.

Layout (HDF5): one dataset per row array the writer reads (``read_id`` and, for leech
bundles, ``base_idx``, ``junction_indel``, ``junction_mapped``), the model's ``scores`` and
``charging`` (if it has a charging head), exactly as the writer would have received them
(float64); attributes ``kind``, ``bundle_sha256``, ``settings`` (the classify settings, JSON),
``stats`` (the classify job's run stats, JSON), ``rows`` and ``reads``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np

from kennel.errors import KennelError
from kennel.pipeline import FixedBatch
from kennel.trna.features import append_rows, resizable_rows

KIND = "kennel-classify-outputs"
SCORES, CHARGING = "scores", "charging"


class OutputsWriter:
    """Owned by the classify job's writer thread: appends each batch's real rows."""

    def __init__(self, path: str | os.PathLike, padded: Sequence[str], attributes: dict, progress):
        self._progress = progress
        self._padded = set(padded)  # model inputs: the tagging writer never reads them
        self._handle = h5py.File(path, "w", rdcc_nbytes=0)
        self._handle.attrs["kind"] = KIND
        for key, value in attributes.items():
            self._handle.attrs[key] = value
        self._datasets: dict[str, h5py.Dataset] = {}
        self._last_read: bytes | None = None
        self.rows = 0
        self.reads = 0  # a read's rows are consecutive (a binary leech model scores every chunk)

    def write(self, item: tuple[FixedBatch, tuple[np.ndarray, np.ndarray | None]]) -> None:
        batch, (scores, charging) = item
        n = batch.n_real
        rows = {k: v[:n] for k, v in batch.arrays.items() if k not in self._padded}
        rows[SCORES] = scores[:n]
        if charging is not None:
            rows[CHARGING] = charging[:n]
        if not self._datasets:
            self._datasets = {
                name: resizable_rows(
                    self._handle, name, np.empty((0, *values.shape[1:]), values.dtype)
                )
                for name, values in rows.items()
            }
        if rows.keys() != self._datasets.keys():
            raise KennelError(f"{self._handle.filename}: a batch of other outputs than the first")
        for name, values in rows.items():
            append_rows(self._datasets[name], np.asarray(values, self._datasets[name].dtype))
        ids = rows["read_id"]
        if n:
            new = np.r_[ids[0] != self._last_read, ids[1:] != ids[:-1]]
            self.reads += int(new.sum())
            self._last_read = ids[-1]
        self.rows += n
        self._progress.add(n)

    def close(self, stats: dict | None = None) -> None:
        self._progress.finish()
        self._handle.attrs["rows"] = self.rows
        self._handle.attrs["reads"] = self.reads
        if stats is not None:
            self._handle.attrs["stats"] = json.dumps(stats, sort_keys=True)
        self._handle.close()

    def abandon(self) -> None:
        self._handle.close()


class ModelOutputs:
    """Read side: the classify job's attributes and its outputs in blocks, as batches."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self._handle = h5py.File(self.path, "r")
            attrs = self._handle.attrs
            if attrs.get("kind") != KIND:
                raise KeyError("kind")
            self.bundle_sha256 = str(attrs["bundle_sha256"])
            self.settings = json.loads(attrs["settings"])
            self.stats = json.loads(attrs["stats"])
            self.rows, self.reads = int(attrs["rows"]), int(attrs["reads"])
            self._datasets = {name: self._handle[name] for name in self._handle}
            if self.rows and not {"read_id", SCORES} <= self._datasets.keys():
                raise KeyError(f"{sorted(self._datasets)} lack read_id or scores")
        except (OSError, KeyError, ValueError) as error:
            self.close()
            raise KennelError(
                f"{self.path}: not a complete kennel classify outputs file ({error})"
            ) from None
        lengths = {d.shape[0] for d in self._datasets.values()} or {0}
        if lengths != {self.rows}:
            self.close()
            raise KennelError(f"{self.path}: datasets of {lengths} rows, not {self.rows}")

    def __enter__(self) -> ModelOutputs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._handle.close()

    def batches(self, size: int) -> Iterator[tuple[FixedBatch, tuple[np.ndarray, np.ndarray]]]:
        """``(batch, (scores, charging))`` of ``size`` rows, as the writer thread got them."""
        names = [n for n in self._datasets if n not in (SCORES, CHARGING)]
        for start in range(0, self.rows, size):
            stop = min(start + size, self.rows)
            try:
                arrays = {name: self._datasets[name][start:stop] for name in names}
                scores = self._datasets[SCORES][start:stop]
                charging = (
                    self._datasets[CHARGING][start:stop] if CHARGING in self._datasets else None
                )
            except OSError as error:
                raise KennelError(
                    f"{self.path}: rows {start}-{stop}: unreadable (truncated file?) ({error})"
                ) from None
            yield FixedBatch(arrays, stop - start, stop - start), (scores, charging)
