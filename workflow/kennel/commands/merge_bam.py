"""``kennel merge-bam``: classified shards + passthrough → one verified, indexed BAM."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--shards", type=Path, nargs="+", required=True, help="classified BAMs")
    parser.add_argument("--passthrough", type=Path, required=True, help="passthrough BAM")
    parser.add_argument("--counts", type=Path, required=True, help="the shard step's counts TSV")
    parser.add_argument("--stats", type=Path, nargs="+", required=True, help="classify stats")
    parser.add_argument("--output", type=Path, required=True, help="merged BAM to write")
    parser.add_argument("--threads", type=int, default=1, help="BGZF compression threads")


def run(args):
    import logging

    from kennel.trna.merge import merge_sample

    accounting = merge_sample(
        args.shards, args.passthrough, args.counts, args.stats, args.output, args.threads
    )
    logging.getLogger("kennel.merge").info("records: %s", accounting)
