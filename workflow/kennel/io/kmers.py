"""K-mer level tables: ``kmer<TAB>level`` lines, plain or gzipped.

escapepod's ``KmerTable`` does the fast lookups; this module checks a table before it is
trusted (one clear error naming the line), fingerprints it for the feature spec, and gives the
simulator a plain dictionary.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import operator
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kennel.errors import KennelError

BASES = "ACGT"


@dataclass(frozen=True)
class KmerLevels:
    """A validated k-mer table: ``levels[kmer]`` is the level of the k-mer's centre base."""

    path: Path
    k: int
    levels: dict[str, float]
    sha256: str

    @property
    def centre(self) -> int:
        """Index within the k-mer of the base the level belongs to (SEQ[i-c : i-c+k])."""
        return self.k // 2

    @functools.cached_property  # an fsum over 4^k levels: once, not once per read
    def mean_level(self) -> float:
        return math.fsum(self.levels.values()) / len(self.levels)


def _open_text(path: Path):
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt") if gzipped else open(path)


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_kmer_levels(path: str | os.PathLike, expected_k: int | None = None) -> KmerLevels:
    """Parse and validate a k-mer level table.

    Every line must be ``kmer<TAB>level`` with a k-mer over ACGT of one length and a finite
    level; the table must cover all 4**k k-mers. ``expected_k`` rejects a table of another k.
    """
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: k-mer table not found")
    try:
        with _open_text(path) as handle:
            text = handle.read()
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise KennelError(f"{path}: unreadable k-mer table ({error})") from None
    # a 9-mer table has 262,144 lines: checked in bulk, and line by line only to name the
    # first bad line when the bulk check fails
    levels = _parse_valid(text)
    if levels is None:
        levels = _parse_line_by_line(path, text)
    k = len(next(iter(levels))) if levels else None
    if k is None:
        raise KennelError(f"{path}: k-mer table is empty")
    if expected_k is not None and k != expected_k:
        raise KennelError(f"{path}: k-mer table has k={k}, expected k={expected_k}")
    if len(levels) != 4**k:
        raise KennelError(
            f"{path}: k-mer table has {len(levels)} k-mers, a full {k}-mer table has {4**k}"
        )
    return KmerLevels(path=path, k=k, levels=levels, sha256=file_sha256(path))


def _parse_valid(text: str) -> dict[str, float] | None:
    """The table of a well-formed ``text``, or None when any line is not (then the line-by-line
    parse reports it).

    The fields are split, checked and converted in whole-table C calls rather than a Python
    split per line: the 9-mer table took 0.21-0.27 s this way against 0.33-0.43 s, paid by
    every extraction worker as it starts.
    """
    lines = [line for line in text.upper().splitlines() if line and not line.startswith("#")]
    if not lines or set(map(operator.methodcaller("count", "\t"), lines)) != {1}:
        return None
    fields = "\t".join(lines).split("\t")  # kmer, level, kmer, level, ...
    kmers, levels = fields[0::2], fields[1::2]
    lengths = set(map(len, kmers))
    if len(lengths) != 1 or 0 in lengths or set("".join(kmers)) - set(BASES):
        return None
    try:
        values = np.array(levels, dtype=np.float64)
    except ValueError:
        return None
    if not np.isfinite(values).all():
        return None
    levels = dict(zip(kmers, values.tolist(), strict=True))
    return levels if len(levels) == len(kmers) else None  # a k-mer listed twice


def _parse_line_by_line(path: Path, text: str) -> dict[str, float]:
    levels: dict[str, float] = {}
    first_line: dict[str, int] = {}
    k = None
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise KennelError(
                f"{path}: line {line_number}: expected 'kmer<TAB>level', got {line[:40]!r}"
            )
        kmer, level_text = fields[0].upper(), fields[1]
        if not kmer:
            raise KennelError(f"{path}: line {line_number}: empty k-mer")
        if k is None:
            k = len(kmer)
        if len(kmer) != k or set(kmer) - set(BASES):
            raise KennelError(
                f"{path}: line {line_number}: k-mer {fields[0]!r} is not {k} bases of ACGT"
            )
        if kmer in first_line:  # two levels for one k-mer: which one was meant is unknowable
            raise KennelError(
                f"{path}: line {line_number}: k-mer {fields[0]!r} is listed twice "
                f"(first on line {first_line[kmer]})"
            )
        first_line[kmer] = line_number
        try:
            level = float(level_text)
        except ValueError:
            level = math.nan
        if not math.isfinite(level):
            raise KennelError(
                f"{path}: line {line_number}: level {level_text!r} is not a finite number"
            )
        levels[kmer] = level
    return levels


def expected_levels(sequence: str, table: KmerLevels) -> list[float]:
    """Expected level of every base of ``sequence`` (5'→3'), the k-mer centred on it.

    Bases too close to an end for a full k-mer take the nearest full k-mer's level; k-mers
    holding a non-ACGT base take the table's mean level.
    """
    k, centre = table.k, table.centre
    sequence = sequence.upper()
    n_full = len(sequence) - k + 1
    if n_full < 1:
        raise KennelError(f"sequence of {len(sequence)} bases is shorter than k={k}")
    mean = table.mean_level
    full = [table.levels.get(sequence[j : j + k], mean) for j in range(n_full)]
    return [full[min(max(i - centre, 0), n_full - 1)] for i in range(len(sequence))]
