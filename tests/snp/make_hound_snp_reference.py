"""Writes ``tests/snp/hound_snp_run/``: a small Borzoi-architecture Keras model and what
baskerville itself makes of it (its predictions, and ``hound_snp``'s ``scores.h5``).

A lab that scored variants with ``hound_snp`` holds a baskerville ``params.json`` and a Keras
``model.h5``; kennel must load that model and give the same scores. This script builds such a
model with baskerville's own ``SeqNN`` (the Borzoi trunk of ``params_pred.json``, scaled down:
conv_dna, res_tower, transformer_tower, two unet_conv, Cropping1D, conv_nac, a softplus head,
synchronised batch norm), fills every weight with seeded random values (Keras initialises the
attention output and the batch-norm statistics to constants, which would hide a misplaced
weight), saves it as ``SeqNN.save`` does, and then runs, in the same environment:

- the model's own predictions for a few sequences (``predictions.npz``);
- baskerville's ``hound_snp`` CLI on a seeded genome, VCF (SNVs, insertions, deletions, records
  at the chromosome ends, REF/ALT swapped records) and targets table (a stranded pair, a
  subset of the model's tracks, clip_soft, scale, sqrt sum_stat), once per option set in
  ``CASES`` (``scores/<case>/scores.h5``, and the command's targets and options in
  ``command.json``).

The test (``test_hound_snp_run.py``) needs neither TensorFlow nor this script. To remake
(Python 3.11, TensorFlow's CPU wheel, Keras 2 through tf-keras, baskerville from its source;
baskerville pins TensorFlow 2.15, whose wheels are not served, so it is put on PYTHONPATH):

    python3.11 -m venv /tmp/tfenv
    /tmp/tfenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py pandas pysam \\
        natsort intervaltree scipy pyfaidx tqdm joblib google-cloud-storage pybedtools
    git clone https://github.com/calico/baskerville /tmp/baskerville   # 2026-02-26 snapshot
    TF_USE_LEGACY_KERAS=1 PYTHONPATH=/tmp/baskerville/src \\
        /tmp/tfenv/bin/python tests/snp/make_hound_snp_reference.py tests/snp/hound_snp_run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pysam

SEED = 7
SEQ_LENGTH = 4096
CHROMOSOMES = {"chr1": 14_000, "chr2": 9_000}
MODEL_TRACKS = 6
# targets rows: (index into the model's tracks, identifier, strand_pair index, clip_soft,
# scale, sum_stat); index 4 is left out so the model's tracks are subset as build_slice does
TARGETS = (
    (0, "CAGE:a+", 1, 384, 0.5, "sum_sqrt"),
    (1, "CAGE:a-", 0, 384, 0.5, "sum_sqrt"),
    (2, "DNASE:b", 2, 32, 1.0, "sum"),
    (3, "RNA:c", 3, 384, 0.3, "sum_sqrt"),
    (5, "ATAC:d", 5, 8, 2.0, "sum"),
)
TRACK_STATS = "SUM,logSUM,logSED,sqrtSUM,SAX,D1,logD1,sqrtD1,D2,logD2,sqrtD2,logJS"
# (targets table, options). This hound_snp scores each variant in a writer thread whose errors
# are lost with its future, leaving the variant's row zero: JS fails whenever a variant has
# more than one prediction per allele (shifts, or an indel's compensating shift: its
# pseudocounts do not broadcast), and REF/ALT whenever the targets have strand pairs (the
# unsummed strands do not fit the summed dataset) or an indel's are not stitched (its two
# compensating predictions per shift do not fit). So JS is asked for only where predictions
# are single (stitched indels, no shifts), REF/ALT only with the unstranded table, stitched.
CASES = {
    "defaults": ("targets.txt", ["--stats", TRACK_STATS]),
    "rc_shifts_clusters": ("targets.txt", ["--stats", TRACK_STATS, "--rc", "--shifts", "-1,0,1",
                                           "-c", "0.1"]),
    "stitch_untransform_old": ("targets.txt", ["--stats", f"{TRACK_STATS},JS", "--rc",
                                               "--indel_stitch", "-u"]),
    "profiles_unstranded": ("targets_unstranded.txt", ["--stats", f"{TRACK_STATS},REF,ALT",
                                                       "--rc", "--shifts", "0,1",
                                                       "--indel_stitch"]),
}  # fmt: skip

PARAMS = {
    "model": {
        "seq_length": SEQ_LENGTH,
        "augment_rc": True,
        "augment_shift": 3,
        "activation": "gelu",
        "norm_type": "batch-sync",
        "bn_momentum": 0.9,
        "kernel_initializer": "lecun_normal",
        "l2_scale": 2.0e-8,
        "trunk": [
            {
                "name": "conv_dna",
                "filters": 16,
                "kernel_size": 15,
                "norm_type": None,
                "activation": "linear",
                "pool_size": 2,
            },
            {
                "name": "res_tower",
                "filters_init": 20,
                "filters_end": 40,
                "divisible_by": 4,
                "kernel_size": 5,
                "num_convs": 1,
                "pool_size": 2,
                "repeat": 6,
            },
            {
                "name": "transformer_tower",
                "key_size": 8,
                "heads": 4,
                "num_position_features": 8,
                "dropout": 0.2,
                "mha_l2_scale": 1.0e-8,
                "l2_scale": 1.0e-8,
                "kernel_initializer": "he_normal",
                "repeat": 2,
            },
            {"name": "unet_conv", "kernel_size": 3, "upsample_conv": True},
            {"name": "unet_conv", "kernel_size": 3, "upsample_conv": True},
            {"name": "Cropping1D", "cropping": 16},
            {"name": "conv_nac", "filters": 24, "dropout": 0.1},
        ],
        "head_human": {"name": "final", "units": MODEL_TRACKS, "activation": "softplus"},
    }
}


# the other options of the blocks kennel reads, each away from Borzoi's use (predictions only):
# layer norm, conv_block (dilated, residual, activation_end; separable with batch norm),
# res_tower of two convs (a Scale), a lone transformer without content-position bias or dense
# part and the default position features, a transformer trained at another length, a U-net
# without the upsampling dense, asymmetric cropping, a gelu head (Keras's exact gelu)
VARIETY_PARAMS = {
    "model": {
        "seq_length": 2048,
        "activation": "gelu",
        "norm_type": "layer",
        "trunk": [
            {"name": "conv_dna", "filters": 12, "kernel_size": 11, "pool_size": 2},
            {"name": "conv_block", "filters": 12, "kernel_size": 3, "dilation_rate": 2,
             "residual": True, "activation_end": "relu", "norm_type": "batch"},
            {"name": "conv_block", "filters": 16, "kernel_size": 3, "conv_type": "separable",
             "norm_type": "batch", "pool_size": 2},
            {"name": "res_tower", "filters_init": 16, "filters_mult": 1.25, "divisible_by": 4,
             "kernel_size": 3, "num_convs": 2, "repeat": 3, "pool_size": 2},
            {"name": "transformer", "heads": 2, "key_size": 8, "content_position_bias": False,
             "dense_expansion": 0},
            {"name": "transformer_tower", "heads": 2, "key_size": 8, "num_position_features": 4,
             "seqlen_train": 100, "repeat": 1},
            {"name": "unet_conv", "kernel_size": 3},
            {"name": "Cropping1D", "cropping": [2, 3]},
            {"name": "conv_nac", "filters": 12, "norm_type": "batch"},
        ],
        "head_human": {"name": "final", "units": 3, "activation": "gelu"},
    }
}  # fmt: skip

# bench/bench_hound.py's model: the same blocks, wider and deeper, 8x the window (256 positions
# at the transformer), 64 tracks
BENCH_PARAMS = json.loads(json.dumps(PARAMS))
BENCH_PARAMS["model"]["seq_length"] = 8 * SEQ_LENGTH
BENCH_PARAMS["model"]["trunk"][0].update(filters=96)
BENCH_PARAMS["model"]["trunk"][1].update(filters_init=96, filters_end=192, divisible_by=16)
BENCH_PARAMS["model"]["trunk"][2].update(key_size=32, num_position_features=32, repeat=4)
BENCH_PARAMS["model"]["trunk"][6].update(filters=192)
BENCH_PARAMS["model"]["head_human"]["units"] = 64


def random_weights(model, rng: np.random.Generator) -> None:
    """Every weight random; kernels a little above variance-preserving, so each position's
    sequence moves the output visibly (a wrong layer then shows as a large difference)."""
    for weight in model.weights:
        name, shape = weight.name, tuple(weight.shape)
        if "moving_variance" in name or "gamma" in name:
            value = rng.uniform(0.6, 1.4, shape)
        elif "moving_mean" in name or "beta" in name or "bias" in name:
            value = rng.normal(0.0, 0.1, shape)
        else:
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            value = rng.normal(0.0, 1.7 / np.sqrt(max(fan_in, 1)), shape)
        weight.assign(value.astype("float32"))


def write_genome(directory: Path, rng: np.random.Generator) -> dict[str, str]:
    sequences = {}
    with open(directory / "genome.fa", "w") as out:
        for name, length in CHROMOSOMES.items():
            sequence = "".join(rng.choice(list("ACGT"), length))
            sequences[name] = sequence
            out.write(f">{name}\n")
            for start in range(0, length, 60):
                out.write(sequence[start : start + 60] + "\n")
    pysam.faidx(str(directory / "genome.fa"))
    return sequences


def write_vcf(
    directory: Path, genome: dict[str, str], rng: np.random.Generator, per_chromosome: int = 22
) -> None:
    """Sorted records: SNVs, 1-3 bp insertions and deletions, records 1 bp from each end,
    close pairs (for clusters), and SNVs written with REF and ALT swapped (hound_snp flips
    them back to the genome's allele)."""
    records = []
    for chrom, sequence in genome.items():
        positions = sorted(
            {1, 3, len(sequence) - 1, len(sequence)}
            | {int(p) for p in rng.integers(20, len(sequence) - 20, per_chromosome)}
            | {2_000, 2_004, 2_010}
        )
        for number, pos in enumerate(positions):
            ref = sequence[pos - 1]
            kind = rng.choice(["snv", "snv", "snv", "ins", "del"])
            if pos > len(sequence) - 5 or pos < 3:
                kind = "snv"
            if kind == "snv":
                alt = rng.choice([b for b in "ACGT" if b != ref])
                if number % 7 == 3:  # swapped: the genome holds the ALT
                    ref, alt = alt, ref
            elif kind == "ins":
                alt = ref + "".join(rng.choice(list("ACGT"), int(rng.integers(1, 4))))
            else:
                ref = sequence[pos - 1 : pos + int(rng.integers(1, 4))]
                alt = sequence[pos - 1]
            records.append(f"{chrom}\t{pos}\t{chrom}_{pos}_{kind}\t{ref}\t{alt}\t.\t.\t.")
    header = ["##fileformat=VCFv4.2"]
    header += [f"##contig=<ID={c},length={n}>" for c, n in CHROMOSOMES.items()]
    header.append("#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO")
    (directory / "variants.vcf").write_text("\n".join(header + records) + "\n")


def write_targets(directory: Path) -> None:
    """``targets.txt``, and ``targets_unstranded.txt``: the same without strand pairs."""
    for name, stranded in (("targets.txt", True), ("targets_unstranded.txt", False)):
        pair_column = "\tstrand_pair" if stranded else ""
        lines = [f"\tidentifier\tfile\tclip\tclip_soft\tscale\tsum_stat{pair_column}\tdescription"]
        for index, identifier, pair, clip_soft, scale, sum_stat in TARGETS:
            pair_cell = f"\t{pair}" if stranded else ""
            lines.append(
                f"{index}\t{identifier}\t/none/{index}.w5\t768\t{clip_soft}\t{scale}"
                f"\t{sum_stat}{pair_cell}\t{identifier.split(':')[0]} track {index}"
            )
        (directory / name).write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--bench",
        type=int,
        metavar="VARIANTS",
        help="bench/bench_hound.py's inputs instead: a larger model, ~VARIANTS records, "
        "no predictions and no hound_snp runs",
    )
    args = parser.parse_args()
    import tensorflow as tf
    from baskerville import seqnn

    rng = np.random.default_rng(SEED)
    tf.keras.utils.set_random_seed(SEED)
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    (out / "scores").mkdir(parents=True)
    params = BENCH_PARAMS if args.bench else PARAMS
    (out / "params.json").write_text(json.dumps(params, indent=2) + "\n")

    model = seqnn.SeqNN(dict(params["model"], verbose=False))
    random_weights(model.model, rng)
    model.save(str(out / "model.h5"))
    if args.bench:
        write_vcf(out, write_genome(out, rng), rng, per_chromosome=args.bench // 2)
        write_targets(out)
        print(f"wrote {out}")
        return

    # the model's own outputs (inference mode: augmentation layers pass through)
    bases = rng.integers(0, 4, (3, SEQ_LENGTH))
    one_hot = np.eye(4, dtype="float32")[bases]
    one_hot[1, 100:140] = 0  # a run of N
    predictions = model.model(one_hot, training=False).numpy()
    np.savez_compressed(out / "predictions.npz", one_hot=one_hot, predictions=predictions)

    genome = write_genome(out, rng)
    write_vcf(out, genome, rng)
    write_targets(out)

    environment = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    for case, (targets, options) in CASES.items():
        case_dir = out / "scores" / case
        command = [
            sys.executable, "-m", "baskerville.scripts.hound_snp",
            "-f", str(out / "genome.fa"), "-t", str(out / targets), "-o", str(case_dir), *options,
            str(out / "params.json"), str(out / "model.h5"), str(out / "variants.vcf"),
        ]  # fmt: skip
        subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL)
        (case_dir / "command.json").write_text(json.dumps([targets, *options]) + "\n")

    # its own generator, so the files above stay as they were before it was added
    rng = np.random.default_rng(SEED + 1)
    (out / "variety.params.json").write_text(json.dumps(VARIETY_PARAMS, indent=2) + "\n")
    variety = seqnn.SeqNN(dict(VARIETY_PARAMS["model"], verbose=False))
    random_weights(variety.model, rng)
    variety.save(str(out / "variety.h5"))
    one_hot = np.eye(4, dtype="float32")[rng.integers(0, 4, (2, 2048))]
    predictions = variety.model(one_hot, training=False).numpy()
    np.savez_compressed(out / "variety_predictions.npz", one_hot=one_hot, predictions=predictions)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
