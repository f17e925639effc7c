"""leech's names and defaults that both sides of a leech model need: the input extraction
(:mod:`kennel.trna.leech_spec`, which must not import torch: extraction workers are separate
processes) and the networks and their description (:mod:`kennel.models`); and what a model
config says about the inputs it was trained on (its feature rows and window, whether it refines
the signal map), read the same way on both sides."""

from __future__ import annotations

from collections.abc import Mapping

DWELL_CHANNELS = ("dwell", "dwell_log", "dwell_mean", "dwell_std", "dwell_ratio")
LEVEL_CHANNELS = (
    "level_mean",
    "level_median",
    "level_std",
    "level_range",
    "level_skew",
    "level_kurtosis",
)
KMER_CHANNELS = ("kmer_expected", "kmer_residual", "kmer_residual_abs")
FEATURE_CHANNELS = DWELL_CHANNELS + LEVEL_CHANNELS + KMER_CHANNELS
# leech's per-base feature rows for a config that lacks ``feature_channels``
# (its InferenceSpec.from_config)
DEFAULT_FEATURE_CHANNELS = DWELL_CHANNELS + LEVEL_CHANNELS[:4] + KMER_CHANNELS
# leech predict has no k-mer table option: it refines signal maps with the table its wheel ships,
# whatever a model config records (a differing kmer_table_sha256 only draws a warning). A config
# without the key (older models) therefore means this table: leech 0.16.0's
# leech/data/rna004_9mer_levels_v1.txt.gz
PACKAGED_KMER_TABLE = "rna004_9mer_levels_v1.txt.gz"
PACKAGED_KMER_TABLE_SHA256 = "f11fda3f7fed340b4a210f748d6f8cb660b4582fbc0a49d632e27d95f63abe19"
# leech predict --aggregation: how a whole pairwise bundle's pair votes become one call
AGGREGATIONS = ("naive", "weighted", "tournament")
# k-mer context of the per-sample sequence one-hot: leech's default, and the one context its
# Python path cuts whatever a config says (so the only one kennel takes)
SIGNAL_KMER_CONTEXT = (4, 4)
# leech's TCN family (models/configs/tcn_dwell*.toml, five graphs)
TCN_ARCHITECTURES = (
    "TCNDwell",
    "TCNDwellGN",
    "TCNDwellLN",
    "TCNDwellResidual",
    "TCNDwellResidualGN",
    "TCNDwellResidualLN",
    "TCNDwellSplitResidual",
    "TCNDwellSplitResidualLN",
    "TCNDwellResidualMotor",
    "TCNDwellResidualLNMotor",
    "TCNDwellResidualDwellAttn",
    "TCNDwellResidualLNDwellAttn",
)
# leech's ConvLSTM family with attention pooling (models/configs/conv_lstm_attn.toml)
CONV_LSTM_ATTENTION_ARCHITECTURES = (
    "ConvLSTMBaseAttn",
    "ConvLSTMBaseBNAttn",
    "ConvLSTMDwellAttn",
    "ConvLSTMDwellBNAttn",
    "ConvLSTMDwellGNAttn",
    "ConvLSTMDwellLNAttn",
)
# leech's hand-written classes kennel implements (models/transformer_dwell.py, resnet_dwell.py,
# conv_only.py, conv_lstm_remora.py): none has a dwell_margin attribute, so a wide one's config
# that records no feature window gets the k-mer window (leech widens it by the model's margin, 0)
HANDWRITTEN_WIDE_ARCHITECTURES = (
    "TransformerDwell",
    "TransformerDwellResidual",
    "ResNetDwell",
    "ConvOnly",
)
HANDWRITTEN_ARCHITECTURES = (
    *HANDWRITTEN_WIDE_ARCHITECTURES,
    "ConvLSTMRemora",
    "ConvLSTMRemoraBase",
    "SignalCNN",
)
# the architectures with wide_features = true: they read a model's whole feature window (a
# cross-attention takes any number of bases); the others get it cut to kmer_len bases from
# -kmer_len // 2 + dwell_offset (leech's inference/helpers.py), as their networks take kmer_len
# positions
WIDE_FEATURE_ARCHITECTURES = (
    *TCN_ARCHITECTURES,
    *CONV_LSTM_ATTENTION_ARCHITECTURES,
    *HANDWRITTEN_WIDE_ARCHITECTURES,
)
# and the narrow-feature ones kennel implements (wide_features = false): leech's ConvLSTM family
# without attention (models/configs/conv_lstm.toml), its Remora ConvLSTM with features and
# without, and its signal-only CNN
NARROW_FEATURE_ARCHITECTURES = (
    "ConvLSTMDwell",
    "ConvLSTMDwellBN",
    "ConvLSTMBase",
    "ConvLSTMBaseBN",
    "ConvLSTMRemora",
    "ConvLSTMRemoraBase",
    "SignalCNN",
)
SUPPORTED_ARCHITECTURES = (*NARROW_FEATURE_ARCHITECTURES, *WIDE_FEATURE_ARCHITECTURES)
# without a feature branch: leech records num_features 1 for them, whatever it extracts
FEATURELESS_ARCHITECTURES = (
    "ConvLSTMBase",
    "ConvLSTMBaseBN",
    "ConvLSTMBaseAttn",
    "ConvLSTMBaseBNAttn",
    "ConvLSTMRemoraBase",
    "SignalCNN",
)
# the two of them leech's bundle loader builds at the class's defaults whatever the config
# records (their constructors take **kwargs, which its config filter reads as taking nothing), so
# leech predict 0.16.0 loads only a bundle trained at those defaults (one signal channel, two
# outputs, the default size), none trained on prepared data's two channels, another class count
# or size; kennel builds them from the config, as leech's trainer built them
BUILT_AT_DEFAULTS_BY_LEECH = ("ConvLSTMRemoraBase", "SignalCNN")
# reads neither the sequence nor the features, though leech predict extracts the sequence too
SIGNAL_ONLY_ARCHITECTURES = ("SignalCNN",)
# a feature model's dwell margin when its config records none: a constructor default that leech
# predict also widens a wide model's unrecorded feature window by (leech/constants.py)
DEFAULT_DWELL_MARGIN = 15


