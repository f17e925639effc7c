"""``kennel score-snps``: one VCF slice → ``scores.h5`` with a sequence-to-coverage model."""

import argparse
from pathlib import Path

from kennel.snp.stat_names import DEFAULT_STATS, STATS
from kennel.snp.vcf import ALT_MODES


def _integers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_input_arguments(parser) -> None:
    parser.add_argument("--vcf", type=Path, required=True, help="variants (sorted VCF, .vcf[.gz])")
    parser.add_argument("--genome", type=Path, required=True, help="genome FASTA (with .fai)")
    parser.add_argument(
        "--model",
        type=Path,
        nargs="+",
        required=True,
        help="kennel bundle (.pt), borzoi-pytorch model dir, or Keras model (.h5, with --params); "
        "several: replicates, averaged",
    )
    add_params_argument(parser)
    parser.add_argument(
        "--targets", type=Path, help="baskerville targets table (default: Borzoi's own)"
    )


def add_params_argument(parser) -> None:
    parser.add_argument(
        "--params",
        type=Path,
        help="baskerville params.json of Keras .h5 models (hound_snp's params_file)",
    )


def add_score_arguments(parser) -> None:
    """The options of :class:`kennel.snp.scoring.ScoreOptions`, defaults included."""
    parser.add_argument("--seq-len", type=int, default=0, help="input length (0: the model's)")
    parser.add_argument(
        "--rc",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="average with the reverse complement",
    )
    parser.add_argument(
        "--shifts",
        type=_integers,
        default=(0,),
        help="comma-separated shifts to average, e.g. --shifts=-1,0,1",
    )
    parser.add_argument(
        "--cluster-pct",
        type=float,
        default=0.1,
        help="variants within this share of seq_len share a window",
    )
    parser.add_argument(
        "--stats",
        type=_names,
        default=DEFAULT_STATS,
        help=f"comma-separated; of {','.join(STATS)}",
    )
    parser.add_argument(
        "--untransform",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="undo the targets table's clip_soft and sum_stat sqrt before scoring, as hound_snp",
    )
    parser.add_argument(
        "--unscale",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="untransform also divides by the targets' scale (hound_snp does not)",
    )
    parser.add_argument(
        "--untransform-old",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="undo the earlier transforms instead (hound_snp -u; the published Borzoi models)",
    )
    parser.add_argument(
        "--indel-stitch",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="join an indel's plain and compensated shifts at its bin (hound_snp --indel_stitch)",
    )
    parser.add_argument(
        "--alts",
        choices=ALT_MODES,
        default="all",
        help="score every ALT of a record, or only the first (hound_snp)",
    )
    parser.add_argument(
        "--ref-mismatch",
        choices=("error", "skip", "flip"),
        default="error",
        help="a REF allele that differs from the genome: stop, skip the variant, or flip "
        "REF and ALT when the genome holds ALT (hound_snp)",
    )
    parser.add_argument(
        "--per-model",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="with several models, also write each model's scores (per_model/{stat})",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward")
    parser.add_argument(
        "--mix-dtype", choices=("float32", "float16", "bfloat16"), default="float32"
    )
    parser.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto",
        help="torch.compile; auto: above --compile-threshold or with --inductor-cache",
    )  # fmt: skip
    parser.add_argument(
        "--compile-threshold", type=int, default=1500, help="variants above which auto compiles"
    )
    parser.add_argument(
        "--device", choices=("auto", "cuda", "cpu"), default="auto",
        help="auto: CUDA when present, else the CPU",
    )  # fmt: skip
    parser.add_argument("--inductor-cache", default="", help="persistent torch.compile cache dir")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPUs of the job; torch gets all but one (0: torch's default)",
    )


def options_from(args):
    from kennel.snp.scoring import ScoreOptions
    from kennel.trna.threads import apply_plan, plan_job

    if args.threads > 0:  # one CPU stays with the prefetch thread
        apply_plan(plan_job("score-snps", args.threads), "score-snps", args.threads)
    return ScoreOptions(
        seq_len=args.seq_len,
        rc=args.rc,
        shifts=args.shifts,
        cluster_pct=args.cluster_pct,
        stats=args.stats,
        untransform=args.untransform,
        unscale=args.unscale,
        untransform_old=args.untransform_old,
        indel_stitch=args.indel_stitch,
        alts=args.alts,
        ref_mismatch=args.ref_mismatch,
        per_model=args.per_model,
        batch_size=args.batch_size,
        mix_dtype=args.mix_dtype,
        compile=args.compile,
        compile_threshold=args.compile_threshold,
        device=args.device,
        inductor_cache=args.inductor_cache or None,
    )


def configure(parser):
    add_input_arguments(parser)
    parser.add_argument("--out", type=Path, required=True, help="scores.h5 to write")
    add_score_arguments(parser)


def run(args):
    from kennel.gpu_slots import bind_gpu

    if args.device != "cpu":
        bind_gpu()  # before torch initialises CUDA: one device per job unless a scheduler chose

    from kennel.snp.scoring import score_snps

    report = score_snps(
        args.vcf,
        args.genome,
        args.model,
        args.targets,
        args.out,
        options_from(args),
        params=args.params,
    )
    print(
        f"{args.out}: {report.variants} variants ({report.skipped} skipped, "
        f"{report.unscored_alleles} ALTs with no sequence), "
        f"{report.clusters} clusters, {report.variants_per_second:.1f} variants/s, "
        f"{100 * report.outside_forward_share:.1f}% of the time outside the forward"
    )
