"""Run every benchmark and print one table of ratios with the goal beside each.

    python bench/run.py            # all (the extraction bench simulates 20k and 100k reads)
    python bench/run.py --quick    # smaller inputs, for a look in a few minutes

Not part of the tests: ratios are measured side by side in one run, on a shared machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_classify  # noqa: E402
import bench_extract  # noqa: E402
import bench_flashzoi  # noqa: E402
import bench_hound  # noqa: E402
import bench_leech  # noqa: E402
import bench_onehot  # noqa: E402
import bench_refine  # noqa: E402
import bench_shard  # noqa: E402
import bench_snp_cluster  # noqa: E402
import bench_snp_merge  # noqa: E402
import bench_snp_replicates  # noqa: E402
import bench_snp_scoring  # noqa: E402
import bench_snp_slice  # noqa: E402
from table import print_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    quick = args.quick
    table = []
    table += bench_onehot.rows(["--repeats", "1" if quick else "3"])
    table += bench_classify.rows(["--repeats", "2" if quick else "5"])
    table += bench_snp_scoring.rows(["--variants", "200" if quick else "600"])
    table += bench_snp_replicates.rows(["--variants", "200" if quick else "600"])
    table += bench_snp_cluster.rows(["--large", "200"] if quick else [])
    table += bench_snp_merge.rows(["--large", "80000"] if quick else [])
    table += bench_snp_slice.rows(["--large", "100000"] if quick else [])
    table += bench_flashzoi.rows(["--seq-len", "131072", "--rounds", "1"] if quick else [])
    table += bench_extract.rows(["--large", "5000", "--shard", "0"] if quick else [])
    table += bench_refine.rows(["--reads", "2000" if quick else "5000"])
    table += bench_shard.rows(["--large", "50000"] if quick else [])
    # kennel vs leech predict on a leech bundle (kennel's numbers only without leech's venv)
    table += bench_leech.rows(["--reads", "1000" if quick else "10000"])
    # kennel vs hound_snp on a Keras model (a row saying why not without TensorFlow's venv)
    table += bench_hound.rows(["--variants", "40" if quick else "100"])
    print()
    print_table(table)


if __name__ == "__main__":
    main()