def refines_signal_map(config: Mapping) -> bool:
    """Whether leech refines the signal map for this config: when it asks, or when the signal
    has a k-mer residual channel, which needs the expected levels refinement loads."""
    return (
        bool(config.get("refine_signal_map", True)) or int(config.get("signal_in_channels", 1)) > 1
    )


def config_feature_channels(config: Mapping) -> tuple[str, ...]:
    """The feature rows leech extracts for this config: those it lists (leech's twelve when it
    lists none), without the k-mer rows when it does not refine, since leech then loads no
    k-mer table (in training and in predict, though the config may still list them)."""
    channels = tuple(config.get("feature_channels") or DEFAULT_FEATURE_CHANNELS)
    if refines_signal_map(config):
        return channels
    return tuple(name for name in channels if name not in KMER_CHANNELS)


def recorded_feature_window(config: Mapping) -> tuple[int | None, int | None]:
    """The first and last base of the feature window a leech config records (None: not
    recorded), each end read through leech's fallback chain: ``feature_start``/``feature_end``,
    else the legacy ``feature_left``/``feature_right`` (bases from the focus base), else the
    older ``dwell_margin_left``/``dwell_margin_right`` (bases beyond the k-mer window's half)."""
    half = int(config.get("kmer_len", 9)) // 2

    def end(key: str, legacy: str, margin: str, sign: int) -> int | None:
        if config.get(key) is not None:
            return int(config[key])
        if config.get(legacy) is not None:
            return sign * int(config[legacy])
        if config.get(margin) is not None:
            return sign * (half + int(config[margin]))
        return None

    return (
        end("feature_start", "feature_left", "dwell_margin_left", -1),
        end("feature_end", "feature_right", "dwell_margin_right", 1),
    )


def config_feature_window(config: Mapping) -> tuple[int, int]:
    """The feature window a leech config gives (first and last base from the focus base), before
    a narrow architecture's cut to ``kmer_len``: the recorded ends, each missing one the k-mer
    window's (leech's resolve_feature_window); a wide-feature config recording neither is from
    before the window was recorded, and leech predict widens the k-mer window by the model's
    dwell margin (a constructor default, 15, unless recorded; 0 widens nothing; the hand-written
    networks have none)."""
    half = int(config.get("kmer_len", 9)) // 2
    start, end = recorded_feature_window(config)
    architecture = config.get("model_name")
    # leech widens by the network's dwell_margin attribute, which its hand-written ones lack
    widened = architecture in WIDE_FEATURE_ARCHITECTURES and architecture not in (
        HANDWRITTEN_WIDE_ARCHITECTURES
    )
    if widened and start is None and end is None:
        recorded = config.get("dwell_margin")
        margin = DEFAULT_DWELL_MARGIN if recorded is None else int(recorded)
        return -(half + margin), half + margin
    return (-half if start is None else int(start), half if end is None else int(end))
