"""The VCF slicer's memory against the size of the VCF.

`kennel slice-vcf` cuts a job's VCF into slices at cluster boundaries; its rule asks 2 GB. It
streams the VCF, keeping ~9 bytes per variant (its record and whether it starts a cluster) and
~8 per cluster, where holding every variant took ~0.55 kB each (a 2 GB job fitted ~3M
variants). Here synthetic VCFs of ``--small`` and ``--large`` SNVs on one chromosome are cut
into four slices, each run in a process of its own. Goal: peak RSS of the large / the small
<= 1.10.

    python bench/bench_snp_slice.py [--small 50000] [--large 200000]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from peak import kennel_peak_rss_mib, peak_row

GOAL = 1.10


def synthetic_vcf(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    positions = np.sort(rng.choice(249_999_999, n, replace=False)) + 1
    with open(path, "w") as handle:
        handle.write("##fileformat=VCFv4.2\n##contig=<ID=chr1,length=300000000>\n"
                     "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n")  # fmt: skip
        handle.writelines(f"chr1\t{p}\trs{i}\tA\tG\t.\t.\t.\n" for i, p in enumerate(positions))


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(measure, value, goal) rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=50_000)
    parser.add_argument("--large", type=int, default=200_000)
    args = parser.parse_args(argv)
    from kennel.sim.snp import simulate_snp

    peaks = {}
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        model = simulate_snp(directory / "sim", n_variants=20)["model"]  # decides seq_len only
        for n in (args.small, args.large):
            vcf = directory / f"{n}.vcf"
            synthetic_vcf(vcf, n)
            outputs = [str(directory / f"{n}_{i}.vcf.gz") for i in range(4)]
            peaks[n] = kennel_peak_rss_mib(["slice-vcf", "--vcf", str(vcf), "--model", str(model),
                                            "--seq-len", "524288", "--out", *outputs])  # fmt: skip
    measure = f"VCF slicer peak RSS, {args.large:,} vs {args.small:,} SNVs"
    return [peak_row(measure, peaks[args.large], peaks[args.small], GOAL)]


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
