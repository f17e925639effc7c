"""kennel vs `leech predict` on one leech bundle and the same simulated reads, CPU, same cores.

Goal (issue #17): kennel's shard + extract + classify wall <= 1/3 of
`leech predict --device cpu --no-compile`'s on ~10k simulated reads, with identical prediction
tags (aa ac am ji jm pn pp: values and types) on every record leech writes. Also reported:
extraction reads/s per worker, the share of extraction spent in escapepod's banded DP
(`refine_signal_map`), and the same run fused (the workflow's `trna.fused`: no extract job,
classify extracts beside the model in one job, as leech does), with its own tag comparison.

Every step runs as a CLI command in its own process, pinned to the same `--threads` CPUs
(kennel: `--threads` of extract, classify and merge-bam; leech: see `leech_environment`).
kennel's steps and leech alternate for `--rounds` rounds; each side keeps its fastest round (the
machine is shared). `kennel merge-bam`, which makes the one BAM compared with leech's, is timed
and shown, but the goal is on shard + extract + classify, as in the issue. The DP's share is
measured apart and untimed: one `kennel extract` in-process with one worker on a subset shard
(a `kennel shard` into several shards, the first one), every `escapepod.refine_signal_map` call
timed with `time.perf_counter`.

leech runs in its own Python 3.12 environment (its torch is a CUDA build of several GB):

    python3.12 -m venv /opt/leech-venv
    /opt/leech-venv/bin/pip install leech==0.16.0 leech-core==0.16.0

Without it (`--leech`, or KENNEL_BENCH_LEECH, default /opt/leech-venv/bin/leech) only kennel's
numbers are printed.

    python bench/bench_leech.py [--reads 10000] [--bundle B] [--leech PATH] [--threads 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sources import simulator_sources

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "data" / "sacCer3-mature-tRNAs-dual-adapt-v2.fa"
KMER_TABLE = SHARED / "data" / "rna004_9mer_levels_v1.txt.gz"
BUNDLE = SHARED / "leech" / "models" / "fx_tcndwell_multiclass.pt"
LEECH = Path(os.environ.get("KENNEL_BENCH_LEECH", "/opt/leech-venv/bin/leech"))
MAKE_LEECH = (
    "python3.12 -m venv /opt/leech-venv && "
    "/opt/leech-venv/bin/pip install leech==0.16.0 leech-core==0.16.0"
)
TAGS = ("aa", "ac", "am", "ji", "jm", "pn", "pp")
SAMPLE = "bench"

# one `kennel extract` in this process, one worker (no pool), every refine_signal_map call timed
DP_SHARE = """
import json, sys, time
import escapepod

