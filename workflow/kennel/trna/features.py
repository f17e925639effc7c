"""The features file: what extraction writes and what the classifier streams.

One HDF5 file per shard. Per extracted read, in read order:

* ``read_id`` (S36)
* ``signal`` (n, 2, chunk_length) float16: channel 0 the normalised signal (level units, 5'→3'),
  channel 1 its residual against the expected k-mer level of the base each sample belongs to
* ``bases`` (n, window, 5) float16: per base of the window around the anchor, ``dwell`` (samples),
  ``mean``, ``std``, ``expected`` (k-mer level) and ``resid`` (mean − expected)
* ``sequence`` (S<window>): the read's bases in the window
* ``scale``, ``shift`` (float32): the per-read fit that maps MAD-normalised signal to level units
* ``anchor`` (int32): the anchor's index in the read's SEQ
* ``boundaries`` (n, window + 1) int32 and ``chunk_start`` (int32): where the window's bases and
  the chunk lie in the trimmed, reversed signal (for checks and plots)

and a skip table (``skipped/read_id``, ``skipped/reason``) for reads that could not be extracted.
The feature spec is stored as JSON in the file's attributes; a model bundle records the spec it
was trained on and the classifier refuses a file whose spec differs.

For a leech bundle the same file holds leech's model inputs instead (kind
``kennel-leech-inputs``), one row per chunk in leech's order: ``read_id``, ``base_idx``,
``junction_indel``, ``junction_mapped``, ``signal`` (n, channels, signal_len) float32 (leech's
own precision, so the tags cannot move), ``sequence`` compact (per sample the 9-mer code, see
:class:`~kennel.trna.leech_chunks.LeechChunks`) and ``features`` (n, 12, 11) float32, with the
:class:`~kennel.trna.leech_spec.LeechInputSpec` derived from the bundle's config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from kennel.errors import KennelError
from kennel.pipeline import fixed_batches
from kennel.trna.anchor import DEFAULT_MOTIF, DEFAULT_MOTIF_ANCHOR
from kennel.trna.leech_chunks import CHUNK_ARRAYS, LeechChunks
from kennel.trna.leech_spec import LeechInputSpec
from kennel.trna.spec_json import JsonSpec

FEATURE_SPEC_VERSION = 1
SIGNAL_CHANNELS = ("signal", "residual")
BASE_FEATURES = ("dwell", "mean", "std", "expected", "resid")
REFINE_MODES = ("off", "checked", "always")
JUSTIFICATIONS = ("start", "center", "end")
READ_ID_DTYPE = "S36"
SKIP_REASON_DTYPE = "S32"
# reads per HDF5 chunk: big enough to compress well, small enough to stream in batches
CHUNK_READS = 256
KENNEL_FEATURES = "kennel-trna-features"
LEECH_FEATURES = "kennel-leech-inputs"


@dataclass(frozen=True)
class FeatureSpec(JsonSpec):
    """Everything that must match between the features a model was trained on and those it reads."""

    upstream: int = 12  # bases 5' of the anchor in the window
    downstream: int = 12  # bases 3' of the anchor (the anchor itself is one more)
    chunk_length: int = 512  # samples in the signal chunk
    justify: str = "center"  # where the chunk sits on the window's signal span
    kmer_k: int = 0
    kmer_sha256: str = ""
    motif: str = DEFAULT_MOTIF
    motif_anchor: int = DEFAULT_MOTIF_ANCHOR
    normalisation: str = "mad+levels-lsq"
    signal_channels: tuple[str, ...] = SIGNAL_CHANNELS
    base_features: tuple[str, ...] = BASE_FEATURES
    version: int = FEATURE_SPEC_VERSION
    # refine_signal_map's dwell penalty: weight, and the dwell (samples) below which it bites;
    # None keeps escapepod's preset (weight 0.5, target the read's median dwell)
    dwell_weight: float | None = None
    dwell_target: float | None = None
    # off: the move table's boundaries, no DP; checked: refine the window and keep the refined
    # map only where it fits the signal better; always: keep the refined map (see README)
    refine: str = "off"
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.justify not in JUSTIFICATIONS:
            raise KennelError(f"feature spec: justify must be one of {JUSTIFICATIONS}")
        if self.refine not in REFINE_MODES:
            raise KennelError(f"feature spec: refine must be one of {', '.join(REFINE_MODES)}")
        if self.upstream < 0 or self.downstream < 0 or self.chunk_length < 16:
            raise KennelError("feature spec: window and chunk length must be positive")
        if not 0 <= self.motif_anchor < len(self.motif):
            raise KennelError(
                f"feature spec: motif anchor {self.motif_anchor} lies outside motif {self.motif!r}"
            )

    @property
    def window(self) -> int:
        return self.upstream + 1 + self.downstream


@dataclass
class FeatureBatch:
    """A batch of extracted reads, in read order."""

    read_id: np.ndarray  # (n,) S36
    signal: np.ndarray  # (n, 2, chunk_length) float16
    bases: np.ndarray  # (n, window, 5) float16
    sequence: np.ndarray  # (n,) S<window>
    scale: np.ndarray  # (n,) float32
    shift: np.ndarray  # (n,) float32
    anchor: np.ndarray  # (n,) int32
    boundaries: np.ndarray  # (n, window + 1) int32: the window's base boundaries in the signal
    chunk_start: np.ndarray  # (n,) int32: first sample of the chunk (may be < 0: zero padded)
    skipped_read_id: np.ndarray = field(default_factory=lambda: np.empty(0, READ_ID_DTYPE))
    skipped_reason: np.ndarray = field(default_factory=lambda: np.empty(0, SKIP_REASON_DTYPE))
    tallies: dict[str, int] = field(default_factory=dict)  # e.g. refinement accepted/rejected

    def __len__(self) -> int:
        return len(self.read_id)

    @classmethod
    def empty(cls, spec: FeatureSpec) -> FeatureBatch:
        return cls(
            read_id=np.empty(0, READ_ID_DTYPE),
            signal=np.empty((0, len(spec.signal_channels), spec.chunk_length), np.float16),
            bases=np.empty((0, spec.window, len(spec.base_features)), np.float16),
            sequence=np.empty(0, f"S{spec.window}"),
            scale=np.empty(0, np.float32),
            shift=np.empty(0, np.float32),
            anchor=np.empty(0, np.int32),
            boundaries=np.empty((0, spec.window + 1), np.int32),
            chunk_start=np.empty(0, np.int32),
        )


READ_DATASETS = (
    "read_id",
    "signal",
    "bases",
    "sequence",
    "scale",
    "shift",
    "anchor",
    "boundaries",
    "chunk_start",
)


def _layout(spec) -> tuple[str, str, dict[str, np.ndarray]]:
    """(file kind, spec attribute, empty template of each per-row dataset) for a spec."""
    if isinstance(spec, LeechInputSpec):
        empty = LeechChunks.empty(spec)
        templates = {name: getattr(empty, name) for name in CHUNK_ARRAYS}
        templates["read_id"] = np.empty(0, READ_ID_DTYPE)
        return LEECH_FEATURES, "leech_input_spec", templates
    empty = FeatureBatch.empty(spec)
    return KENNEL_FEATURES, "feature_spec", {name: getattr(empty, name) for name in READ_DATASETS}


def write_features(path: str | os.PathLike, batches: Iterator, spec) -> dict[str, int]:
    """Stream ``batches`` into a features file at ``path`` (the caller makes it atomic).

    ``spec`` is a :class:`FeatureSpec` (batches of :class:`FeatureBatch`) or a leech
    ``LeechInputSpec`` (batches of ``LeechChunks``). Rows are re-cut into whole HDF5 chunks
    and the file has no chunk cache: HDF5's default cache kept partly written chunks in memory
    and grew with the number of reads, while whole-chunk writes need no cache at all.

    Returns counts: ``extracted`` (rows) and ``skipped`` by reason.
    """
    kind, spec_attribute, templates = _layout(spec)
    counts: dict[str, int] = {"extracted": 0}
    with h5py.File(path, "w", rdcc_nbytes=0) as handle:
        handle.attrs[spec_attribute] = spec.to_json()
        handle.attrs["kind"] = kind
        rows_out = {
            name: resizable_rows(handle, name, template) for name, template in templates.items()
        }
        skipped = {
            "read_id": resizable_rows(handle, "skipped/read_id", np.empty(0, READ_ID_DTYPE)),
            "reason": resizable_rows(handle, "skipped/reason", np.empty(0, SKIP_REASON_DTYPE)),
        }

        def rows() -> Iterator[dict[str, np.ndarray]]:
            """Each batch's rows; its skips and tallies are written and counted on the way."""
            for batch in batches:
                reasons = np.asarray(batch.skipped_reason, SKIP_REASON_DTYPE)
                append_rows(skipped["read_id"], np.asarray(batch.skipped_read_id, READ_ID_DTYPE))
                append_rows(skipped["reason"], reasons)
                counts["extracted"] += len(batch)
                for key, value in getattr(batch, "tallies", {}).items():
                    counts[key] = counts.get(key, 0) + value
                for reason in reasons:
                    key = f"skipped:{reason.decode()}"
                    counts[key] = counts.get(key, 0) + 1
                yield {
                    name: np.asarray(getattr(batch, name), template.dtype)
                    for name, template in templates.items()
                }

        for chunk in fixed_batches(rows(), CHUNK_READS, padded=()):
            for name, dataset in rows_out.items():
                append_rows(dataset, chunk.arrays[name])
        handle.attrs["counts"] = json.dumps(counts, sort_keys=True)
    return counts


