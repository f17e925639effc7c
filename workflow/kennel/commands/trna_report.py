"""``kennel trna-report``: cross-sample class table and the report's plots."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--classes", type=Path, nargs="+", required=True, help="class tables")
    parser.add_argument(
        "--distributions", type=Path, nargs="+", required=True, help="distribution tables"
    )
    parser.add_argument(
        "--counts", type=Path, nargs="+", required=True, help="records-by-fate tables"
    )
    parser.add_argument("--table", type=Path, required=True, help="cross-sample TSV to write")
    parser.add_argument("--composition", type=Path, required=True, help="PNG: class composition")
    parser.add_argument("--fates", type=Path, required=True, help="PNG: records by fate")
    parser.add_argument(
        "--confidence", type=Path, required=True, help="PNG: confidence and margin tails"
    )
    parser.add_argument("--charging", type=Path, required=True, help="PNG: charging per class")
    parser.add_argument(
        "--min-confidence", type=int, default=0, help="threshold drawn on the confidence panel"
    )
    parser.add_argument(
        "--min-margin", type=int, default=0, help="threshold drawn on the margin panel"
    )
    parser.add_argument(
        "--bundle", type=Path, help="the leech model the samples were scored with: a binary "
        "model's class names label its probability plot",
    )  # fmt: skip
    parser.add_argument("--pair", help="the pair of a pairwise bundle it was run as")


def run(args):
    from kennel.trna.report import trna_report

    trna_report(
        args.classes,
        args.distributions,
        args.counts,
        args.table,
        args.composition,
        args.fates,
        args.confidence,
        args.charging,
        min_confidence=args.min_confidence,
        min_margin=args.min_margin,
        binary_classes=(lambda: _class_names(args.bundle, args.pair)) if args.bundle else None,
    )


def _class_names(bundle: Path, pair: str | None) -> tuple[str, ...]:
    """The model's class names; generic ones where the bundle can no longer be read (moved
    since the run): they only label a plot, which must not fail the report."""
    import logging

    from kennel.errors import KennelError
    from kennel.models.leech import load_leech_model

    try:
        return load_leech_model(bundle, pair=pair).class_names
    except (KennelError, OSError) as error:
        logging.getLogger("kennel.trna_report").warning("class names: %s", error)
        return ("label 0", "label 1")
