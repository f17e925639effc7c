"""``kennel merge-scores``: slice ``scores.h5`` files → one per job, plus its report."""

from pathlib import Path


def configure(parser):
    parser.add_argument("slices", type=Path, nargs="+", help="slice scores.h5, in VCF order")
    parser.add_argument("--out", type=Path, required=True, help="merged scores.h5 to write")
    parser.add_argument("--plot", type=Path, help="PNG of the per-stat score distributions")
    parser.add_argument("--table", type=Path, help="HTML table of the top variants")
    parser.add_argument("--top", type=int, default=20, help="rows of the top-variants table")


def run(args):
    from kennel.snp.merge import merge_scores

    merged = merge_scores(args.slices, args.out, args.plot, args.table, args.top)
    print(f"{args.out}: {len(args.slices)} slice(s) merged, {merged}")