def resizable_rows(group, name: str, template: np.ndarray):
    """An empty dataset shaped like ``template`` that grows along its first axis.

    Uncompressed: gzip (level 1, shuffled) saved 19% of a features file (float16 signal barely
    compresses) but cost the extract job's main process 2 s of CPU per 20k reads, a third of
    the whole job's CPU on one worker, in the one process the workers cannot share.
    """
    return group.create_dataset(
        name,
        shape=template.shape,
        maxshape=(None, *template.shape[1:]),
        dtype=template.dtype,
        chunks=(CHUNK_READS, *template.shape[1:]),
    )


def append_rows(dataset, values: np.ndarray) -> None:
    """Write ``values`` after ``dataset``'s rows (``values`` has the dataset's dtype).

    Through h5py's low-level calls: its ``resize`` and slice assignment build a selection in
    Python on every call (~0.4 ms a dataset), and that time is the extract job's own process's,
    which writes every worker's results: 5.7-7.2 ms per 256-read task, 2.3-2.9 ms this way.
    """
    if not len(values):  # most batches skip nothing: an empty write costs as much as a full one
        return
    # the shape read once: h5py's Dataset.shape asks HDF5 for the dataspace at every use
    shape = dataset.id.get_space().shape
    if values.shape[1:] != shape[1:]:  # set_extent would reshape the rows written
        raise ValueError(f"{dataset.name}: rows of {values.shape[1:]}, not {shape[1:]}")
    dataset.id.set_extent((shape[0] + len(values), *shape[1:]))
    rows = dataset.id.get_space()
    rows.select_hyperslab((shape[0],) + (0,) * (values.ndim - 1), values.shape)
    values = np.ascontiguousarray(values)
    dataset.id.write(h5py.h5s.create_simple(values.shape), rows, values)


