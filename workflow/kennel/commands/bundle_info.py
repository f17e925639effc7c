"""``kennel bundle-info BUNDLE``: a kennel bundle, a leech bundle or a leech checkpoint directory
(which one is detected from the file, never configured)."""


def configure(parser):
    parser.add_argument(
        "bundle", help="model bundle (.pt): kennel or leech, or a leech checkpoint directory"
    )


def run(args):
    from kennel.models.leech import load_leech_model
    from kennel.models.leech_describe import describe_leech_model
    from kennel.models.leech_files import is_leech_bundle

    if is_leech_bundle(args.bundle):
        print(describe_leech_model(load_leech_model(args.bundle)))
        return

    from kennel.models.bundle import describe_bundle, load_bundle

    print(describe_bundle(load_bundle(args.bundle)))
