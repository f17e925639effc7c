"""``kennel simulate trna|snp``: real-format inputs for the demo and the tests."""

from pathlib import Path


def configure(parser):
    arms = parser.add_subparsers(dest="arm", required=True, metavar="ARM")

    trna = arms.add_parser(
        "trna", help="POD5 + aligned BAM with move tables + reference + k-mer table"
    )
    trna.add_argument("--out-dir", type=Path, required=True, help="directory to write into")
    trna.add_argument(
        "--samples", default="demo", help="comma-separated sample names, one POD5/BAM pair each"
    )
    trna.add_argument("--reads", type=int, default=1000, help="primary reads per sample")
    trna.add_argument("--seed", type=int, default=1, help="random seed (same seed, same files)")
    trna.add_argument(
        "--reference", type=Path, help="real tRNA FASTA to draw molecules from (default: synthetic)"
    )
    trna.add_argument(
        "--kmer-table", type=Path, help="real kmer<TAB>level table (default: synthetic)"
    )
    trna.add_argument(
        "--k", type=int, help="k of the synthetic k-mer table (default 5; must match --kmer-table)"
    )
    trna.add_argument(
        "--classes", default="Ala,Gly,Leu,Phe", help="comma-separated class labels to plant"
    )
    trna.set_defaults(_run=_run_trna)

    snp = arms.add_parser("snp", help="genome FASTA + VCF + targets + a motif model bundle")
    snp.add_argument("--out-dir", type=Path, required=True, help="directory to write into")
    snp.add_argument("--seed", type=int, default=1, help="random seed (same seed, same files)")
    snp.add_argument("--chromosomes", type=int, default=3, help="number of chromosomes")
    snp.add_argument("--chromosome-length", type=int, default=50_000, help="bases per chromosome")
    snp.add_argument("--variants", type=int, default=300, help="number of VCF records")
    snp.add_argument("--seq-len", type=int, default=2048, help="model input length")
    snp.set_defaults(_run=_run_snp)


def run(args):
    return args._run(args)


def _run_trna(args):
    from kennel.sim.trna import TrnaSimulation, simulate_trna

    simulate_trna(
        args.out_dir,
        TrnaSimulation(
            samples=tuple(s for s in args.samples.split(",") if s),
            reads=args.reads,
            seed=args.seed,
            reference=args.reference,
            kmer_table=args.kmer_table,
            k=args.k,
            classes=tuple(c for c in args.classes.split(",") if c),
        ),
    )


def _run_snp(args):
    from kennel.sim.snp import simulate_snp

    simulate_snp(
        args.out_dir,
        seed=args.seed,
        n_chromosomes=args.chromosomes,
        chromosome_length=args.chromosome_length,
        n_variants=args.variants,
        seq_len=args.seq_len,
    )
