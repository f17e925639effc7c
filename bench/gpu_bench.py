"""The prepared GPU benchmark: run on a lent GPU machine, in one command, in under 8 minutes.

    bash bench/gpu/run.sh            # installs only the wheels in bench/gpu/wheels, then this

tRNA classify: forward chunks/s eager vs compiled at batch 1024; whole-shard runs (decoupled
eager, decoupled compiled, fused) with the GPU's busy fraction sampled by NVML while they run.
Decoupled runs read a features file extracted beforehand, so their classify reads/s leaves the
extraction out; fused extracts inside classify. Each run's end-to-end reads/s (extraction
included) is what sets them side by side.
SNP scoring: float32 vs float16 + compile SNPs/s and their agreement (snp-precision's measures).
Borzoi vs Flashzoi (kennel's attention, no flash_attn): one full-size forward, float32 and
bfloat16 autocast (needs borzoi-pytorch: bench/gpu/prepare.sh ships it).
Writes gpu_bench.json and gpu_bench.md into --out (default $OUT or bench/out/gpu).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

# torch and kennel are imported inside the functions: extraction workers are spawned, and each
# re-imports this module; module-level imports would add their import time to every worker's
# start and so to the extraction and fused timings

CLASSES = ["Ala", "Gly", "Leu", "Phe"]


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def forward_throughput(batch_size: int, repeats: int, device) -> dict:
    import torch
    from kennel.cuda_graphs import ready_cuda_graphs_thread
    from kennel.feed import compile_for, uses_cuda_graphs
    from kennel.models.trna_classifier import TrnaTcn

    model = TrnaTcn(n_classes=len(CLASSES)).to(device).eval()
    signal = torch.randn(batch_size, 2, 512, device=device)
    bases = torch.randn(batch_size, 25, 5, device=device).abs()

    def rate(forward, graphs: bool = False):
        def call():
            if graphs:  # each call a new step: CUDA graph trees may reuse the last outputs
                torch.compiler.cudagraph_mark_step_begin()
            forward(signal, bases)

        with torch.inference_mode():
            for _ in range(5):
                call()
            synchronize(device)
            started = time.perf_counter()
            for _ in range(repeats):
                call()
            synchronize(device)
        return repeats * batch_size / (time.perf_counter() - started)

    eager = rate(model)
    # cuDNN's own timing of its convolution algorithms for each shape (off by default in
    # torch): kennel pads every batch to one shape, so it would pay once a job; measured
    # before kennel turns it on (eager only: CUDA graphs keep the algorithm they recorded)
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        eager_tuned = rate(model)
    finally:
        torch.backends.cudnn.benchmark = benchmark
    started = time.perf_counter()
    compiled_forward = compile_for(model, device, has_python_hooks=False)
    graphs = uses_cuda_graphs(device, has_python_hooks=False)
    if graphs:
        ready_cuda_graphs_thread()
    compiled = rate(compiled_forward, graphs)
    return {
        "batch_size": batch_size,
        "eager_chunks_per_s": eager,
        "eager_cudnn_benchmark_chunks_per_s": eager_tuned,
        "compiled_chunks_per_s": compiled,
        "compiled_over_eager": compiled / eager,
        "compile_and_time_s": time.perf_counter() - started,
    }


def trna_runs(work: Path, reads: int, threads: int, device: str) -> dict:
    from kennel.models.bundle import save_bundle
    from kennel.models.trna_classifier import TrnaTcn
    from kennel.sim.trna import TrnaSimulation, simulate_trna
    from kennel.trna.classify import ClassifySettings, FusedExtraction, score_shard
    from kennel.trna.extract import extract_shard, spec_for
    from kennel.trna.shard import ShardOutputs, shard_sample

    sim = simulate_trna(work / "sim", TrnaSimulation(samples=("gpu",), reads=reads, seed=5))
    shards = ShardOutputs([work / "0.pod5"], [work / "0.bam"], work / "p.bam", work / "c.tsv")
    shard_sample(sim["gpu.bam"], [sim["gpu.pod5"]], sim["reference"], shards)
    spec = spec_for(sim["kmer_table"])
    started = time.perf_counter()
    extract_shard(
        shards.bams[0], shards.pod5s, sim["reference"], sim["kmer_table"], work / "f.h5",
        threads=threads, spec=spec,
    )  # fmt: skip
    extract_seconds = time.perf_counter() - started
    bundle = work / "bundle.pt"
    model = TrnaTcn(n_classes=len(CLASSES))
    save_bundle(
        bundle, model, {"n_classes": len(CLASSES)},
        metadata={"class_names": CLASSES, "feature_spec": spec.to_json()},
    )  # fmt: skip
    results = {"reads": reads, "extract_s": extract_seconds, "extract_threads": threads}
    runs = {
        "decoupled_eager": ({"compile": "off"}, None),
        "decoupled_compiled": ({"compile": "on"}, None),
        "fused_eager": (
            {"compile": "off"},
            FusedExtraction(shards.pod5s, sim["reference"], sim["kmer_table"], threads, spec),
        ),
    }
    for name, (settings, fused) in runs.items():
        out = work / name
        out.mkdir(exist_ok=True)  # a rerun on a machine still warm
        try:
            # the GPU job: the model's outputs to a file (tagging the BAM is a CPU job's)
            stats = score_shard(
                shards.bams[0], bundle, out / "scored.h5",
                ClassifySettings(device=device, batch_size=1024, **settings),
                features=None if fused else work / "f.h5", fused=fused,
            )  # fmt: skip
        except Exception as error:  # noqa: BLE001 - the other runs' numbers still count
            traceback.print_exc()
            results[name] = {"error": f"{type(error).__name__}: {error}"}
            continue
        # decoupled: the one extraction above feeds each run; fused: it is inside wall_s
        end_to_end_s = stats["wall_s"] + (0.0 if fused is not None else extract_seconds)
        results[name] = {
            "reads_per_s": stats["reads_per_s"],
            "includes_extraction": fused is not None,
            "end_to_end_reads_per_s": stats["reads_scored"] / end_to_end_s,
            "wall_s": stats["wall_s"],
            "stage_s": stats["stage_s"],
            "device_busy_fraction": stats["device_busy_fraction"],
            # NVML's share of each sample period with a kernel running, averaged over wall_s
            "gpu_busy_fraction_nvml": stats["gpu_busy_fraction_nvml"],
            "cuda_event_s": stats.get("cuda_event_s"),
            "compile_s": stats["compile_s"],
            "compilations": stats["compilations"],
        }
    return results


def snp_runs(work: Path, device: str, variants: int) -> dict:
    """float32 vs float16 + compile SNPs/s on a simulated job, and their agreement."""
    from dataclasses import replace

    import h5py
    from kennel.sim.snp import simulate_snp
    from kennel.snp.precision import compare_scores
    from kennel.snp.scoring import ScoreOptions, score_snps

    sim = simulate_snp(
        work / "snp", n_variants=variants, seq_len=16384, chromosome_length=400_000, n_chromosomes=3
    )
    base = ScoreOptions(device=device, batch_size=32, rc=True, shifts=(0,))
    runs = {
        "float32": replace(base, compile="off"),
        "float16_compiled": replace(base, mix_dtype="float16", compile="on"),
    }
    results: dict = {}
    for name, options in runs.items():
        report = score_snps(
            sim["variants"], sim["genome"], sim["model"], sim["targets"],
            work / f"{name}.scores.h5", options,
        )  # fmt: skip
        results[f"{name} SNPs/s"] = f"{report.variants_per_second:.0f}"
        # compiling is paid once a job: the rate after it is what a long job approaches
        results[f"{name} SNPs/s after warm-up"] = f"{report.steady_variants_per_second:.0f}"
        results[f"{name} warm-up s"] = f"{report.warmup_seconds:.1f}"
        results[f"{name} outside-forward share"] = f"{report.outside_forward_share:.3f}"
        copy_in = report.copy_in_seconds  # timed by CUDA events: none on the CPU smoke test
        results[f"{name} window copy-in s (CUDA events)"] = (
            "n/a (no CUDA)" if copy_in is None else f"{copy_in:.3f}"
        )
    # snp-precision's measures on the two timed runs' own scores (the float32 run as cuDNN
    # runs it by default, TF32 convolutions allowed), not on a rescoring of their variants
    logsum = {}
    for name in runs:
        with h5py.File(work / f"{name}.scores.h5", "r") as handle:
            logsum[name] = handle["logSUM"][()]
    agreement = compare_scores(logsum["float32"], logsum["float16_compiled"], "float16")
    results["float16 Pearson r (logSUM)"] = f"{agreement.pearson_logsum:.4f}"
    results["float16 Spearman rho (max abs logSUM)"] = f"{agreement.spearman_max_abs:.4f}"
    results["float16 top-10% sign agreement"] = f"{agreement.top_sign_agreement:.4f}"
    return results


def borzoi_runs(device: str, seq_len: int) -> dict:
    """Seconds of one Borzoi and one Flashzoi forward, float32 and bfloat16 autocast (last:
    a failure here is written down, not a lost report)."""
    import torch
    from bench_flashzoi import forward_seconds, networks

    try:
        import borzoi_pytorch  # noqa: F401 - its own error says why (e.g. transformers' version)
    except ImportError as error:
        return {"Borzoi vs Flashzoi": f"not run (borzoi-pytorch: {error})"}
    try:
        built = networks(seq_len, device)
        results: dict = {}
        for precision, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
            best = forward_seconds(built, seq_len, rounds=3, mix_dtype=dtype)
            for name, seconds in best.items():
                results[f"{name} forward s ({seq_len:,} bp, {precision})"] = f"{seconds:.3f}"
            ratio = best["Flashzoi"] / best["Borzoi"]
            results[f"Flashzoi / Borzoi time ({precision})"] = f"{ratio:.2f}x"
        return results
    except Exception as error:  # noqa: BLE001 - the numbers above it are already measured
        return {"Borzoi vs Flashzoi": f"failed: {type(error).__name__}: {error}"}


def markdown(report: dict) -> str:
    lines = ["# kennel GPU benchmark", "", f"device: {report['device']}", ""]
    forward = report.get("trna_forward")
    if forward is not None and "error" not in forward:
        lines += [
            "| tRNA classify | value | goal |",
            "| --- | --- | --- |",
            f"| eager chunks/s (batch {forward['batch_size']}) "
            f"| {forward['eager_chunks_per_s']:.0f} | |",
            f"| eager chunks/s, cudnn.benchmark on "
            f"| {forward['eager_cudnn_benchmark_chunks_per_s']:.0f} | |",
            f"| compiled chunks/s | {forward['compiled_chunks_per_s']:.0f} | |",
            f"| compiled / eager | {forward['compiled_over_eager']:.2f}x | >= 1.8x |",
        ]
    runs = report.get("trna_runs")
    if runs is not None and "error" not in runs:
        lines += [
            "",
            f"Whole shard, {runs['reads']} simulated reads; extraction with "
            f"{runs['extract_threads']} threads took {runs['extract_s']:.1f} s (decoupled runs).",
            "",
            "| run | classify reads/s | extraction in it? | end-to-end reads/s | GPU busy (NVML) "
            "| computing (CUDA events) | slowest stage | goal |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name in ("decoupled_eager", "decoupled_compiled", "fused_eager"):
            lines.append(_run_row(name, runs.get(name)))
    for part, title in (
        ("trna_forward", "tRNA forward"), ("trna_runs", "tRNA whole shard"),
        ("snp", "SNP scoring"), ("borzoi", "Borzoi vs Flashzoi"),
    ):  # fmt: skip
        value = report.get(part)
        if value is not None and "error" in value:
            lines += ["", f"{title}: failed: {value['error']}"]
        elif value is not None and part in ("snp", "borzoi"):
            lines += ["", f"| {title} | value |", "| --- | --- |"]
            lines += [f"| {key} | {item} |" for key, item in value.items()]
    return "\n".join(lines) + "\n"


def _run_row(name: str, run: dict | None) -> str:
    if run is None or "error" in run:
        return f"| {name} | failed: {'not run' if run is None else run['error']} | | | | | | |"
    busy = run["gpu_busy_fraction_nvml"]
    events = run["cuda_event_s"]  # None off CUDA
    computing = None if not events else events["compute"] / run["wall_s"]
    # the GPU is busy only as far as the slowest stage feeds it: the writer, on a small model
    stage, seconds = max(run["stage_s"].items(), key=lambda item: item[1])
    return (
        f"| {name} | {run['reads_per_s']:.0f} "
        f"| {'yes' if run['includes_extraction'] else 'no'} "
        f"| {run['end_to_end_reads_per_s']:.0f} "
        f"| {'n/a' if busy is None else f'{busy:.2f}'} "
        f"| {'n/a' if computing is None else f'{computing:.2f}'} "
        f"| {stage} {seconds:.1f} s of {run['wall_s']:.1f} "
        f"| {'>= 0.90 (issue: 100k reads)' if name.startswith('decoupled') else ''} |"
    )


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/out/gpu")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/kennel-gpu-bench"))
    parser.add_argument("--reads", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-snp", action="store_true")
    parser.add_argument("--snp-variants", type=int, default=2000)
    parser.add_argument("--device", default="cuda", help="cpu: a small smoke test of this script")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--borzoi-seq-len", type=int, default=524_288, help="0: skip")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_bench: no CUDA device; run this on the lent GPU machine")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    report = {"device": name, "torch": torch.__version__}
    device = torch.device(args.device)
    parts: list[tuple[str, Callable[[], dict]]] = [
        ("trna_forward", lambda: forward_throughput(1024, args.repeats, device)),
        ("trna_runs", lambda: trna_runs(args.work, args.reads, args.threads, args.device)),
    ]
    if not args.skip_snp:
        parts.append(("snp", lambda: snp_runs(args.work, args.device, args.snp_variants)))
    if args.borzoi_seq_len:
        parts.append(("borzoi", lambda: borzoi_runs(args.device, args.borzoi_seq_len)))
    failed = True
    try:
        for part, measure in parts:
            try:
                report[part] = measure()
            except Exception as error:  # noqa: BLE001 - one part's failure keeps the others'
                traceback.print_exc()
                report[part] = {"error": f"{type(error).__name__}: {error}"}
            text = save(args.out, report, started)  # run.sh's timeout may cut what follows
        print(text, flush=True)
        failed = has_failure(report)
    finally:
        # leave without waiting on threads a torch < 2.13 exit may hang on
        os._exit(1 if failed else 0)


def has_failure(value) -> bool:
    """Whether any part of the report, or any run or row inside one, failed (a failed classify
    run sits inside ``trna_runs``, a failed Borzoi forward is a row): run.sh's status says so."""
    if isinstance(value, dict):
        return "error" in value or any(has_failure(item) for item in value.values())
    return isinstance(value, str) and value.startswith("failed:")


def save(out: Path, report: dict, started: float) -> str:
    """Write the report so far (json and markdown); returns the markdown."""
    report["total_s"] = time.perf_counter() - started
    text = markdown(report)
    for name, content in (("gpu_bench.json", json.dumps(report, indent=2, default=str)),
                          ("gpu_bench.md", text)):  # fmt: skip
        # whole or not at all: run.sh's timeout may stop this process at any point
        (out / f"{name}.tmp").write_text(content)
        os.replace(out / f"{name}.tmp", out / name)
    return text


if __name__ == "__main__":
    main()
