"""kennel vs baskerville's `hound_snp` on one Keras model and the same VCF, CPU, same cores.

The model is a Borzoi-architecture baskerville model (params.json + model.h5, random weights,
32,768-bp window, 256 positions at the transformer, 64 tracks), made by
`tests/snp/make_hound_snp_reference.py --bench` with TensorFlow; both tools score the same
records with the same options (hound_snp `--rc -c 0` with four stats; kennel `--rc
--cluster-pct 0 --alts first --ref-mismatch flip`, one process, `--threads` = the CPUs). Each
runs as a command in its own process pinned to the same CPUs; they alternate for `--rounds`
rounds and each keeps its fastest (the machine is shared). The scores are compared, so the
timing is of the same work: every value within two float16 units plus a thousandth of the
stat's largest (tests/snp/test_hound_snp_run.py's check).

hound_snp needs TensorFlow, tf-keras and baskerville's source (see the maker's docstring):

    KENNEL_BENCH_TF_PYTHON=/tmp/tfenv/bin/python KENNEL_BENCH_BASKERVILLE=/tmp/baskerville/src \\
        python bench/bench_hound.py [--variants 100] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import h5py
import numpy as np
from bench_leech import kennel_executable, run

REPO = Path(__file__).resolve().parent.parent
MAKER = REPO / "tests" / "snp" / "make_hound_snp_reference.py"
STATS = "SUM,logSUM,D1,D2"


def tensorflow_environment() -> tuple[str, dict[str, str]]:
    python = os.environ.get("KENNEL_BENCH_TF_PYTHON", "/opt/hound-venv/bin/python")
    source = os.environ.get("KENNEL_BENCH_BASKERVILLE", "/opt/baskerville/src")
    if not Path(python).exists() or not Path(source).is_dir():
        raise SystemExit(
            f"hound_snp needs TensorFlow at {python} and baskerville's source at {source}: "
            f"see {MAKER.relative_to(REPO)}'s docstring (KENNEL_BENCH_TF_PYTHON, "
            "KENNEL_BENCH_BASKERVILLE)"
        )
    environment = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=source)
    return python, environment


def make_inputs(work: Path, variants: int, python: str, environment: dict) -> Path:
    inputs = work / f"inputs{variants}"
    if not (inputs / "targets.txt").exists():  # written last
        run([python, str(MAKER), str(inputs), "--bench", str(variants)], work / "make.log",
            environment=environment)  # fmt: skip
    return inputs


def hound_command(inputs: Path, out: Path, python: str) -> list[str]:
    return [
        python, "-m", "baskerville.scripts.hound_snp", "-f", str(inputs / "genome.fa"),
        "-t", str(inputs / "targets.txt"), "--stats", STATS, "--rc", "-o", str(out),
        str(inputs / "params.json"), str(inputs / "model.h5"), str(inputs / "variants.vcf"),
    ]  # fmt: skip


def kennel_command(inputs: Path, out: Path, threads: int) -> list[str]:
    return kennel_executable() + [
        "score-snps", "--vcf", str(inputs / "variants.vcf"), "--genome", str(inputs / "genome.fa"),
        "--model", str(inputs / "model.h5"), "--params", str(inputs / "params.json"),
        "--targets", str(inputs / "targets.txt"), "--out", str(out), "--device", "cpu",
        "--threads", str(threads), "--rc", "--cluster-pct", "0", "--stats", STATS,
        "--alts", "first", "--ref-mismatch", "flip", "--compile", "off",
    ]  # fmt: skip


def same_scores(kennel: Path, hound: Path) -> tuple[int, float]:
    """(values compared, largest difference as a share of its stat's largest value); exits
    when one lies outside the test's tolerance."""
    compared, worst = 0, 0.0
    with h5py.File(kennel) as mine, h5py.File(hound) as theirs:
        for stat in STATS.split(","):
            a = mine[stat][()].astype(np.float64)
            b = theirs[stat][()].astype(np.float64)
            scale = np.abs(b).max()
            tolerance = 2 * np.spacing(np.abs(b).astype(np.float16)).astype(np.float64)
            if a.shape != b.shape or (np.abs(a - b) > tolerance + 1e-3 * scale).any():
                raise SystemExit(f"{stat}: kennel's scores differ from hound_snp's")
            compared += a.size
            worst = max(worst, float(np.abs(a - b).max() / scale))
    return compared, worst


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """The benchmark's (measure, value, goal) rows; one row saying why, without TensorFlow."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "hound")
    args = parser.parse_args(argv)
    try:
        python, environment = tensorflow_environment()
    except SystemExit as missing:
        print(missing, file=sys.stderr)
        return [("kennel vs hound_snp (Keras model, CPU)", "not run: no TensorFlow", "<= 1x")]
    args.work.mkdir(parents=True, exist_ok=True)
    inputs = make_inputs(args.work, args.variants, python, environment)
    cpus = sorted(os.sched_getaffinity(0))[: args.threads]
    environment = dict(environment, OMP_NUM_THREADS=str(len(cpus)),
                       TF_NUM_INTRAOP_THREADS=str(len(cpus)))  # fmt: skip
    best = {"hound_snp": float("inf"), "kennel": float("inf")}
    for round_number in range(max(1, args.rounds)):
        hound_out = args.work / f"hound{round_number}"
        seconds = run(hound_command(inputs, hound_out, python), args.work / "hound.log", cpus,
                      environment)  # fmt: skip
        best["hound_snp"] = min(best["hound_snp"], seconds)
        kennel_out = args.work / f"kennel{round_number}.h5"
        kennel_out.unlink(missing_ok=True)
        seconds = run(kennel_command(inputs, kennel_out, len(cpus)), args.work / "kennel.log",
                      cpus)  # fmt: skip
        best["kennel"] = min(best["kennel"], seconds)
        compared, worst = same_scores(kennel_out, hound_out / "scores.h5")
    with h5py.File(kennel_out) as handle:
        variants = len(handle["snp"])
    summary = (
        f"{variants} variants, {len(cpus)} CPUs, best of {args.rounds} rounds (wall, s): "
        f"hound_snp {best['hound_snp']:.1f}, kennel {best['kennel']:.1f}; {compared} score "
        f"values agree (largest difference {worst:.1e} of its stat's max)"
    )
    print(summary, file=sys.stderr)
    ratio = best["kennel"] / best["hound_snp"]
    return [
        (f"kennel / hound_snp time, Keras model, {variants} variants, CPU, equal scores",
         f"{ratio:.2f}x ({best['kennel']:.1f} s vs {best['hound_snp']:.1f} s)", "<= 1x"),
    ]  # fmt: skip


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