class FeatureFile:
    """Read side of a features file: the spec, counts, and batches streamed from disk.

    ``kind`` is ``"kennel"`` (rows are reads, batches are :class:`FeatureBatch`) or
    ``"leech"`` (rows are leech's chunks, batches are ``LeechChunks``).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise KennelError(f"{self.path}: features file not found")
        try:
            self._handle = h5py.File(self.path, "r")
            if self._handle.attrs.get("kind") == LEECH_FEATURES:
                self.kind = "leech"
                self.spec = LeechInputSpec.from_json(self._handle.attrs["leech_input_spec"])
                names = CHUNK_ARRAYS
            else:
                self.kind = "kennel"
                self.spec = FeatureSpec.from_json(self._handle.attrs["feature_spec"])
                names = READ_DATASETS
            self.counts = json.loads(self._handle.attrs["counts"])
            self._datasets = {name: self._handle[name] for name in names}
        except (OSError, KeyError, ValueError, TypeError) as error:
            raise KennelError(
                f"{self.path}: not a readable kennel features file ({error})"
            ) from None
        lengths = {d.shape[0] for d in self._datasets.values()}
        if len(lengths) != 1:
            raise KennelError(f"{self.path}: datasets disagree on the number of reads {lengths}")

    def __len__(self) -> int:
        return self._datasets["read_id"].shape[0]

    def __enter__(self) -> FeatureFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._handle.close()

    def skipped(self) -> tuple[np.ndarray, np.ndarray]:
        return self._handle["skipped/read_id"][:], self._handle["skipped/reason"][:]

    def batches(self, size: int) -> Iterator:
        """Consecutive batches of ``size`` rows (the last may be shorter), read lazily."""
        if self.kind == "leech":
            make = lambda **arrays: LeechChunks(seq_encoding=self.spec.seq_encoding, **arrays)  # noqa: E731
        else:
            make = FeatureBatch
        for start in range(0, len(self), size):
            stop = min(start + size, len(self))
            try:
                yield make(**{name: d[start:stop] for name, d in self._datasets.items()})
            except OSError as error:
                raise KennelError(
                    f"{self.path}: reads {start}-{stop}: unreadable (truncated file?) ({error})"
                ) from None
