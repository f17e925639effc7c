"""``kennel summarize``: one sample's accounting, class counts and distributions."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--sample", required=True, help="sample id")
    parser.add_argument("--bam", type=Path, required=True, help="the sample's merged BAM")
    parser.add_argument("--counts", type=Path, required=True, help="the shard step's counts TSV")
    parser.add_argument("--stats", type=Path, nargs="+", required=True, help="classify stats")
    parser.add_argument("--counts-out", type=Path, required=True, help="records by fate")
    parser.add_argument("--classes-out", type=Path, required=True, help="class table")
    parser.add_argument("--distributions-out", type=Path, required=True, help="histograms")


def run(args):
    from kennel.trna.summary import summarize_sample

    summarize_sample(
        args.sample,
        args.bam,
        args.counts,
        args.stats,
        args.counts_out,
        args.classes_out,
        args.distributions_out,
    )
