"""``kennel bundle-info BUNDLE``."""


def configure(parser):
    parser.add_argument("bundle", help="model bundle (.pt) to describe")


def run(args):
    from kennel.models.bundle import describe_bundle, load_bundle

    print(describe_bundle(load_bundle(args.bundle)))
