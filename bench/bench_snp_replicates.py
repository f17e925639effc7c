"""Model replicates: SNPs/s scoring one VCF with 1 vs 4 tiny models in one job.

Borzoi users average four replicate models. One job encodes each window once and runs every
model on it, so four models should cost well under four times one model's time (the forward
and the stats repeat per model; reading the genome, one-hot encoding and staging do not).
Measured side by side, alternating 1 and 4 models, best of ``--rounds``.

    python bench/bench_snp_replicates.py [--variants 600] [--rounds 2]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

GOAL = 4.0  # the ratio of 4 models' time to one's: well under 4 means the encoding is shared


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from bench_snp_scoring import simulated_job
    from kennel.snp.scoring import ScoreOptions, score_snps
    from table import under

    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        simulated = simulated_job(directory, args.variants)
        replicates = [simulated["model"]]
        for index in range(1, 4):  # same weights: the cost, not the scores, is measured
            replicates.append(directory / f"replicate{index}.pt")
            shutil.copy(simulated["model"], replicates[-1])
        options = ScoreOptions(device="cpu", compile="off", rc=True, shifts=(-1, 0, 1))
        best = {1: float("inf"), 4: float("inf")}
        variants = 0
        for _ in range(args.rounds):
            for count in (1, 4):
                began = time.perf_counter()
                report = score_snps(
                    simulated["variants"], simulated["genome"], replicates[:count],
                    simulated["targets"], directory / f"scores{count}.h5", options,
                )  # fmt: skip
                best[count] = min(best[count], time.perf_counter() - began)
                variants = report.variants
    ratio = best[4] / best[1]
    return [
        ("SNPs/s, 1 tiny model (CPU, rc, 3 shifts)", f"{variants / best[1]:.1f}", ""),
        ("SNPs/s, 4 tiny models in one job", f"{variants / best[4]:.1f}", ""),
        ("time of 4 models / 1 model", f"{ratio:.2f}x",
         under(ratio, GOAL)),
    ]  # fmt: skip


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
