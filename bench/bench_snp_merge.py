"""The SNP merge job's memory against the size of the job's scores.

`kennel merge-scores` joins a job's slices into one ``scores.h5`` and draws its report (score
distributions, top variants). Its rule asks 4 GB, while a job's scores grow with variants x
tracks (200k variants x 7,611 Borzoi tracks is 3 GB of float16 per stat). Here two jobs of
synthetic slices, ``--small`` and ``--large`` variants in all (``--tracks`` tracks, six stats,
made from a real slice's layout), are merged with the plot and the table, each in a process of
its own. Goal: peak RSS of the large / the small <= 1.25 (the merge reads its inputs a block at
a time).

    python bench/bench_snp_merge.py [--small 20000] [--large 160000] [--tracks 512]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import h5py
import numpy as np
from peak import kennel_peak_rss_mib, peak_row

GOAL = 1.25
STATS = ("SUM", "logSUM", "D1", "D2", "logD1", "logD2")
SLICES = 4


def synthetic_slice(path: Path, variants: int, tracks: int, seed: int) -> None:
    """A complete slice in the scorer's layout (kennel.snp.scores_file), random scores."""
    from kennel.snp.scores_file import write_quantiles

    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as handle:
        handle["snp"] = np.array([f"v{seed}_{i}" for i in range(variants)], dtype="S")
        handle["chr"] = np.full(variants, b"chr1", dtype="S4")
        handle["pos"] = np.arange(1, variants + 1, dtype=np.uint32)
        handle["ref_allele"] = np.full(variants, b"A", dtype="S1")
        handle["alt_allele"] = np.full(variants, b"G", dtype="S1")
        handle["allele"] = np.ones(variants, dtype=np.uint16)
        handle["flipped"] = np.zeros(variants, dtype=bool)
        handle["target_ids"] = np.array([f"t{i}" for i in range(tracks)], dtype="S")
        handle["target_labels"] = np.array([f"track {i}" for i in range(tracks)], dtype="S")
        for stat in STATS:
            scores = handle.create_dataset(stat, (variants, tracks), np.float16)
            for first in range(0, variants, 4096):
                rows = min(4096, variants - first)
                scores[first : first + rows] = rng.standard_normal((rows, tracks))
        write_quantiles(handle, STATS)
        handle.attrs.update({
            "format": "kennel-snp-scores", "format_version": 2, "status": "complete",
            "stats": json.dumps(list(STATS)), "options": "{}", "seq_len": 524288,
            "clusters_done": variants, "clusters_total": variants, "rows_done": variants,
            "flipped": 0, "ref_mismatch_skipped": 0, "unscored_alleles": 0,
            "models": 1, "model": "[]", "params": "", "fingerprint": "", "kennel_version": "",
        })  # fmt: skip


def peak_rss_mib(slices: list[Path], out: Path) -> float:
    return kennel_peak_rss_mib(
        ["merge-scores", *map(str, slices), "--out", str(out),
         "--plot", str(out.with_suffix(".png")), "--table", str(out.with_suffix(".html"))]
    )  # fmt: skip


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(measure, value, goal) rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=160_000)
    parser.add_argument("--tracks", type=int, default=512)
    args = parser.parse_args(argv)
    peaks = {}
    with tempfile.TemporaryDirectory() as directory:
        for n in (args.small, args.large):
            job = Path(directory, str(n))
            job.mkdir()
            slices = [job / f"{i}.h5" for i in range(SLICES)]
            for i, path in enumerate(slices):
                synthetic_slice(path, n // SLICES, args.tracks, seed=i)
            peaks[n] = peak_rss_mib(slices, job / "merged.h5")
    stat_mib = args.large * args.tracks * 2 / 2**20
    measure = (
        f"SNP merge peak RSS, {args.large:,} vs {args.small:,} variants x {args.tracks} tracks "
        f"({stat_mib:.0f} MiB a stat)"
    )
    return [peak_row(measure, peaks[args.large], peaks[args.small], GOAL)]


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
