"""leech's base codes (:func:`encode_bases`) and k-mer level table (:class:`LevelTable`), shared by
extraction and the classify job; nothing here needs escapepod or pysam."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from kennel.io.kmers import KmerLevels, read_kmer_levels

UNKNOWN_BASE = 4  # base code of anything that is not A/C/G/T(U)
_BASE_CODES = np.full(256, UNKNOWN_BASE, np.uint8)
for _code, _bases in enumerate(("Aa", "Cc", "Gg", "TtUu")):
    for _base in _bases:
        _BASE_CODES[ord(_base)] = _code


@dataclass(frozen=True)
class LevelTable:
    """A k-mer level table as one float32 array indexed by the k-mer's base-4 code (A=0..T=3).

    Picklable in one piece (1 MiB for 9-mers) and looked up without a dictionary per base.
    float32, as leech stores the levels it looks up.
    """

    k: int
    levels: np.ndarray  # (4**k,) float32
    sha256: str

    @classmethod
    def from_kmer_levels(cls, table: KmerLevels) -> LevelTable:
        levels = np.zeros(4**table.k, np.float32)
        codes = _BASE_CODES[np.frombuffer("".join(table.levels).encode(), np.uint8)]
        weights = 4 ** np.arange(table.k - 1, -1, -1, dtype=np.int64)
        index = codes.reshape(-1, table.k).astype(np.int64) @ weights
        levels[index] = np.fromiter(table.levels.values(), np.float64, len(table.levels))
        return cls(k=table.k, levels=levels, sha256=table.sha256)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> LevelTable:
        return cls.from_kmer_levels(read_kmer_levels(path))

    def expected(self, codes: np.ndarray, centre: int) -> np.ndarray:
        """Level of the k-mer starting ``centre`` bases before each base; 0 where no full
        ACGT k-mer fits (leech's convention, which the residual channel relies on)."""
        k, n = self.k, len(codes)
        expected = np.zeros(n, np.float32)
        if n < k:
            return expected
        windows = np.lib.stride_tricks.sliding_window_view(codes, k)
        # a k-mer with a non-ACGT base has no level and leaves its centre base at 0
        full = (windows < 4).all(axis=1)
        index = windows.astype(np.int64) @ (4 ** np.arange(k - 1, -1, -1, dtype=np.int64))
        expected[centre : centre + len(index)] = np.where(full, self.levels[index % 4**k], 0)
        return expected


def encode_bases(sequence: str) -> np.ndarray:
    """uint8 base codes: A, C, G, T/U (either case) -> 0..3, anything else -> 4."""
    return _BASE_CODES[np.frombuffer(sequence.encode("ascii"), np.uint8)]
