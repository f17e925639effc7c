"""``kennel tag``: a shard's model outputs (from ``kennel classify --outputs``) → tagged BAM."""

from pathlib import Path

from kennel.models.leech_defaults import AGGREGATIONS


def add_tag_arguments(parser) -> None:
    """The options that decide the tags, not the model's outputs (``kennel classify`` takes
    them too, when it tags in the same process)."""
    parser.add_argument("--min-confidence", type=int, default=0, help="0-255; below: 'unc'")
    parser.add_argument("--min-margin", type=int, default=0, help="0-255; below: 'unc'")
    parser.add_argument("--raw-tags", action="store_true", help="float tags instead of uint8")
    leech = parser.add_argument_group("leech bundles' tags (leech predict's options)")
    leech.add_argument(
        "--abstain-on-junction-indel", action="store_true",
        help="apply --min-margin only where the CCA junction is disrupted (multiclass)",
    )  # fmt: skip
    leech.add_argument(
        "--aggregation", choices=AGGREGATIONS, default="naive",
        help="how a pairwise bundle's votes make the call: summed, weighted by |2p-1|, or "
        "summed again among the 5 best classes",
    )  # fmt: skip
    leech.add_argument(
        "--copy-tags", default="",
        help="comma-separated input tags copied into a multiclass model's per-read table "
        "(leech predict's TSV columns tag_XX)",
    )  # fmt: skip


def tag_options(args) -> dict:
    """The tag options of ``args`` as ClassifySettings fields."""
    return {
        "min_confidence": args.min_confidence,
        "min_margin": args.min_margin,
        "raw_tags": args.raw_tags,
        "abstain_on_junction_indel": args.abstain_on_junction_indel,
        "aggregation": args.aggregation,
        "copy_tags": tuple(tag.strip() for tag in args.copy_tags.split(",") if tag.strip()),
    }


def add_tagged_outputs(parser, required: bool) -> None:
    parser.add_argument("--output", type=Path, required=required, help="tagged BAM to write")
    parser.add_argument("--predictions", type=Path, required=required, help="per-read TSV to write")
    parser.add_argument("--stats", type=Path, required=required, help="run-stats JSON to write")


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="the shard's BAM")
    parser.add_argument(
        "--outputs", type=Path, required=True, help="the shard's model outputs (kennel classify)"
    )
    parser.add_argument(
        "--bundle", type=Path, required=True, help="the bundle the outputs were scored with"
    )
    add_tagged_outputs(parser, required=True)
    parser.add_argument("--threads", type=int, default=1, help="CPUs of the job")
    add_tag_arguments(parser)


def run(args):
    from kennel.trna.model_job import ClassifySettings
    from kennel.trna.tag import tag_shard
    from kennel.trna.threads import apply_plan, plan_job

    plan = apply_plan(plan_job("tag", args.threads), "tag", args.threads)
    settings = ClassifySettings(**tag_options(args), bam_threads=plan.bam_threads)
    tag_shard(
        args.bam, args.outputs, args.bundle, args.output, args.predictions, args.stats, settings
    )
