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
        forward(signal, bases)  # warm-up (and compile, when compiled)
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


def overlap(model, batch_size: int, batches: int) -> tuple[float, float, float]:
    """(pipeline wall, device alone, writer alone) for the same batches."""
    rows = batch_size * batches - batch_size // 3  # ragged last batch
    data = [{"signal": np.random.default_rng(i).standard_normal((batch_size, 2, 512), np.float32),
             "bases": np.abs(np.random.default_rng(i).standard_normal((batch_size, 25, 5),
                                                                      np.float32)),
             "read_id": np.arange(batch_size)} for i in range(batches)]  # fmt: skip
    data[-1] = {k: v[: batch_size - batch_size // 3] for k, v in data[-1].items()}

    def device_run(batch):
        with torch.inference_mode():
            logits, _ = model(torch.from_numpy(batch.arrays["signal"]),
                              torch.from_numpy(batch.arrays["bases"]))  # fmt: skip
        return logits[: batch.n_real].numpy()

    def slow_write(item):
        time.sleep(item[0].n_real / WRITER_READS_PER_S)

    fixed = list(fixed_batches(data, batch_size, ("signal", "bases")))
    started = time.perf_counter()
    for batch in fixed:
        device_run(batch)
    device_alone = time.perf_counter() - started
    writer_alone = rows / WRITER_READS_PER_S
    started = time.perf_counter()
    run_pipeline(fixed, DeviceStage(device_run, 3), WriterThread(slow_write, depth=4), StageTimes())
    return time.perf_counter() - started, device_alone, writer_alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    model, signal, bases = model_and_inputs(args.batch_size)
    eager = chunks_per_second(model, signal, bases, args.repeats)
    started = time.perf_counter()
    compiled_forward = compile_for(model, torch.device("cpu"), has_python_hooks=False)
    compiled = chunks_per_second(compiled_forward, signal, bases, args.repeats)
    compile_seconds = time.perf_counter() - started
    n_compilations = compilations_over_ragged_run(model, args.batch_size, args.batch_size * 3 + 17)
    wall, device_alone, writer_alone = overlap(model, 256, args.batches)
    rows = [
        (f"eager chunks/s (batch {args.batch_size})", f"{eager:.0f}", ""),
        (f"compiled chunks/s (batch {args.batch_size})", f"{compiled:.0f}", ""),
        ("compiled / eager", f"{compiled / eager:.2f}x", ">= 1.8x"),
        ("compile + timed run (s)", f"{compile_seconds:.1f}", ""),
        ("compilations over a ragged run", f"{n_compilations}", "1"),
        ("device alone / writer alone (s)", f"{device_alone:.2f} / {writer_alone:.2f}", ""),
        (
            "pipeline wall / slowest stage",
            f"{wall / max(device_alone, writer_alone):.2f}",
            "<= 1.15",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:>14}  {goal}")


if __name__ == "__main__":
    main()
