"""k-mer level tables: the bulk parse takes exactly the tables a plain line-by-line reading of
the format takes, with the same levels, and a table it declines gets one error naming the file."""

from __future__ import annotations

import math
import random
import re

import pytest
from kennel.errors import KennelError
from kennel.io import kmers

BASES = "ACGT"


def plain_reading(text: str) -> dict[str, float] | None:
    """The format read the obvious way: ``kmer<TAB>level`` lines (blank and ``#`` lines
    skipped), k-mers of one length ≥ 1 over ACGT in any case, finite levels, each of the 4**k
    k-mers on exactly one line. None when the table breaks any of it."""
    levels: dict[str, float] = {}
    lengths = set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            return None
        kmer = fields[0].upper()
        if not kmer or any(base not in BASES for base in kmer):
            return None
        try:
            level = float(fields[1])
        except ValueError:
            return None
        if not math.isfinite(level):
            return None
        if kmer in levels:
            return None
        lengths.add(len(kmer))
        levels[kmer] = level
    if len(lengths) != 1 or len(levels) != 4 ** lengths.pop():
        return None
    return levels


def full_table(k: int, rng: random.Random) -> list[str]:
    kmers_of_k = [""]
    for _ in range(k):
        kmers_of_k = [kmer + base for kmer in kmers_of_k for base in BASES]
    return [f"{kmer}\t{rng.uniform(-3, 3):.6f}" for kmer in kmers_of_k]


CORRUPTIONS = [
    lambda lines, i, rng: lines[i].replace("\t", " "),  # no tab
    lambda lines, i, rng: lines[i] + "\t0.5",  # a third field
    lambda lines, i, rng: lines[i] + "\t" + lines[i].split("\t")[0],  # a third field, a k-mer
    lambda lines, i, rng: lines[i].lower(),  # lower case: allowed
    lambda lines, i, rng: lines[i] + "\r",  # CRLF line ending: allowed
    lambda lines, i, rng: "# a comment\n\n" + lines[i],  # comment and blank line: allowed
    lambda lines, i, rng: lines[i].split("\t")[0] + "\tnan",
    lambda lines, i, rng: lines[i].split("\t")[0] + "\t-inf",
    lambda lines, i, rng: lines[i].split("\t")[0] + "\t1e-3",  # exponent: allowed
    lambda lines, i, rng: lines[i].split("\t")[0] + "\tlevel",
    lambda lines, i, rng: "\t" + lines[i].split("\t")[1],  # empty k-mer
    lambda lines, i, rng: "N" + lines[i][1:],  # not a base
    lambda lines, i, rng: "A" + lines[i],  # one base longer
    lambda lines, i, rng: lines[i] + "\n" + lines[i],  # a line twice: all k-mers, one twice
    lambda lines, i, rng: lines[i - 1],  # a k-mer twice, another missing: 4**k lines
    lambda lines, i, rng: lines[i - 1].split("\t")[0] + "\t0.25",  # a k-mer twice, two levels
    # two faults whose tabs add up to one a line: no tab on one line, two on the next
    lambda lines, i, rng: lines[i].replace("\t", "") + "\n" + lines[i - 1] + "\t1.0",
]


def test_the_bulk_parse_takes_what_a_plain_reading_takes(tmp_path):
    rng = random.Random(7)
    cases = 0
    for k in (1, 2, 3):
        for corruption in [None, *CORRUPTIONS]:
            for last in (False, False, False, True):  # somewhere, and on the last line
                lines = full_table(k, rng)
                if corruption is not None:
                    # line 0 too (it sets k): the first k-mer is the one a corrupt line lacks
                    i = len(lines) - 1 if last else rng.randrange(len(lines))
                    lines[i] = corruption(lines, i, rng)
                text = "\n".join(lines) + "\n"
                path = tmp_path / f"levels{cases}.tsv"
                path.write_text(text)
                cases += 1
                expected = plain_reading(text)
                if expected is None:
                    with pytest.raises(KennelError) as error:
                        kmers.read_kmer_levels(path)
                    message = str(error.value)
                    assert message.startswith(f"{path}: ") and "\n" not in message
                    continue
                assert kmers.read_kmer_levels(path).levels == expected
                # well-formed tables take the bulk path, not the line-by-line one
                assert kmers._parse_valid(text) == expected
    assert cases == 3 * (len(CORRUPTIONS) + 1) * 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("\t0.5\nA\t0.1\n", "line 1: empty k-mer"),
        (
            "A\t0.1\nC\t0.2\n\nA\t0.3\nG\t0.1\nT\t0.1\n",
            "line 4: k-mer 'A' is listed twice (first on line 1)",
        ),
    ],
)
def test_a_table_declined_names_its_line(tmp_path, text, message):
    path = tmp_path / "levels.tsv"
    path.write_text(text)
    with pytest.raises(KennelError, match=re.escape(f"{path}: {message}")):
        kmers.read_kmer_levels(path)
