"""Shard step memory and time against sample size: `kennel shard` on 20k- and 100k-read samples.

The shard job sees a whole sample (a flowcell's reads: millions), so whatever it keeps per read
decides whether it fits its memory (the rule's mem_mb, see workflow/rules/trna.smk). Each run is
`kennel shard` in its own process, as the workflow runs it (two shards, --threads 2, the rule's
default; the large sample also with one thread, the time compressing costs); the parent samples
the child's anonymous memory and RSS every 20 ms. Anonymous memory is what the job holds; RSS also
counts pages of the memory-mapped POD5, which kennel unmaps after each batch and the kernel can
drop. The per-read cost is the difference between the two sizes over the difference in reads,
so the fixed cost (imports, libraries) cancels; the 10M-read line extrapolates it.

Goal: per-read anonymous memory small enough that a 10M-read sample fits the rule's memory.

    python bench/bench_shard.py [--out-dir bench/out/shard] [--small 20000] [--large 100000]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import subprocess
import sys
import time
from pathlib import Path

from sources import simulator_sources

BIG_SAMPLE = 10_000_000


def simulate(out_dir: Path, reads: int) -> Path:
    """A simulated sample, cached by the settings and the simulator's source."""
    from kennel.sim.trna import TrnaSimulation, simulate_trna

    settings = TrnaSimulation(samples=("x",), reads=reads, seed=reads)
    digest = hashlib.sha256(repr(dataclasses.asdict(settings)).encode())
    for path in simulator_sources():
        digest.update(path.read_bytes())
    out = out_dir / f"sim{reads}-{digest.hexdigest()[:12]}"
    if not (out / "x.bam.bai").exists():  # written last: its presence means complete
        simulate_trna(out, settings)
    return out


def _status_kib(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
    except OSError:
        return None
    if "RssAnon" not in fields:  # a zombie's status has no memory lines
        return None
    return int(fields["RssAnon"].split()[0]), int(fields["VmRSS"].split()[0])


def measure(sample: Path, out: Path, threads: int = 1) -> dict:
    """One `kennel shard` run (``threads``: its --threads): wall seconds, peak anonymous memory
    and peak RSS (MiB)."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-c", "import sys; from kennel.cli import main; sys.exit(main())", "shard",
        "--bam", str(sample / "x.bam"), "--pod5", str(sample / "x.pod5"),
        "--reference", str(sample / "reference.fa"),
        "--shard-pod5", str(out / "0.pod5"), str(out / "1.pod5"),
        "--shard-bam", str(out / "0.bam"), str(out / "1.bam"),
        "--passthrough", str(out / "p.bam"), "--counts", str(out / "counts.tsv"),
        "--threads", str(threads),
    ]  # fmt: skip
    log = out / "shard.log"  # a file, not a pipe: a full pipe would stop the child
    started = time.perf_counter()
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stderr=stderr)
        anon = rss = 0
        while process.poll() is None:
            sample_kib = _status_kib(process.pid)
            if sample_kib:
                anon, rss = max(anon, sample_kib[0]), max(rss, sample_kib[1])
            time.sleep(0.02)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"kennel shard failed:\n{log.read_text()[-2000:]}")
    return {"seconds": seconds, "anon_mib": anon / 1024, "rss_mib": rss / 1024}


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """The benchmark's (measure, value, goal) rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "out" / "shard")
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs; best kept")
    args = parser.parse_args(argv)
    samples = {reads: simulate(args.out_dir, reads) for reads in (args.small, args.large)}
    best: dict[tuple[int, int], dict] = {}
    # the rule's default of 2 threads, and 1 for the time compressing alone costs
    runs = [(args.small, 2), (args.large, 2), (args.large, 1)]
    for _ in range(args.rounds):
        for reads, threads in runs:
            report = measure(samples[reads], args.out_dir / f"out{reads}", threads)
            kept = best.setdefault((reads, threads), report)
            for key, value in report.items():
                kept[key] = min(kept[key], value)
    small, large = best[args.small, 2], best[args.large, 2]
    one_thread = best[args.large, 1]
    extra_reads = args.large - args.small
    per_read = (large["anon_mib"] - small["anon_mib"]) * 2**20 / extra_reads
    rss_per_read = (large["rss_mib"] - small["rss_mib"]) * 2**20 / extra_reads
    big = small["anon_mib"] + per_read * (BIG_SAMPLE - args.small) / 2**20
    name = f"kennel shard ({args.small // 1000}k / {args.large // 1000}k reads)"
    return [
        (f"{name}: peak anon MiB", f"{small['anon_mib']:.0f} / {large['anon_mib']:.0f}", ""),
        (f"{name}: peak RSS MiB", f"{small['rss_mib']:.0f} / {large['rss_mib']:.0f}", ""),
        (f"{name}: s", f"{small['seconds']:.1f} / {large['seconds']:.1f}", ""),
        (
            f"kennel shard ({args.large // 1000}k reads): s with --threads 2 / 1",
            f"{large['seconds']:.1f} / {one_thread['seconds']:.1f}",
            "",
        ),
        ("kennel shard: anon bytes per read", f"{per_read:.0f}", ""),
        ("kennel shard: RSS bytes per read", f"{rss_per_read:.0f}", ""),
        (
            f"kennel shard: anon MiB at {BIG_SAMPLE // 1_000_000}M reads (extrapolated)",
            f"{big:.0f}",
            "fits the rule's mem_mb",
        ),
    ]


if __name__ == "__main__":
    for measure_name, value, goal in rows(sys.argv[1:]):
        print(f"{measure_name}\t{value}\t{goal}")
