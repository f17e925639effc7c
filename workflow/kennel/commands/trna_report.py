"""``kennel trna-report``: cross-sample class table and the report's plots."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--classes", type=Path, nargs="+", required=True, help="class tables")
    parser.add_argument("--distributions", type=Path, nargs="+", required=True, help="histograms")
    parser.add_argument("--table", type=Path, required=True, help="cross-sample TSV to write")
    parser.add_argument("--composition", type=Path, required=True, help="PNG: class composition")
    parser.add_argument("--confidence", type=Path, required=True, help="PNG: confidence")
    parser.add_argument("--charging", type=Path, required=True, help="PNG: charging per class")


def run(args):
    from kennel.trna.summary import trna_report

    trna_report(
        args.classes,
        args.distributions,
        args.table,
        args.composition,
        args.confidence,
        args.charging,
    )
