"""``kennel shard``: one sample → N signal-balanced shards + a passthrough BAM + counts."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="aligned BAM with move tables")
    parser.add_argument(
        "--pod5",
        type=Path,
        nargs="+",
        required=True,
        help="the sample's POD5 files or directories of them",
    )
    parser.add_argument(
        "--pod5-files", type=int,
        help="how many POD5 files --pod5 held when the workflow was planned: another count "
        "now (files added to a run still being written, or removed) is refused",
    )  # fmt: skip
    parser.add_argument("--reference", type=Path, required=True, help="reference FASTA")
    parser.add_argument("--shard-pod5", type=Path, nargs="+", required=True, help="shard POD5s")
    parser.add_argument("--shard-bam", type=Path, nargs="+", required=True, help="shard BAMs")
    parser.add_argument("--passthrough", type=Path, required=True, help="BAM of the rest")
    parser.add_argument("--counts", type=Path, required=True, help="TSV of records by fate")
    parser.add_argument(
        "--bundle", type=Path,
        help="the model the shards are for: a leech bundle (or checkpoint directory) selects "
        "exactly the records leech predict scores; a kennel bundle, or none, kennel's",
    )  # fmt: skip
    parser.add_argument(
        "--min-mapq", type=int, default=0, help="leech bundles: leech predict's --min-mapq"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="BGZF compression threads of the BAMs written"
    )


def run(args):
    import logging

    from kennel.io.bam import RecordSelection
    from kennel.trna.shard import ShardOutputs, shard_sample

    selection = RecordSelection()
    if args.bundle is not None:
        from kennel.models.leech_files import bundle_kind

        if bundle_kind(args.bundle) == "leech":
            selection = RecordSelection("leech", args.min_mapq)
    logging.getLogger("kennel.shard").info("record selection: %s", selection)
    fates = shard_sample(
        args.bam,
        args.pod5,
        args.reference,
        ShardOutputs(args.shard_pod5, args.shard_bam, args.passthrough, args.counts),
        selection,
        threads=args.threads,
        planned_pod5_files=args.pod5_files,
    )
    logging.getLogger("kennel.shard").info("records by fate: %s", fates)
