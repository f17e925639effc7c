"""``kennel <verb>``: the one command line the Snakemake rules call.

This module only parses arguments. Each verb lives in a command module exposing
``configure(parser)`` and ``run(args)``; ``run`` calls one library function, which is what
the tests call too.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from kennel import __version__
from kennel.errors import KennelError

# verb -> (command module, one-line help). Command modules defer their heavy imports (torch,
# pysam, escapepod) to run(), so building the parser stays cheap.
VERBS: dict[str, tuple[str, str]] = {
    "simulate": ("kennel.commands.simulate", "write simulated inputs for either arm"),
    "bundle-info": ("kennel.commands.bundle_info", "print what a model bundle holds"),
    "sort-bam": ("kennel.commands.sort_bam", "coordinate-sort an aligned BAM (any order)"),
    "shard": ("kennel.commands.shard", "split a tRNA sample into signal-balanced shards"),
    "extract": ("kennel.commands.extract", "extract per-read features of a shard (CPU)"),
    "refine-check": (
        "kennel.commands.refine_check",
        "time and dwell of each refine mode on a sample's reads",
    ),
    "train": ("kennel.commands.train", "train a tRNA classifier bundle from features + truth"),
    "classify": ("kennel.commands.classify", "score a shard's reads with the model (GPU)"),
    "tag": ("kennel.commands.tag", "tag a shard's BAM from its model outputs (CPU)"),
    "merge-bam": ("kennel.commands.merge_bam", "merge a sample's shards into one indexed BAM"),
    "leech-table": (
        "kennel.commands.leech_table",
        "join a sample's per-shard tables as leech predict's TSV (multiclass leech models)",
    ),
    "summarize": ("kennel.commands.summarize", "summarize one tRNA sample's reads and calls"),
    "trna-report": ("kennel.commands.trna_report", "cross-sample tRNA table and report plots"),
    "slice-vcf": ("kennel.commands.slice_vcf", "split a VCF into slices at cluster boundaries"),
    "score-snps": ("kennel.commands.score_snps", "score one VCF slice's variants (GPU)"),
    "merge-scores": ("kennel.commands.merge_scores", "merge a job's slice scores, with report"),
    "snp-precision": ("kennel.commands.snp_precision", "mixed-precision vs float32 scores"),
}


DESCRIPTION = (
    "kennel: the command line the workflow's rules call, one verb per step. "
    "Run 'kennel VERB --help' for a verb's options."
)


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default, except where there is none or the help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        quiet = action.default is None or action.default is False  # 0 is a default to show
        if "default" in text or quiet or action.default == argparse.SUPPRESS:
            return text
        if not action.option_strings:
            return text
        if isinstance(action, argparse._StoreConstAction | argparse._VersionAction):
            return text
        return f"{text} (default: %(default)s)"


def _describe_subcommands(parser: argparse.ArgumentParser) -> None:
    """Give every sub-command without a description its one-line help as one, recursively
    (argparse leaves a sub-command's own --help without any)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                if not sub.description:
                    sub.description = choice.help
                _describe_subcommands(sub)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose sub-commands, nested ones included, show defaults too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kennel", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"kennel {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, (module_name, help_text) in VERBS.items():
        sub = verbs.add_parser(verb, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.configure(sub)
        sub.set_defaults(_module=module)
    _describe_subcommands(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        result = args._module.run(args)
    # OSError: disk full, read-only or missing directories; the OS names the file
    except (KennelError, OSError) as error:
        print(f"kennel {args.verb}: error: {error}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
