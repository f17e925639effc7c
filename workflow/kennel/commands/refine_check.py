"""``kennel refine-check``: each refine mode on a sample of reads: time, maps kept, dwell."""

from pathlib import Path

from kennel.commands.extract import add_spec_arguments


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="aligned BAM (dorado mv/ts/ns)")
    parser.add_argument(
        "--pod5", type=Path, nargs="+", required=True, help="POD5 files or directories of them"
    )
    parser.add_argument("--reference", type=Path, required=True, help="tRNA reference FASTA")
    parser.add_argument("--kmer-table", type=Path, required=True, help="k-mer level table")
    parser.add_argument("--reads", type=int, default=500, help="reads to sample")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sample")
    parser.add_argument("--out", type=Path, help="also write the table here (TSV)")
    add_spec_arguments(parser)


def run(args):
    from kennel.commands.extract import spec_from_arguments
    from kennel.io.atomic import atomic_output
    from kennel.trna.refine_check import HEADER, refine_check

    results = refine_check(
        args.bam, args.pod5, args.reference, args.kmer_table, spec_from_arguments(args),
        n_reads=args.reads, seed=args.seed,
    )  # fmt: skip
    text = "\n".join([HEADER, *(result.line() for result in results)]) + "\n"
    print(text, end="")
    if args.out is not None:
        with atomic_output(args.out) as temporary:
            temporary.write_text(text)
