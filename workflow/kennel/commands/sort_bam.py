"""``kennel sort-bam``: an aligned BAM in read order (dorado's) → a coordinate-sorted copy."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="aligned BAM, any order")
    parser.add_argument("--output", type=Path, required=True, help="coordinate-sorted BAM")
    parser.add_argument("--threads", type=int, default=1, help="samtools sort threads")
    parser.add_argument("--mem-mb", type=int, default=4000, help="memory of the job, in MB")


def run(args):
    import logging

    from kennel.io.bam import sort_alignments

    sort_alignments(args.bam, args.output, args.threads, args.mem_mb)
    logging.getLogger("kennel.sort").info("%s: coordinate-sorted into %s", args.bam, args.output)
