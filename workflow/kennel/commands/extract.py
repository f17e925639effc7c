"""``kennel extract``: a shard's reads → features HDF5 (CPU job; feeds the GPU job)."""

from pathlib import Path


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="the shard's BAM")
    parser.add_argument("--pod5", type=Path, nargs="+", required=True, help="the shard's POD5")
    parser.add_argument("--reference", type=Path, required=True, help="reference FASTA")
    parser.add_argument("--kmer-table", type=Path, required=True, help="kmer<TAB>level table")
    parser.add_argument("--output", type=Path, required=True, help="features HDF5 to write")
    parser.add_argument("--threads", type=int, default=1, help="CPUs (worker processes)")
    parser.add_argument(
        "--bundle", type=Path,
        help="a leech bundle (or checkpoint directory): extract its model inputs, as its config "
        "defines them, instead of kennel's features (the options below are then unused)",
    )  # fmt: skip
    add_spec_arguments(parser)
    add_leech_predict_arguments(parser)


def add_leech_predict_arguments(parser):
    """leech predict's input options for configs that do not record them, shared with
    ``kennel classify``; a config that records one refuses a different value."""
    group = parser.add_argument_group("leech bundles (leech predict's input options)")
    group.add_argument("--leech-motif", help="leech predict --motif")
    group.add_argument("--leech-motif-offset", type=int, help="leech predict --motif-offset")
    group.add_argument(
        "--leech-base-justify", choices=("start", "center", "end"),
        help="leech predict --base-justify",
    )  # fmt: skip
    group.add_argument(
        "--leech-anchor", choices=("reference", "basecall"), help="leech predict --anchor"
    )
    group.add_argument(
        "--leech-backend", choices=("auto", "python"), default="auto",
        help="leech predict --backend of the run to reproduce (python: its Python extraction "
        "for every model, whose features differ from its Rust one's in the last bits)",
    )  # fmt: skip
    group.add_argument(
        "--leech-without-core", action="store_true",
        help="reproduce leech installed without leech-core (its Python extraction, level "
        "statistics in numpy)",
    )  # fmt: skip


def leech_predict_options_from(args):
    from kennel.trna.leech_config import LeechPredictOptions

    return LeechPredictOptions(
        args.leech_motif, args.leech_motif_offset, args.leech_base_justify, args.leech_anchor,
        backend=args.leech_backend, leech_core=not args.leech_without_core,
    )  # fmt: skip


def add_spec_arguments(parser):
    """Feature-spec options, shared with ``kennel classify --fused``."""
    from kennel.trna.features import JUSTIFICATIONS, REFINE_MODES, FeatureSpec

    default = FeatureSpec()
    parser.add_argument(
        "--upstream", type=int, default=default.upstream, help="window bases 5' of the anchor"
    )
    parser.add_argument(
        "--downstream", type=int, default=default.downstream, help="window bases 3' of it"
    )
    parser.add_argument(
        "--chunk-length", type=int, default=default.chunk_length, help="signal chunk samples"
    )
    parser.add_argument(
        "--justify", choices=JUSTIFICATIONS, default=default.justify, help="chunk placement"
    )
    parser.add_argument("--motif", default=default.motif, help="anchor motif (reference)")
    parser.add_argument(
        "--motif-anchor", type=int, default=default.motif_anchor, help="anchor index in the motif"
    )
    parser.add_argument(
        "--refine",
        choices=REFINE_MODES,
        default=default.refine,
        help="base boundaries: the move table's (off), refined where that fits better "
        "(checked), or refined (always); see kennel refine-check",
    )
    parser.add_argument(
        "--dwell-weight", type=float, help="refine_signal_map dwell penalty (default: preset)"
    )
    parser.add_argument(
        "--dwell-target",
        type=float,
        help="dwell (samples) below which the penalty bites (default: preset, the read's median)",
    )


def spec_from_arguments(args):
    from kennel.trna.extract import spec_for

    return spec_for(
        args.kmer_table,
        upstream=args.upstream,
        downstream=args.downstream,
        chunk_length=args.chunk_length,
        justify=args.justify,
        motif=args.motif,
        motif_anchor=args.motif_anchor,
        dwell_weight=args.dwell_weight,
        dwell_target=args.dwell_target,
        refine=args.refine,
    )


def run(args):
    import logging

    from kennel.trna.extract import extract_shard
    from kennel.trna.threads import apply_plan, plan_job

    apply_plan(plan_job("extract", args.threads), "extract", args.threads)

    if args.bundle is not None:
        from kennel.models.leech_files import bundle_kind

        if bundle_kind(args.bundle) == "leech":
            from kennel.trna.leech_extract import extract_leech_shard

            counts = extract_leech_shard(
                args.bam, args.pod5, args.reference, args.kmer_table, args.bundle, args.output,
                threads=args.threads, predict=leech_predict_options_from(args),
            )  # fmt: skip
            logging.getLogger("kennel.extract").info("chunks: %s", counts)
            return
    counts = extract_shard(
        args.bam,
        args.pod5,
        args.reference,
        args.kmer_table,
        args.output,
        threads=args.threads,
        spec=spec_from_arguments(args),
    )
    logging.getLogger("kennel.extract").info("reads: %s", counts)
