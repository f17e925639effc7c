"""``kennel snp-precision``: agreement of mixed-precision scores with float32 ones."""

from pathlib import Path

from kennel.commands.score_snps import add_input_arguments, add_score_arguments


def configure(parser):
    add_input_arguments(parser)
    add_score_arguments(parser)
    parser.set_defaults(mix_dtype="bfloat16")
    parser.add_argument(
        "--max-variants", type=int, default=1000, help="score the first N variants (0: all)"
    )
    parser.add_argument("--out", type=Path, help="also write the report here (TSV)")


def run(args):
    from kennel.commands.score_snps import options_from
    from kennel.io.atomic import atomic_output
    from kennel.snp.precision import check_precision

    options = options_from(args)
    report = check_precision(
        args.vcf,
        args.genome,
        args.model,
        args.targets,
        options,
        mix_dtype=args.mix_dtype,
        max_variants=args.max_variants or None,
        params=args.params,
    )
    text = "\n".join(report.lines()) + "\n"
    print(text, end="")
    if args.out is not None:
        with atomic_output(args.out) as temporary:
            temporary.write_text(text)
