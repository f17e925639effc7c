"""``kennel leech-table``: a sample's per-shard tables → leech predict's TSV (multiclass)."""

from pathlib import Path


def configure(parser):
    parser.add_argument(
        "--tables", type=Path, nargs="+", required=True,
        help="the classify jobs' per-read tables, in shard order",
    )  # fmt: skip
    parser.add_argument(
        "--bam", type=Path, required=True, help="the sample's merged BAM (the rows' order)"
    )
    parser.add_argument("--bundle", default="the bundle", help="the model, named in errors")
    parser.add_argument("--threads", type=int, default=1, help="BGZF decompression threads")
    parser.add_argument("--output", type=Path, required=True, help="TSV to write (.gz: gzipped)")


def run(args):
    import logging

    from kennel.trna.leech_table import merge_tables

    rows = merge_tables(args.tables, args.bam, args.output, args.bundle, args.threads)
    logging.getLogger("kennel.leech_table").info("%s: %d reads", args.output, rows)
