"""``kennel train``: a tRNA classifier bundle from features files and truth tables (CPU)."""

from pathlib import Path


def configure(parser):
    parser.add_argument(
        "--features", type=Path, nargs="+", required=True, help="features HDF5 file(s)"
    )
    parser.add_argument(
        "--truth", type=Path, nargs="+", required=True, help="read_id/label/charging TSV(s)"
    )
    parser.add_argument("--output", type=Path, required=True, help="model bundle (.pt) to write")
    parser.add_argument("--epochs", type=int, default=8, help="passes over the training reads")
    parser.add_argument("--seed", type=int, default=1, help="random seed (same seed, same weights)")
    parser.add_argument("--batch-size", type=int, default=64, help="reads per optimiser step")
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument(
        "--holdout-fraction", type=float, default=0.2, help="reads held out, per class"
    )
    parser.add_argument("--channels", type=int, default=48, help="signal branch width")
    parser.add_argument(
        "--no-charging-head", action="store_true", help="train the classifier without it"
    )
    parser.add_argument(
        "--window-offset",
        type=int,
        default=0,
        help="negative control: read only bases around anchor+K, no signal (e.g. 9 or -9)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (weights depend on it)"
    )


def run(args):
    from kennel.trna.train import metrics_line, train_bundle

    metrics = train_bundle(
        args.features,
        args.truth,
        args.output,
        epochs=args.epochs,
        seed=args.seed,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        holdout_fraction=args.holdout_fraction,
        hyperparameters={"channels": args.channels, "charging_head": not args.no_charging_head},
        window_offset=args.window_offset,
        threads=args.threads,
        command=_command_line(args),
    )
    print(f"{args.output}: {metrics_line(metrics)}")


def _command_line(args) -> str:
    """The command that regenerates the bundle (from the parsed arguments, defaults included)."""
    import shlex

    words = ["kennel", "train", "--features", *map(str, args.features)]
    words += ["--truth", *map(str, args.truth), "--output", str(args.output)]
    for option in ("epochs", "seed", "batch_size", "learning_rate", "holdout_fraction"):
        words += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    words += ["--channels", str(args.channels), "--window-offset", str(args.window_offset)]
    words += ["--threads", str(args.threads)]
    return shlex.join(words + (["--no-charging-head"] if args.no_charging_head else []))
