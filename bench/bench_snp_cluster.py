"""A scoring job's memory against the size of its densest cluster.

Variants within ``cluster_pct`` of the window share one reference window; a dense VCF puts
hundreds in one cluster (a variant every 100 bp gives ~520 at 524 kb and the default 0.1). Here
one cluster of ``--small`` and one of ``--large`` SNVs, spread over 9% of a 131,072-bp window
of the simulated genome, are scored by `kennel score-snps` (CPU, eager, one thread), each in a
process of its own. Goal: peak RSS of the large cluster / the small one <= 1.10 (hound_snp
builds one alternate window at a time; a job's memory must not grow with the cluster).

    python bench/bench_snp_cluster.py [--small 100] [--large 400] [--seq-len 131072]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pysam
from peak import kennel_peak_rss_mib, peak_row

GOAL = 1.10


def dense_vcf(genome: Path, out: Path, n: int, seq_len: int) -> None:
    """``n`` SNVs at distinct positions within 9% of ``seq_len`` (one cluster at 0.1)."""
    with pysam.FastaFile(str(genome)) as fasta:
        chrom = fasta.references[0]
        sequence = fasta.fetch(chrom).upper()
    rng = np.random.default_rng(0)
    first = seq_len // 2
    candidates = [p for p in range(first, first + int(0.09 * seq_len)) if sequence[p] in "ACGT"]
    lines = ["##fileformat=VCFv4.2", f"##contig=<ID={chrom},length={len(sequence)}>",
             "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]  # fmt: skip
    for number, pos0 in enumerate(sorted(rng.choice(candidates, n, replace=False))):
        ref = sequence[pos0]
        alt = "ACGT"[("ACGT".index(ref) + 1) % 4]
        lines.append(f"{chrom}\t{pos0 + 1}\tv{number}\t{ref}\t{alt}\t.\t.\t.")
    out.write_text("\n".join(lines) + "\n")


def peak_rss_mib(simulated: dict, vcf: Path, out: Path) -> float:
    return kennel_peak_rss_mib(
        ["score-snps", "--vcf", str(vcf), "--genome", str(simulated["genome"]),
         "--model", str(simulated["model"]), "--targets", str(simulated["targets"]),
         "--out", str(out), "--device", "cpu", "--compile", "off", "--threads", "1"]
    )  # fmt: skip


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(measure, value, goal) rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=400)
    parser.add_argument("--seq-len", type=int, default=131_072)
    args = parser.parse_args(argv)
    from kennel.sim.snp import simulate_snp

    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        simulated = simulate_snp(directory / "sim", seed=3, n_chromosomes=1,
                                 chromosome_length=2 * args.seq_len, n_variants=20,
                                 seq_len=args.seq_len)  # fmt: skip
        peaks = {}
        for n in (args.small, args.large):
            dense_vcf(simulated["genome"], directory / f"{n}.vcf", n, args.seq_len)
            peaks[n] = peak_rss_mib(simulated, directory / f"{n}.vcf", directory / f"{n}.h5")
    measure = (
        f"SNP job peak RSS, one cluster of {args.large} vs {args.small} SNVs ({args.seq_len:,} bp)"
    )
    return [peak_row(measure, peaks[args.large], peaks[args.small], GOAL)]


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
