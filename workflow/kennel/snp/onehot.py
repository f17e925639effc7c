"""One-hot DNA through a lookup table, identical to baskerville's per-base ``dna_1hot`` loop.

A 524,288-bp Borzoi window is half a million Python iterations in the loop; here it is one
``bytes`` conversion and one table gather. The gather moves two bases at a time: the two bytes
read as one ``uint16`` index a table of both bases' rows packed into machine words.
"""

from __future__ import annotations

import random

import numpy as np

BASES = "ACGT"
UNKNOWN = 4  # column index of "not A/C/G/T"

# byte -> column (0-3) or UNKNOWN; lower case maps like upper case (the loop uppercases first)
_COLUMN = np.full(256, UNKNOWN, dtype=np.intp)
for _column, _base in enumerate(BASES):
    _COLUMN[ord(_base)] = _COLUMN[ord(_base.lower())] = _column

_UNKNOWN_BYTES = bytes(int(column == UNKNOWN) for column in _COLUMN)  # bytes.translate table

_BOOL_ROWS = np.zeros((UNKNOWN + 1, 4), dtype=bool)
_BOOL_ROWS[:UNKNOWN] = np.eye(4, dtype=bool)
_UNIFORM_ROWS = np.zeros((UNKNOWN + 1, 4), dtype=np.float16)
_UNIFORM_ROWS[:UNKNOWN] = np.eye(4, dtype=np.float16)
_UNIFORM_ROWS[UNKNOWN] = 0.25

# every pair of bytes, in the order they sit in memory when read as one native uint16, and
# the two one-hot rows it codes for, packed: 8 bools in one uint64, 8 float16 in two
_PAIRS = np.arange(2**16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
_BOOL_PAIR_WORDS = _BOOL_ROWS[_COLUMN[_PAIRS]].reshape(-1, 8).view(np.uint64).ravel()
_UNIFORM_PAIR_WORDS = _UNIFORM_ROWS[_COLUMN[_PAIRS]].reshape(-1, 8).view(np.uint64)


def centre(seq, seq_len: int | None):
    """``(seq, seq_len, seq_start)``: ``seq`` trimmed about its centre to ``seq_len`` (an odd
    surplus drops the right base), or the offset at which it sits centred in a longer window
    (the extra pad base goes on the right)."""
    if seq_len is None:
        return seq, len(seq), 0
    if seq_len <= len(seq):
        trim = (len(seq) - seq_len) // 2
        return seq[trim : trim + seq_len], seq_len, 0
    return seq, seq_len, (seq_len - len(seq)) // 2


def dna_1hot_per_base(seq, seq_len=None, n_uniform=False, n_sample=False) -> np.ndarray:
    """The definition, one base at a time: what :func:`dna_1hot` must equal exactly.

    Kept as the reference the tests and the benchmark compare the lookup table against.
    """
    seq, seq_len, seq_start = centre(seq, seq_len)
    seq = seq.upper()
    code = np.zeros((seq_len, 4), dtype="float16" if n_uniform else "bool")
    for i in range(seq_len):
        if seq_start <= i < seq_start + len(seq):
            base = seq[i - seq_start]
            if base in BASES:
                code[i, BASES.index(base)] = 1
            elif n_uniform:
                code[i, :] = 0.25
            elif n_sample:
                code[i, random.randint(0, 3)] = 1
    return code


def dna_1hot(
    seq: str,
    seq_len: int | None = None,
    n_uniform: bool = False,
    n_sample: bool = False,
) -> np.ndarray:
    """One-hot code ``seq`` as a ``(seq_len, 4)`` array, columns A, C, G, T.

    ``seq_len`` shorter than ``seq`` trims it about its centre (an odd surplus drops the extra
    base on the right); longer pads it about its centre (the extra pad base goes on the right)
    with all-zero rows, even with ``n_uniform``. Lower case counts as upper case. Any other
    character becomes 0.25 in every column with ``n_uniform`` (the result is then float16),
    else with ``n_sample`` one column drawn by ``random.randint(0, 3)`` per character, in
    sequence order (so a seeded ``random`` gives the loop's result), else all zero; the result
    is bool unless ``n_uniform``. Non-ASCII characters count as one unknown base each.
    """
    seq, seq_len, seq_start = centre(seq, seq_len)

    raw = seq if isinstance(seq, bytes) else seq.encode("ascii", errors="replace")
    codes = np.frombuffer(raw, dtype=np.uint8)
    even = len(codes) - len(codes) % 2
    pair_codes = codes[:even].view(np.uint16)
    if n_uniform:
        rows, dtype = _UNIFORM_ROWS, np.float16
        pairs = _UNIFORM_PAIR_WORDS.take(pair_codes, axis=0).view(dtype).reshape(even, 4)
    else:
        rows, dtype = _BOOL_ROWS, bool
        pairs = _BOOL_PAIR_WORDS.take(pair_codes).view(dtype).reshape(even, 4)
    if seq_start == 0 and even == seq_len:
        code = inside = pairs  # the common case: a full window, no copy
    else:
        code = np.zeros((seq_len, 4), dtype=dtype)
        inside = code[seq_start : seq_start + len(codes)]
        inside[:even] = pairs
        if even < len(codes):
            inside[even] = rows[_COLUMN[codes[even]]]
    if n_sample and not n_uniform:
        unknown = np.flatnonzero(np.frombuffer(raw.translate(_UNKNOWN_BYTES), dtype=bool))
        if unknown.size:
            # the loop's own draws, one per unknown base in order: seeded results match
            columns = [random.randint(0, 3) for _ in range(unknown.size)]
            inside[unknown, columns] = True
    return code
