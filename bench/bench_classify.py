"""The tRNA GPU feed on this machine's CPU: compiled vs eager, compilations, and overlap.

Goals (issue #4): compiled / eager chunks/s >= 1.8x at batch 1024; exactly 1 compilation over a
run whose last batch is ragged; with a writer slowed to ~7k reads/s (pysam tagging speed), the
pipeline's wall / the slowest stage alone <= 1.15.

    python bench/bench_classify.py [--batch-size 1024] [--batches 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from kennel.feed import compile_count, compile_for, pad_rows
from kennel.models.trna_classifier import TrnaTcn
from kennel.pipeline import DeviceStage, StageTimes, WriterThread, fixed_batches, run_pipeline

WRITER_READS_PER_S = 7000


def model_and_inputs(batch_size: int):
    torch.manual_seed(0)
    model = TrnaTcn(n_classes=4).eval()
    signal = torch.randn(batch_size, 2, 512)
    bases = torch.randn(batch_size, 25, 5).abs()
    return model, signal, bases


def chunks_per_second(forward, signal, bases, repeats: int) -> float:
    with torch.inference_mode():
        for _ in range(3):  # warm-up (and compile, when compiled); oneDNN settles over a few calls
            forward(signal, bases)
        started = time.perf_counter()
        for _ in range(repeats):
            forward(signal, bases)
        return repeats * len(signal) / (time.perf_counter() - started)


def compilations_over_ragged_run(model, batch_size: int, n_reads: int) -> int:
    """Compile once, then feed a run whose last batch is ragged (padded to the fixed shape)."""
    torch._dynamo.reset()
    before = compile_count()
    compiled = compile_for(model, torch.device("cpu"), has_python_hooks=False)
    with torch.inference_mode():
        for start in range(0, n_reads, batch_size):
            rows = min(batch_size, n_reads - start)
            compiled(
                pad_rows(torch.randn(rows, 2, 512), batch_size),
                pad_rows(torch.randn(rows, 25, 5).abs(), batch_size),
            )
    return compile_count() - before


def overlap(device_run, batch_size: int, batches: int) -> tuple[float, float, float]:
    """(pipeline wall, device alone, writer alone) for the same batches; the writer sleeps as
    long as tagging its reads at WRITER_READS_PER_S takes."""
    data = [{"signal": np.random.default_rng(i).standard_normal((batch_size, 2, 512), np.float32),
             "bases": np.abs(np.random.default_rng(i).standard_normal((batch_size, 25, 5),
                                                                      np.float32)),
             "read_id": np.arange(batch_size)} for i in range(batches)]  # fmt: skip
    data[-1] = {k: v[: batch_size - batch_size // 3] for k, v in data[-1].items()}  # ragged
    fixed = list(fixed_batches(data, batch_size, ("signal", "bases")))
    rows = sum(batch.n_real for batch in fixed)

    def slow_write(item):
        time.sleep(item[0].n_real / WRITER_READS_PER_S)

    def device_alone() -> float:
        started = time.perf_counter()
        for batch in fixed:
            device_run(batch)
        return time.perf_counter() - started

    device_alone()  # warm-up: oneDNN settles over the first few calls of a shape
    before = device_alone()
    started = time.perf_counter()
    run_pipeline(fixed, DeviceStage(device_run, 3), WriterThread(slow_write, depth=4), StageTimes())
    wall = time.perf_counter() - started
    # the machine is shared: time the device alone on both sides of the pipeline, keep the best
    return wall, min(before, device_alone()), rows / WRITER_READS_PER_S


def model_device(model):
    def run(batch):
        with torch.inference_mode():
            logits, _ = model(torch.from_numpy(batch.arrays["signal"]),
                              torch.from_numpy(batch.arrays["bases"]))  # fmt: skip
        return logits[: batch.n_real].numpy()

    return run


def gpu_like_device(reads_per_s: float):
    """A stand-in for a GPU several times faster than the writer (this machine has none)."""

    def run(batch):
        time.sleep(batch.size / reads_per_s)
        return batch.n_real

    return run


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """The benchmark's (measure, value, goal) rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    model, signal, bases = model_and_inputs(args.batch_size)
    eager = chunks_per_second(model, signal, bases, args.repeats)
    started = time.perf_counter()
    compiled_forward = compile_for(model, torch.device("cpu"), has_python_hooks=False)
    compiled = chunks_per_second(compiled_forward, signal, bases, args.repeats)
    compile_seconds = time.perf_counter() - started
    n_compilations = compilations_over_ragged_run(model, args.batch_size, args.batch_size * 3 + 17)
    cpu_wall, cpu_device, cpu_writer = overlap(model_device(model), 256, args.batches)
    gpu_wall, gpu_device, gpu_writer = overlap(gpu_like_device(20_000), 1024, args.batches * 4)
    table = [
        (f"eager chunks/s (batch {args.batch_size})", f"{eager:.0f}", ""),
        (f"compiled chunks/s (batch {args.batch_size})", f"{compiled:.0f}", ""),
        ("compiled / eager", f"{compiled / eager:.2f}x", ">= 1.8x"),
        ("compile + timed run (s)", f"{compile_seconds:.1f}", ""),
        ("compilations over a ragged run", f"{n_compilations}", "1"),
        ("CPU model: device / writer alone (s)", f"{cpu_device:.2f} / {cpu_writer:.2f}", ""),
        (
            "CPU model: wall / slowest stage",
            f"{cpu_wall / max(cpu_device, cpu_writer):.2f}",
            "<= 1.15",
        ),
        ("GPU-like 20k/s: device / writer (s)", f"{gpu_device:.2f} / {gpu_writer:.2f}", ""),
        (
            "GPU-like: wall / slowest (writer)",
            f"{gpu_wall / max(gpu_device, gpu_writer):.2f}",
            "<= 1.15",
        ),
    ]
    return table


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
