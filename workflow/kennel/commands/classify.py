"""``kennel classify``: a shard's features (or, fused, its POD5) → model outputs (GPU job),
or, with ``--output``, the tagged BAM too."""

from pathlib import Path

from kennel.commands.extract import add_leech_predict_arguments, add_spec_arguments
from kennel.commands.tag import add_tag_arguments, add_tagged_outputs, tag_options


def configure(parser):
    parser.add_argument("--bam", type=Path, required=True, help="the shard's BAM")
    parser.add_argument("--bundle", type=Path, required=True, help="classifier bundle (.pt)")
    parser.add_argument("--features", type=Path, help="the shard's features HDF5 (decoupled)")
    fused = parser.add_argument_group("fused mode (extract inside this job, no --features)")
    fused.add_argument("--pod5", type=Path, nargs="+", help="the shard's POD5")
    fused.add_argument("--reference", type=Path, help="reference FASTA")
    fused.add_argument("--kmer-table", type=Path, help="kmer<TAB>level table")
    add_spec_arguments(fused)
    parser.add_argument(
        "--outputs", type=Path,
        help="the model outputs to write for `kennel tag` (else give --output, --predictions "
        "and --stats, and this job tags the BAM too)",
    )  # fmt: skip
    add_tagged_outputs(parser, required=False)
    parser.add_argument("--threads", type=int, default=1, help="CPUs of the job")
    parser.add_argument("--batch-size", type=int, default=1024, help="reads per device batch")
    parser.add_argument(
        "--device", choices=("auto", "cuda", "cpu"), default="auto",
        help="auto: CUDA when present, else the CPU",
    )  # fmt: skip
    parser.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto",
        help="torch.compile; auto: above --compile-threshold or with --inductor-cache",
    )  # fmt: skip
    parser.add_argument(
        "--compile-threshold", type=int, default=2_000_000, help="reads above which auto compiles"
    )
    parser.add_argument("--inductor-cache", help="persistent torch.compile cache directory")
    parser.add_argument("--in-flight", type=int, default=3, help="batches queued on the device")
    add_tag_arguments(parser)
    parser.add_argument(
        "--pair", help="score with this one binary network of a pairwise bundle (MP/ML tags)"
    )
    add_leech_predict_arguments(parser)


def run(args):
    from kennel.gpu_slots import bind_gpu

    if args.device != "cpu":
        bind_gpu()  # before torch initialises CUDA: one device per job unless a scheduler chose

    from kennel.commands.extract import leech_predict_options_from, spec_from_arguments
    from kennel.errors import KennelError
    from kennel.feed import resolve_device
    from kennel.trna.classify import ClassifySettings, FusedExtraction, classify_shard, score_shard
    from kennel.trna.threads import apply_plan, plan_job

    job = "classify-fused" if args.features is None else "classify"
    on_cpu = resolve_device(args.device).type == "cpu"
    plan = apply_plan(plan_job(job, args.threads, on_cpu=on_cpu), job, args.threads)
    fused = None
    if args.features is None:
        if not (args.pod5 and args.reference and args.kmer_table):
            raise KennelError(
                "classify: without --features, give --pod5, --reference, --kmer-table"
            )
        fused = FusedExtraction(
            args.pod5, args.reference, args.kmer_table, args.threads, spec_from_arguments(args)
        )
    settings = ClassifySettings(
        batch_size=args.batch_size,
        device=args.device,
        compile=args.compile,
        compile_threshold=args.compile_threshold,
        inductor_cache=args.inductor_cache,
        in_flight=args.in_flight,
        pair=args.pair,
        **tag_options(args),
        leech_predict=leech_predict_options_from(args),
        bam_threads=plan.bam_threads,
    )
    tagged = (args.output, args.predictions, args.stats)
    if any(tagged) if args.outputs is not None else not all(tagged):
        raise KennelError(
            "classify: give either --outputs (tagged by `kennel tag`) or all of --output, "
            "--predictions and --stats"
        )
    defaults = ClassifySettings()
    ignored = [
        name for name, value in tag_options(args).items() if value != getattr(defaults, name)
    ]
    if args.outputs is not None and ignored:  # the tag job decides them; here they would vanish
        options = ", ".join(f"--{name.replace('_', '-')}" for name in ignored)
        raise KennelError(f"classify: {options}: give tag options to `kennel tag` with --outputs")
    source = {"features": args.features, "fused": fused}
    if args.outputs is not None:
        score_shard(args.bam, args.bundle, args.outputs, settings, **source)
    else:
        classify_shard(args.bam, args.bundle, *tagged, settings, **source)
