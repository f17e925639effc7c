"""``kennel slice-vcf``: split a VCF into slices at cluster boundaries."""

from pathlib import Path

from kennel.commands.score_snps import add_params_argument
from kennel.snp.vcf import ALT_MODES


def configure(parser):
    parser.add_argument("--vcf", type=Path, required=True, help="variants (sorted VCF)")
    parser.add_argument(
        "--model",
        type=Path,
        nargs="+",
        required=True,
        help="the scoring model(s) (the first decides seq_len; replicates share it)",
    )
    add_params_argument(parser)
    parser.add_argument("--seq-len", type=int, default=0, help="as score-snps (0: the model's)")
    parser.add_argument("--cluster-pct", type=float, default=0.1, help="as score-snps")
    parser.add_argument("--alts", choices=ALT_MODES, default="all", help="as score-snps")
    parser.add_argument(
        "--out", type=Path, nargs="+", required=True, help="slice VCFs to write, in order"
    )


def run(args):
    from kennel.snp.model import model_seq_len
    from kennel.snp.slices import slice_vcf

    seq_len = model_seq_len(args.model[0], args.seq_len or None, args.params)
    counts = slice_vcf(args.vcf, args.out, seq_len, args.cluster_pct, args.alts)
    print(f"{args.vcf}: {sum(counts)} variants in {len(counts)} slices: {counts}")
