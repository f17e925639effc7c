"""dna_1hot: lookup table vs the per-base loop on one 524,288-bp Borzoi window.

Goal (issue #6): the table is >= 100x faster, with identical outputs (plain, n_uniform, and
n_sample under the same seed). Both run side by side in this process.

    python bench/bench_onehot.py [--length 524288] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np

GOAL = 100.0


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(measure, value, goal) rows; outputs are asserted identical to the loop's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=524_288)
    parser.add_argument("--repeats", type=int, default=3, help="loop runs (the table runs 10x)")
    args = parser.parse_args(argv)
    results = []

    from kennel.snp.onehot import dna_1hot
    from kennel.snp.onehot import dna_1hot_per_base as per_base_loop

    rng = random.Random(0)
    # genome-like: mostly ACGT, some soft-masked lower case, scattered N and IUPAC codes
    seq = "".join(
        rng.choices("ACGTacgtNRY", weights=[24] * 4 + [6] * 4 + [1, 0.2, 0.2], k=args.length)
    )
    for label, flags in [
        ("plain", {}),
        ("n_uniform", {"n_uniform": True}),
        ("n_sample", {"n_sample": True}),
    ]:
        loop_times, table_times = [], []
        for repeat in range(args.repeats):
            random.seed(repeat)
            seconds, expected = timed(per_base_loop, seq, **flags)
            loop_times.append(seconds)
            for _ in range(10):
                random.seed(repeat)
                seconds, actual = timed(dna_1hot, seq, **flags)
                table_times.append(seconds)
            assert actual.dtype == expected.dtype and np.array_equal(actual, expected), label
        loop, table = statistics.median(loop_times), statistics.median(table_times)
        ratio = loop / table
        verdict = "meets" if ratio >= GOAL else "MISSES"
        results.append((f"dna_1hot loop / LUT, {label} ({args.length:,} bp)", f"{ratio:.0f}x",
                      f">= {GOAL:.0f}x ({verdict}; identical)"))  # fmt: skip
    unknown = sum(base not in "ACGTacgt" for base in seq)
    started = time.perf_counter()
    for _ in range(unknown):
        random.randint(0, 3)
    draws = time.perf_counter() - started
    # n_sample must make one random.randint(0, 3) call per non-ACGT base, as the loop does
    results.append(
        (f"n_sample: {unknown:,} randint draws alone", f"{draws * 1e3:.1f} ms", "bounds its ratio")
    )
    return results


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
