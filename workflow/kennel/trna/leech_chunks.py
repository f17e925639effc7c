"""A batch's leech model inputs, one row per chunk, as extraction
(:mod:`kennel.trna.leech_inputs`) writes them and the classify job reads them; the sequence is
stored compact and expanded to the model's one-hot on the way to the device."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT
from kennel.trna.leech_levels import UNKNOWN_BASE
from kennel.trna.leech_spec import LeechInputSpec

# The per-chunk arrays of LeechChunks, in the order they are stored
CHUNK_ARRAYS = (
    "read_id",
    "base_idx",
    "junction_indel",
    "junction_mapped",
    "signal",
    "sequence",
    "features",
)


@dataclass
class LeechChunks:
    """Model inputs of a batch of reads, one row per chunk, in leech's order (reads in input
    order, a read's hits 5'->3'). A multiclass model scores only each read's first chunk.

    ``sequence`` is compact; :meth:`sequence_onehot` gives the model's tensor:

    * ``signal_kmer``: (n, signal_len) int32, per signal sample the k-mer of the 9 reference
      bases around the base the sample belongs to, in base 5 (digit 0..3 = A, C, G, T, 4 = no
      base), first k-mer position most significant; -1 where no base covers the sample.
    * ``base_onehot``: (n, window) uint8 base codes (0..3 = A, C, G, T, 4 = none) of the
      reference bases around the focus base.
    """

    seq_encoding: str
    read_id: np.ndarray  # (n,) str
    base_idx: np.ndarray  # (n,) int64, focus base in the aligned reference slice
    junction_indel: np.ndarray  # (n,) int64
    junction_mapped: np.ndarray  # (n,) bool
    signal: np.ndarray  # (n, channels, signal_len) float32
    sequence: np.ndarray  # see above
    features: np.ndarray  # (n, feature channels, feature width) float32
    skipped_read_id: list[str] = field(default_factory=list)
    skipped_reason: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.read_id)

    @classmethod
    def empty(cls, spec: LeechInputSpec) -> LeechChunks:
        """No chunks, with every array shaped and typed as
        :func:`~kennel.trna.leech_inputs.extract_leech_chunks` makes
        them (a features file's datasets are created from this)."""
        signal_kmer = spec.seq_encoding == "signal_kmer"
        return cls(
            seq_encoding=spec.seq_encoding,
            read_id=np.empty(0, str),
            base_idx=np.empty(0, np.int64),
            junction_indel=np.empty(0, np.int64),
            junction_mapped=np.empty(0, bool),
            signal=np.empty((0, spec.signal_channels, spec.signal_len), np.float32),
            sequence=np.empty(
                (0, spec.signal_len if signal_kmer else spec.sequence_shape[1]),
                np.int32 if signal_kmer else np.uint8,
            ),
            features=np.empty((0, spec.feature_rows, spec.feature_width), np.float32),
        )

    def sequence_onehot(self, rows: slice | np.ndarray | None = None) -> np.ndarray:
        """The model's sequence input (uint8 0/1) for ``rows`` (all by default)."""
        codes = self.sequence if rows is None else self.sequence[rows]
        return expand_sequence(codes, self.seq_encoding)


def expand_sequence(codes: np.ndarray, seq_encoding: str) -> np.ndarray:
    """One-hot sequence inputs from :class:`LeechChunks` ``sequence`` codes.

    ``signal_kmer``: (n, L) k-mer codes -> (n, 36, L), channel 4*k + base for k-mer position k.
    ``base_onehot``: (n, W) base codes -> (n, 4, W).
    """
    bases = np.arange(4, dtype=np.int32)
    if seq_encoding == "base_onehot":
        return (codes[:, None, :] == bases[None, :, None]).astype(np.uint8)
    positions = sum(SIGNAL_KMER_CONTEXT) + 1
    powers = 5 ** np.arange(positions - 1, -1, -1, dtype=np.int32)
    digits = (codes[:, None, :] // powers[None, :, None]) % 5  # (n, positions, L)
    digits = np.where(codes[:, None, :] < 0, UNKNOWN_BASE, digits)
    onehot = digits[:, :, None, :] == bases[None, None, :, None]  # (n, positions, 4, L)
    return onehot.reshape(len(codes), 4 * positions, -1).astype(np.uint8)
