"""Extraction per worker by refine mode, and the per-read path vs the batched one.

On one shard written by `kennel shard`, one process extracts the same reads (all of them, in
batches as a worker gets them) in each refine mode, with the level fit, the map costs that
choose between refined and move-table maps, and the window assembly (level units, residuals,
windows, chunks) run read by read (as extraction did before they were batched) and on whole
batches; modes and paths alternate over
``--rounds`` and each keeps its fastest round (the machine may be shared). Also: the share of
the batched `off` extraction's time spent outside escapepod's and pod5's native calls (Python
and numpy per read). Goals (issue #14): `off` >= 2.5x the old `checked` reads/s per worker;
batched `checked` >= 1.3x the old one. Worker scaling is bench_extract's.

    python bench/bench_refine.py [--reads 5000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np


def extract_all(batches, pod5, table, spec) -> tuple[float, int]:
    from kennel.trna.extract import extract_batch

    began = time.perf_counter()
    extracted = sum(len(extract_batch(reads, [], pod5, table, spec)) for reads in batches)
    return time.perf_counter() - began, extracted


def native_share(batches, pod5, table, spec) -> float:
    """Share of one extraction's wall time inside escapepod's and the POD5 reader's calls."""
    import escapepod

    spent = [0.0]
    originals = {}

    def timed(function):
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - began

        return wrapper

    for name in ("mad_normalize", "span_statistics_batch", "refine_signal_map"):
        originals[name] = getattr(escapepod, name)
        setattr(escapepod, name, timed(originals[name]))
    signals = pod5.signals
    pod5.signals = timed(signals)
    try:
        wall, _ = extract_all(batches, pod5, table, spec)
    finally:
        for name, function in originals.items():
            setattr(escapepod, name, function)
        pod5.signals = signals
    return spent[0] / wall


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "out" / "extract")
    parser.add_argument("--reads", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)

    import escapepod
    from bench_extract import simulate
    from kennel.io.pod5 import Pod5Set
    from kennel.trna import extract as module
    from kennel.trna.extract import read_inputs, spec_for

    inputs = simulate(args.out_dir, args.reads)
    spec = spec_for(inputs["kmer_table"])
    batches = [reads for reads, _ in read_inputs(inputs["bam"], inputs["reference"], spec)]
    pod5 = Pod5Set([inputs["pod5"]], index_reads=False)
    table = escapepod.KmerTable.from_file(str(inputs["kmer_table"]))
    batched = (module.fit_levels, module.assemble_windows, module.choose_maps)
    per_read = (
        module.fit_levels_read_by_read,
        module.assemble_windows_per_read,
        module.choose_maps_per_read,
    )
    best: dict[tuple[str, str], float] = {}
    extracted = 0
    for _ in range(args.rounds):
        for path, functions in (("per-read", per_read), ("batched", batched)):
            module.fit_levels, module.assemble_windows, module.choose_maps = functions
            try:
                for mode in ("off", "checked", "always"):
                    seconds, extracted = extract_all(
                        batches, pod5, table, dataclasses.replace(spec, refine=mode)
                    )
                    key = (path, mode)
                    best[key] = min(best.get(key, np.inf), seconds)
            finally:
                module.fit_levels, module.assemble_windows, module.choose_maps = batched
    share = native_share(batches, pod5, table, dataclasses.replace(spec, refine="off"))
    rate = {key: extracted / seconds for key, seconds in best.items()}
    old_checked = rate[("per-read", "checked")]
    table_rows = [
        (f"extraction reads/s per worker, {path} path, refine {mode}",
         f"{rate[(path, mode)]:.0f}", "")
        for path in ("per-read", "batched")
        for mode in ("off", "checked", "always")
    ]  # fmt: skip
    off_ratio = rate[("batched", "off")] / old_checked
    checked_ratio = rate[("batched", "checked")] / old_checked
    table_rows += [
        ("refine off (batched) / old checked", f"{off_ratio:.2f}x",
         f">= 2.5x ({'meets' if off_ratio >= 2.5 else 'MISSES'})"),
        ("batched checked / old checked", f"{checked_ratio:.2f}x",
         f">= 1.3x ({'meets' if checked_ratio >= 1.3 else 'MISSES'})"),
        ("time outside native calls, batched off", f"{100 * (1 - share):.0f}%", ""),
    ]  # fmt: skip
    return table_rows


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
