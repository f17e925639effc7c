"""Flashzoi vs Borzoi in kennel: one forward of each at full size, side by side.

Flashzoi swaps Borzoi's relative-position attention (logits and positional terms for every
pair of the 4,096 transformer positions, materialised) for rotary embeddings through
``scaled_dot_product_attention``; borzoi-pytorch reports up to 3x on a GPU with flash_attn.
kennel runs Flashzoi without flash_attn: this measures what that gives where kennel runs it,
on the CPU here (random weights at borzoi-pytorch's default sizes; both networks are the same
but for the attention). Alternating, best of ``--rounds``.

    python bench/bench_flashzoi.py [--seq-len 524288] [--rounds 2]
"""

from __future__ import annotations

import argparse
import time

import torch

GOAL = 1.0  # Flashzoi's time over Borzoi's: below 1 where kennel runs it


def rows(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=524_288)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        from borzoi_pytorch import Borzoi
        from borzoi_pytorch.config_borzoi import BorzoiConfig
    except ImportError:
        return [("Flashzoi / Borzoi forward", "not run", "needs kennel[borzoi]")]
    from kennel.snp.flashzoi import rotary
    from table import under

    torch.manual_seed(0)
    bins = args.seq_len // 32 * 3 // 8  # the centre 6,144 of 16,384 bins at full length
    networks = {
        "Borzoi": Borzoi(BorzoiConfig(bins_to_return=bins)).eval(),
        "Flashzoi": rotary(Borzoi)(BorzoiConfig(flashed=True, bins_to_return=bins)).eval(),
    }
    one_hot = torch.zeros(1, 4, args.seq_len)
    one_hot[0, torch.randint(0, 4, (args.seq_len,)), torch.arange(args.seq_len)] = 1
    best = dict.fromkeys(networks, float("inf"))
    with torch.no_grad():
        for _ in range(args.rounds):
            for name, network in networks.items():
                began = time.perf_counter()
                network(one_hot)
                best[name] = min(best[name], time.perf_counter() - began)
    ratio = best["Flashzoi"] / best["Borzoi"]
    where = f"CPU, {torch.get_num_threads()} threads, {args.seq_len:,} bp, float32"
    return [
        (f"Borzoi forward s ({where})", f"{best['Borzoi']:.1f}", ""),
        ("Flashzoi forward s (kennel's attention, no flash_attn)", f"{best['Flashzoi']:.1f}", ""),
        ("Flashzoi time / Borzoi time", f"{ratio:.2f}x",
         under(ratio, GOAL)),
    ]  # fmt: skip


def main() -> None:
    from table import print_table

    print_table(rows())


if __name__ == "__main__":
    main()