spent = {"seconds": 0.0, "calls": 0}
def timed(function):
    def refine_signal_map(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent["seconds"] += time.perf_counter() - started
            spent["calls"] += 1
    return refine_signal_map
escapepod.refine_signal_map = timed(escapepod.refine_signal_map)

import importlib
from kennel.cli import main
# what the step imports lazily, imported before the clock starts
for name in ("kennel.trna.extract", "kennel.trna.leech_extract", "kennel.models.leech", "h5py"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
started = time.perf_counter()
code = main(sys.argv[1:])
spent["wall"] = time.perf_counter() - started
spent["code"] = code
print(json.dumps(spent))
"""


@dataclasses.dataclass
class Inputs:
    bam: Path
    pod5: Path
    reference: Path
    reads: int


def kennel_executable() -> list[str]:
    """The `kennel` of this interpreter's environment (not a shim that picks another)."""
    beside = Path(sys.executable).parent / "kennel"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("kennel")
    if found is None:
        raise SystemExit("kennel is not installed: pip install -e . from the repository")
    return [found]


def simulation_key(reads: int, seed: int) -> str:
    """A cached simulation is reused only while kennel's version and simulator are unchanged."""
    import kennel

    digest = hashlib.sha256(f"{reads} {seed} {kennel.__version__}".encode())
    for path in simulator_sources():
        digest.update(path.read_bytes())
    digest.update(REFERENCE.read_bytes())
    return digest.hexdigest()[:12]


def simulate(out_dir: Path, reads: int, seed: int) -> Inputs:
    out = out_dir / f"sim{reads}-{simulation_key(reads, seed)}"
    done = out / "complete"  # written last: its presence means the simulation finished
    if not done.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        command = kennel_executable() + [
            "simulate", "trna", "--out-dir", str(out), "--samples", SAMPLE,
            "--reads", str(reads), "--seed", str(seed), "--reference", str(REFERENCE),
            "--kmer-table", str(KMER_TABLE),
        ]  # fmt: skip
        run(command, out / "simulate.log")
        done.write_text("")
    return Inputs(out / f"{SAMPLE}.bam", out / f"{SAMPLE}.pod5", out / "reference.fa", reads)


def pinned(cpus: list[int]):
    """A preexec_fn that pins the child (and everything it starts) to ``cpus``."""

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


def run(
    command: list[str],
    log: Path,
    cpus: list[int] | None = None,
    environment: dict[str, str] | None = None,
) -> float:
    """Run ``command``, output to ``log``; its wall seconds. On failure, exit with the log tail."""
    started = time.perf_counter()
    with open(log, "w") as handle:
        result = subprocess.run(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=None if cpus is None else pinned(cpus),
            env=kennel_environment() if environment is None else environment,
        )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"failed ({result.returncode}): {shlex.join(command)}\n{tail}")
    return seconds


def shard_command(inputs: Inputs, bundle: Path, work: Path, shards: int = 1) -> list[str]:
    names = [f"shard{i}" for i in range(shards)]
    return kennel_executable() + [
        "shard", "--bam", str(inputs.bam), "--pod5", str(inputs.pod5),
        "--reference", str(inputs.reference), "--bundle", str(bundle),
        "--shard-pod5", *[str(work / f"{n}.pod5") for n in names],
        "--shard-bam", *[str(work / f"{n}.bam") for n in names],
        "--passthrough", str(work / "passthrough.bam"), "--counts", str(work / "counts.tsv"),
    ]  # fmt: skip


def extract_arguments(inputs: Inputs, bundle: Path, work: Path, threads: int) -> list[str]:
    return [
        "extract", "--bam", str(work / "shard0.bam"), "--pod5", str(work / "shard0.pod5"),
        "--reference", str(inputs.reference), "--kmer-table", str(KMER_TABLE),
        "--bundle", str(bundle), "--output", str(work / "features.h5"),
        "--threads", str(threads),
    ]  # fmt: skip


def run_kennel(
    inputs: Inputs,
    bundle: Path,
    work: Path,
    threads: int,
    cpus: list[int],
    classify_options: list[str] = (),
    fused: bool = False,
) -> dict:
    """shard → extract → classify → merge-bam, each timed; seconds per step. ``fused``: the
    workflow's `trna.fused`, extraction inside the classify job (its extract is 0)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    kennel = kennel_executable()
    extract = kennel + extract_arguments(inputs, bundle, work, threads)
    classify = kennel + [
        "classify", "--bam", str(work / "shard0.bam"), "--bundle", str(bundle),
        "--features", str(work / "features.h5"), "--output", str(work / "classified.bam"),
        "--predictions", str(work / "predictions.tsv"), "--stats", str(work / "stats.json"),
        "--threads", str(threads), "--device", "cpu", *classify_options,
    ]  # fmt: skip
    merge = kennel + [
        "merge-bam", "--shards", str(work / "classified.bam"),
        "--passthrough", str(work / "passthrough.bam"), "--counts", str(work / "counts.tsv"),
        "--stats", str(work / "stats.json"), "--output", str(work / "merged.bam"),
        "--threads", str(threads),
    ]  # fmt: skip
    seconds = {"shard": run(shard_command(inputs, bundle, work), work / "shard.log", cpus)}
    if fused:  # no extract job: classify extracts the shard's reads itself, beside the model
        classify[classify.index("--features") : classify.index("--features") + 2] = [
            "--pod5", str(work / "shard0.pod5"), "--reference", str(inputs.reference),
            "--kmer-table", str(KMER_TABLE),
        ]  # fmt: skip
        seconds["extract"] = 0.0
    else:
        seconds["extract"] = run(extract, work / "extract.log", cpus)
    seconds["classify"] = run(classify, work / "classify.log", cpus)
    seconds["merge"] = run(merge, work / "merge.log", cpus)
    return seconds


def leech_command(leech: Path, inputs: Inputs, bundle: Path, output: Path) -> list[str]:
    return [
        str(leech), "predict", "--bundle", str(bundle), "--all", "--pod5", str(inputs.pod5),
        "--bam", str(inputs.bam), "--reference-fasta", str(inputs.reference),
        "--device", "cpu", "--no-compile", "-o", str(output),
    ]  # fmt: skip


def leech_environment(threads: int) -> dict[str, str]:
    """leech 0.16.0 on ``threads`` CPUs, with its default `--workers 0`: its CPU path extracts
    with its Rust extractor (leech-core) on a rayon pool in the main process; `--workers N`
    would send reads to N processes of its Python extractor instead, which its help calls slower
    on CPU (here: 2x slower). Left alone, leech sizes that pool as `os.cpu_count()` (at most 8,
    or SLURM_CPUS_PER_TASK) minus 6, i.e. 1 thread on a 2-CPU machine; it is given `threads`
    here, and torch the same intra-op threads (its default on `threads` CPUs)."""
    environment = dict(os.environ)
    environment.pop("SLURM_CPUS_PER_TASK", None)
    environment["RAYON_NUM_THREADS"] = str(threads)
    environment["OMP_NUM_THREADS"] = str(threads)
    return environment


def kennel_environment() -> dict[str, str]:
    """kennel sizes its own pools from --threads; an inherited RAYON_NUM_THREADS would win."""
    environment = dict(os.environ)
    environment.pop("RAYON_NUM_THREADS", None)
    return environment


def run_leech(leech: Path, inputs: Inputs, bundle: Path, work: Path, threads: int, cpus) -> float:
    work.mkdir(parents=True, exist_ok=True)
    output = work / "leech.bam"
    output.unlink(missing_ok=True)
    command = leech_command(leech, inputs, bundle, output)
    return run(command, work / "leech.log", cpus, leech_environment(threads))


def leech_inference_wall(log: Path) -> str:
    """The "Inference wall time: 206.7s" leech logs once its start-up is over."""
    found = re.search(r"Inference wall time: ([0-9.]+)s", log.read_text())
    return found.group(1) if found else "?"


def count_records(bam: Path) -> int:
    import pysam

    with pysam.AlignmentFile(str(bam), check_sq=False) as handle:
        return sum(1 for _ in handle.fetch(until_eof=True))


def prediction_tags(record) -> dict:
    """The prediction tags of a record: tag → (type, value), arrays with their element type."""
    tags = {}
    for tag, value, kind in record.get_tags(with_value_type=True):
        if tag in TAGS:
            if hasattr(value, "typecode"):
                value = (value.typecode, tuple(value))
            tags[tag] = (kind, value)
    return tags


def format_tags(tags: dict | None) -> str:
    """``aa:Z:Phe ac:C:76 ... pp:B:C:64,60,56,76``, as samtools prints them."""
    if tags is None:
        return "(no such record)"
    if not tags:
        return "(no prediction tags)"
    fields = []
    for tag, (kind, value) in tags.items():
        if isinstance(value, tuple):  # an array: its element type, then the values
            value = f"{value[0]}:" + ",".join(str(v) for v in value[1])
        fields.append(f"{tag}:{kind}:{value}")
    return " ".join(fields)


def compare_tags(leech_bam: Path, kennel_bam: Path, examples: int = 3) -> dict:
    """Every record of leech's BAM against kennel's record with the same name, flag and position."""
    import pysam

    kennel = {}
    with pysam.AlignmentFile(str(kennel_bam), check_sq=False) as handle:
        for record in handle.fetch(until_eof=True):
            key = (record.query_name, record.flag, record.reference_start)
            kennel.setdefault(key, prediction_tags(record))
    report = {"records": 0, "tagged": 0, "missing": 0, "mismatches": 0, "examples": []}
    with pysam.AlignmentFile(str(leech_bam), check_sq=False) as handle:
        for record in handle.fetch(until_eof=True):
            key = (record.query_name, record.flag, record.reference_start)
            expected = prediction_tags(record)
            report["records"] += 1
            report["tagged"] += bool(expected)
            found = kennel.pop(key, None)
            if found is None:
                report["missing"] += 1
            if found != expected:
                report["mismatches"] += 1
                if len(report["examples"]) < examples:
                    report["examples"].append((key, expected, found))
    # kennel's other records (leech drops them: unmapped, secondary, ...) must stay untagged
    report["tagged_beyond_leech"] = sum(bool(tags) for tags in kennel.values())
    return report


def dp_share(inputs: Inputs, bundle: Path, work: Path, subset_reads: int, cpu: int) -> dict:
    """Seconds in refine_signal_map over the wall of a one-worker in-process extraction."""
    shards = max(1, round(inputs.reads / subset_reads))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run(shard_command(inputs, bundle, work, shards), work / "shard.log")
    log = work / "extract.log"
    arguments = extract_arguments(inputs, bundle, work, threads=1)
    run([sys.executable, "-c", DP_SHARE, *arguments], log, [cpu])
    report = json.loads(log.read_text().strip().splitlines()[-1])
    report["reads"] = count_records(work / "shard0.bam")
    return report


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """The benchmark's (measure, value, goal) rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("bench/out/leech"))
    parser.add_argument("--reads", type=int, default=10000, help="primary reads to simulate")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--bundle", type=Path, default=BUNDLE, help="leech bundle (.pt)")
    parser.add_argument("--leech", type=Path, default=LEECH, help="leech executable (3.12 venv)")
    parser.add_argument("--threads", type=int, default=2, help="CPUs for each side")
    parser.add_argument("--rounds", type=int, default=2, help="alternating kennel/leech rounds")
    parser.add_argument("--dp-reads", type=int, default=2000, help="subset for the DP's share")
    parser.add_argument(
        "--classify-option",
        action="append",
        default=[],
        help="extra `kennel classify` argument, e.g. --classify-option=--batch-size=256",
    )
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    available = sorted(os.sched_getaffinity(0))
    cpus = available[: args.threads]
    threads = len(cpus)  # never more workers than the CPUs both sides are pinned to
    have_leech = args.leech.exists()

    inputs = simulate(args.out_dir, args.reads, args.seed)
    load_before = os.getloadavg()[0]
    kennel_rounds, fused_rounds, leech_rounds = [], [], []
    n = max(1, args.rounds)
    for index in range(n):
        work = args.out_dir / "kennel"
        kennel_rounds.append(
            run_kennel(inputs, args.bundle, work, threads, cpus, args.classify_option)
        )
        fused_rounds.append(
            run_kennel(
                inputs,
                args.bundle,
                args.out_dir / "kennel_fused",
                threads,
                cpus,
                args.classify_option,
                fused=True,
            )
        )
        if have_leech:
            leech_rounds.append(
                run_leech(args.leech, inputs, args.bundle, args.out_dir, threads, cpus)
            )
        parts = [("kennel", kennel_rounds[-1]), ("kennel fused", fused_rounds[-1])]
        steps = "; ".join(
            f"{name} " + ", ".join(f"{step} {seconds:.1f}" for step, seconds in run.items())
            for name, run in parts
        )
        leech_part = f"; leech predict {leech_rounds[-1]:.1f}" if have_leech else ""
        print(f"round {index + 1} (s): {steps}{leech_part}", file=sys.stderr)

    def goal_wall(seconds: dict) -> float:
        return seconds["shard"] + seconds["extract"] + seconds["classify"]

    best = min(kennel_rounds, key=goal_wall)
    kennel_wall = goal_wall(best)
    best_fused = min(fused_rounds, key=goal_wall)
    fused_wall = goal_wall(best_fused)
    extracted = count_records(args.out_dir / "kennel" / "shard0.bam")
    dp = dp_share(inputs, args.bundle, args.out_dir / "dp", args.dp_reads, cpus[0])

    table = [
        (
            "machine load (1-min average), start / end",
            f"{load_before:.1f} / {os.getloadavg()[0]:.1f}",
            f"above ~0 on {len(available)} CPUs: other work shared them",
        ),
        (f"kennel shard, s (best of {n}; {inputs.reads} reads)", f"{best['shard']:.1f}", ""),
        (f"kennel extract, s ({threads} workers)", f"{best['extract']:.1f}", ""),
        (
            f"kennel classify, s ({threads} threads, cpu)",
            f"{best['classify']:.1f}",
            " ".join(args.classify_option),
        ),
        ("kennel shard + extract + classify, s", f"{kennel_wall:.1f}", ""),
        (
            "kennel fused: shard + classify, s",
            f"{best_fused['shard']:.1f} + {best_fused['classify']:.1f} = {fused_wall:.1f}",
            "trna.fused: extraction inside the classify job, beside the model",
        ),
        ("kennel merge-bam, s (not in the goal)", f"{best['merge']:.1f}", ""),
        ("kennel reads/s (shard + extract + classify)", f"{inputs.reads / kennel_wall:.0f}", ""),
        (
            "extraction reads/s per worker",
            f"{extracted / best['extract'] / threads:.0f}",
            f"{extracted} reads, {threads} workers, step wall",
        ),
    ]
    stats = json.loads((args.out_dir / "kennel" / "stats.json").read_text())
    if "wall_s" in stats and "device" in stats.get("stage_s", {}):
        table.append(
            (
                "  classify run / model forward, s (last round)",
                f"{stats['wall_s']:.1f} / {stats['stage_s']['device']:.1f}",
                "from its stats JSON; the rest of the step is start-up and tagging",
            )
        )
    if dp["calls"]:
        table.append(
            (
                "DP (refine_signal_map) share of extraction",
                f"{dp['seconds'] / dp['wall']:.0%}",
                f"1 worker in-process, {dp['reads']} reads, "
                f"{dp['seconds'] / dp['calls'] * 1e3:.2f} ms/call",
            )
        )
    else:
        table.append(("DP (refine_signal_map) share of extraction", "n/a", "no call seen"))
    if not have_leech:
        table.append(("leech predict", "absent", f"{args.leech}; make it: {MAKE_LEECH}"))
        return table
    leech_wall = min(leech_rounds)
    tags = compare_tags(args.out_dir / "leech.bam", args.out_dir / "kennel" / "merged.bam")
    table += [
        (f"leech predict, s (best of {n}; {threads} rayon threads)", f"{leech_wall:.1f}", ""),
        ("leech reads/s", f"{inputs.reads / leech_wall:.0f}", ""),
        (
            "  leech inference wall, s (last round)",
            leech_inference_wall(args.out_dir / "leech.log"),
            "as leech logs it: after its start-up",
        ),
        (
            "leech / kennel wall (shard + extract + classify)",
            f"{leech_wall / kennel_wall:.2f}x",
            ">= 3x",
        ),
        (
            "leech / kennel wall, with merge-bam",
            f"{leech_wall / (kennel_wall + best['merge']):.2f}x",
            "",
        ),
        ("leech / kennel fused wall (shard + classify)", f"{leech_wall / fused_wall:.2f}x", ""),
    ]
    fused_tags = compare_tags(
        args.out_dir / "leech.bam", args.out_dir / "kennel_fused" / "merged.bam"
    )
    for name, found in (("", tags), ("fused: ", fused_tags)):
        table += [
            (
                f"{name}tag mismatches ({' '.join(TAGS)})",
                f"{found['mismatches']}",
                f"0 of {found['records']} leech records ({found['tagged']} tagged); "
                f"{found['missing']} absent from kennel's BAM",
            ),
            (
                f"{name}kennel records tagged that leech drops",
                f"{found['tagged_beyond_leech']}",
                "0",
            ),
        ]
    for name, report in (("kennel", tags), ("kennel fused", fused_tags)):
        for key, expected, found in report["examples"]:
            table.append((f"  e.g. {key[0]} flag {key[1]} pos {key[2]}", "", ""))
            table.append(("    leech", "", format_tags(expected)))
            table.append((f"    {name}", "", format_tags(found)))
    return table


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
