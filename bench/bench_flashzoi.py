"""Flashzoi vs Borzoi in kennel: one forward of each at full size, side by side.

Flashzoi swaps Borzoi's relative-position attention (logits and positional terms for every
pair of the 4,096 transformer positions, materialised) for rotary embeddings through
``scaled_dot_product_attention``; borzoi-pytorch reports up to 3x on a GPU with flash_attn.
kennel runs Flashzoi without flash_attn: this measures what that gives where kennel runs it,
on the CPU here (random weights at borzoi-pytorch's default sizes; both networks are the same
but for the attention). Alternating, best of ``--rounds``; then the memory one forward adds
(peak RSS over the RSS before it, batch 1), each network in a process of its own.

    python bench/bench_flashzoi.py [--seq-len 524288] [--rounds 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

GOAL = 1.0  # Flashzoi's time over Borzoi's: below 1 where kennel runs it


def networks(
    seq_len: int, device: str = "cpu", names: tuple[str, ...] = ("Borzoi", "Flashzoi")
) -> dict[str, torch.nn.Module] | None:
    """Borzoi and Flashzoi (or those of ``names``) at borzoi-pytorch's default sizes, random
    weights, for ``seq_len`` inputs; None without borzoi-pytorch."""
    try:
        from borzoi_pytorch import Borzoi
        from borzoi_pytorch.config_borzoi import BorzoiConfig
    except ImportError:
        return None
    from kennel.snp.flashzoi import rotary

    torch.manual_seed(0)
    bins = seq_len // 32 * 3 // 8  # the centre 6,144 of 16,384 bins at full length
    build = {
        "Borzoi": lambda: Borzoi(BorzoiConfig(bins_to_return=bins)),
        "Flashzoi": lambda: rotary(Borzoi)(BorzoiConfig(flashed=True, bins_to_return=bins)),
    }
    return {name: build[name]().eval().to(device) for name in names}


def _one_hot(seq_len: int) -> torch.Tensor:
    one_hot = torch.zeros(1, 4, seq_len)
    one_hot[0, torch.randint(0, 4, (seq_len,)), torch.arange(seq_len)] = 1
    return one_hot


def forward_memory_mib(name: str, seq_len: int) -> float:
    """MiB one CPU forward of ``name`` adds to its process's peak RSS (a process of its own:
    a peak is never given back)."""
    code = f"import bench_flashzoi as b; b._print_forward_memory({name!r}, {seq_len})"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return float(out.stdout.split()[-1])


def _print_forward_memory(name: str, seq_len: int) -> None:
    network = networks(seq_len, names=(name,))[name]
    one_hot = _one_hot(seq_len)
    # building the network peaked higher than a short forward may: start the peak afresh
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = _status_kib("VmRSS")
    with torch.no_grad():
        network(one_hot)
    print((_status_kib("VmHWM") - before) / 1024)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def forward_seconds(
    built: dict[str, torch.nn.Module], seq_len: int, rounds: int,
    mix_dtype: torch.dtype | None = None,
) -> dict[str, float]:  # fmt: skip
    """Best seconds of one forward of each network, alternating; under autocast to
    ``mix_dtype`` if given. On a GPU a first, untimed round picks the kernels."""
    device = next(iter(built.values())).conv_dna.conv_layer.weight.device
    one_hot = _one_hot(seq_len).to(device)
    cuda = device.type == "cuda"
    best = dict.fromkeys(built, float("inf"))
    autocast = torch.autocast(device.type, mix_dtype, enabled=mix_dtype is not None)
    with torch.no_grad(), autocast:
        for round_ in range(rounds + cuda):
            for name, network in built.items():
                if cuda:
                    torch.cuda.synchronize()
                began = time.perf_counter()
                network(one_hot)
                if cuda:
                    torch.cuda.synchronize()
                if round_ or not cuda:
                    best[name] = min(best[name], time.perf_counter() - began)
    return best


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=524_288)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    from table import under

    built = networks(args.seq_len)
    if built is None:
        return [("Flashzoi / Borzoi forward", "not run", "needs kennel[borzoi]")]
    best = forward_seconds(built, args.seq_len, args.rounds)
    del built
    memory = {name: forward_memory_mib(name, args.seq_len) for name in best}
    ratio = best["Flashzoi"] / best["Borzoi"]
    where = f"CPU, {torch.get_num_threads()} threads, {args.seq_len:,} bp, float32"
    return [
        (f"Borzoi forward s ({where})", f"{best['Borzoi']:.1f}", ""),
        ("Flashzoi forward s (kennel's attention, no flash_attn)", f"{best['Flashzoi']:.1f}", ""),
        ("Flashzoi time / Borzoi time", f"{ratio:.2f}x",
         under(ratio, GOAL)),
        ("Borzoi forward's added peak RSS, MiB (batch 1)", f"{memory['Borzoi']:.0f}", ""),
        ("Flashzoi forward's added peak RSS, MiB", f"{memory['Flashzoi']:.0f}", ""),
        ("Flashzoi memory / Borzoi memory", f"{memory['Flashzoi'] / memory['Borzoi']:.2f}x",
         under(memory["Flashzoi"] / memory["Borzoi"], GOAL)),
    ]  # fmt: skip


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
