"""``kennel shard``: one sample → N signal-balanced shards + a passthrough BAM + counts."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="aligned BAM with move tables")
    parser.add_argument("--pod5", type=Path, nargs="+", required=True, help="the sample's POD5s")
    parser.add_argument("--reference", type=Path, required=True, help="reference FASTA")
    parser.add_argument("--shard-pod5", type=Path, nargs="+", required=True, help="shard POD5s")
    parser.add_argument("--shard-bam", type=Path, nargs="+", required=True, help="shard BAMs")
    parser.add_argument("--passthrough", type=Path, required=True, help="BAM of the rest")
    parser.add_argument("--counts", type=Path, required=True, help="TSV of records by fate")


def run(args):
    import logging

    from kennel.trna.shard import ShardOutputs, shard_sample

    fates = shard_sample(
        args.bam,
        args.pod5,
        args.reference,
        ShardOutputs(args.shard_pod5, args.shard_bam, args.passthrough, args.counts),
    )
    logging.getLogger("kennel.shard").info("records by fate: %s", fates)
