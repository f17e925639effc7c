"""LeechInputSpec: read from the bundle's config; any setting kennel does not reproduce refused."""

from __future__ import annotations

import pytest
from kennel.errors import KennelError
from kennel.models.leech_arch import feature_width
from kennel.trna.leech_config import LeechPredictOptions, load_leech_config
from kennel.trna.leech_spec import LeechInputSpec


def test_spec_of_the_tcndwell_bundle(leech_spec):
    assert leech_spec.signal_len == 400 and leech_spec.signal_context == (200, 200)
    assert leech_spec.signal_channels == 2
    assert leech_spec.seq_encoding == "signal_kmer"
    assert leech_spec.sequence_shape == (36, 400)
    assert (leech_spec.feature_start, leech_spec.feature_end) == (-5, 5)
    assert len(leech_spec.feature_channels) == 12
    assert (leech_spec.motif, leech_spec.motif_offset) == ("CCAGGC", 2)
    assert leech_spec.base_justify == "center" and leech_spec.require_query_mapping
    assert (leech_spec.refine_half_bandwidth, leech_spec.refine_scale_iters) == (5, 2)
    assert leech_spec.refine_kmer_centre == 4


def test_checkpoint_config_gives_the_same_spec(leech_dir, leech_spec, level_table):
    config = load_leech_config(leech_dir / "models" / "fx_tcndwell_checkpoint")
    assert LeechInputSpec.from_config(config, level_table.sha256) == leech_spec


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("seq_encoding", "kmer_embedding"),
        ("signal_kmer_context", [3, 3]),
        ("signal_in_channels", 3),
        ("anchor", "signal"),
        ("signal_norm", "robust"),
        ("reverse_signal", False),
        ("recover_softclip_signal", "yes"),
        ("signal_context_bases", [10, -1]),
        ("mask_seq_side", "3prime"),
        ("skip_motif_indels", "yes"),
        ("dwell_template_table", "templates.tsv"),  # named, but neither in the bundle nor beside it
        ("feature_channels", ["dwell", "level_entropy"]),
        ("num_features", 14),
        ("left_context", 100),
        ("base_justify", "middle"),
        ("motif", None),
        ("refine_kmer_center_idx", -3),
        ("is_remora", True),
    ],
)
def test_unsupported_settings_are_refused_naming_the_key(leech_config, key, value):
    config = {**leech_config, key: value}
    if key == "left_context":
        config["right_context"] = 100  # 200 samples where the model takes 400
    with pytest.raises(KennelError) as error:
        LeechInputSpec.from_config(config)
    message = str(error.value)
    assert f"'{key}'" in message
    assert "\n" not in message


def test_an_unrefined_model_reads_no_kmer_table(leech_config):
    """leech --no-refine-signal-map: no table is loaded, so no k-mer rows are extracted (the
    config still lists them) and no table is required or checked."""
    config = {**leech_config, "signal_in_channels": 1, "refine_signal_map": False}
    config["num_features"] = 9
    spec = LeechInputSpec.from_config(config, kmer_table_sha256="ab" * 32)
    assert not spec.refine_signal_map and spec.kmer_table_sha256 is None
    assert spec.feature_channels == tuple(leech_config["feature_channels"][:9])
    assert not set(spec.feature_channels) & {"kmer_expected", "kmer_residual", "kmer_residual_abs"}
    # two channels force refinement on, as in leech
    config.update(signal_in_channels=2, num_features=12)
    spec = LeechInputSpec.from_config(config)
    assert spec.signal_channels == 2 and spec.refine_signal_map and len(spec.feature_channels) == 12


def test_a_different_kmer_table_is_refused(leech_config):
    with pytest.raises(KennelError, match="'kmer_table_sha256'") as error:
        LeechInputSpec.from_config(leech_config, kmer_table_sha256="ab" * 32)
    assert "\n" not in str(error.value)


def test_a_config_without_a_table_needs_the_table_leech_ships(leech_config):
    """leech predict refines with the k-mer table of its wheel whatever the config says; a
    config without `kmer_table_sha256` (an older model) therefore takes that table only.
    shared/data's table is byte-identical to leech 0.16.0's (shared/leech/README.md)."""
    from kennel.io.kmers import file_sha256

    from tests.conftest import REAL_KMER_TABLE

    config = {key: value for key, value in leech_config.items() if key != "kmer_table_sha256"}
    leech_table = file_sha256(REAL_KMER_TABLE)
    assert LeechInputSpec.from_config(config, leech_table).kmer_table_sha256 == leech_table
    with pytest.raises(KennelError, match="'kmer_table_sha256'") as error:
        LeechInputSpec.from_config(config, kmer_table_sha256="ab" * 32)
    message = str(error.value)
    assert "records no table; leech predict uses its own rna004_9mer_levels_v1.txt.gz" in message
    assert f"{leech_table[:12]}…, the table given is abababababab…" in message


def test_predict_inputs_fill_what_the_config_does_not_record(leech_config):
    """leech predict's rule (inference/helpers.py, _check_config_consistency): a recorded value
    wins, a different given one is refused, an unrecorded one takes the given value."""
    recorded = LeechInputSpec.from_config(leech_config)
    older = {**leech_config, "motif": None}
    del older["motif_offset"], older["base_justify"], older["anchor"]
    with pytest.raises(KennelError, match="'motif': None: not recorded; .* trna.leech.motif"):
        LeechInputSpec.from_config(older)
    given = LeechPredictOptions(motif=recorded.motif, motif_offset=recorded.motif_offset)
    assert LeechInputSpec.from_config(given.resolve(older)) == recorded  # center: leech's default
    justified = LeechPredictOptions(
        motif="CCA", motif_offset=1, base_justify="end", anchor="basecall"
    )
    spec = LeechInputSpec.from_config(justified.resolve(older))
    assert (spec.motif, spec.motif_offset, spec.base_justify, spec.anchor) == (
        "CCA",
        1,
        "end",
        "basecall",
    )
    assert given.resolve(leech_config) == leech_config  # the same values as recorded: no change
    assert LeechPredictOptions().resolve(leech_config) == leech_config
    for conflict in (
        LeechPredictOptions(motif="CCA"),
        LeechPredictOptions(motif_offset=recorded.motif_offset + 1),
        LeechPredictOptions(base_justify="end"),
        LeechPredictOptions(anchor="basecall"),
    ):
        with pytest.raises(KennelError, match="conflicts with the model config's"):
            conflict.resolve(leech_config)
    # null where leech resolves the key against its option: leech's default
    nulls = {**leech_config, "motif_offset": None, "base_justify": None, "anchor": None}
    spec = LeechInputSpec.from_config(nulls)
    assert (spec.motif_offset, spec.base_justify, spec.anchor) == (0, "center", "reference")
    with pytest.raises(KennelError, match="'motif': '' is not supported"):
        LeechInputSpec.from_config({**leech_config, "motif": ""})


def test_a_feature_window_wider_than_kmer_len(leech_config):
    """leech's wide_features architectures (the TCN family, the ConvLSTM attention variants,
    the transformer and ResNet classes) read the whole window; the others (the ConvLSTM and
    Remora ones) get kmer_len bases from -kmer_len // 2 + dwell_offset (inference/helpers.py)."""
    wide = {**leech_config, "feature_start": -7, "feature_end": 7}  # kmer_len 11
    for name in ("TCNDwell", "ConvLSTMDwellAttn", "TransformerDwell", "ResNetDwell", "ConvOnly"):
        spec = LeechInputSpec.from_config({**wide, "model_name": name})
        assert (spec.feature_start, spec.feature_end) == (-7, 7)
    lstm = {**wide, "model_name": "ConvLSTMDwell"}
    for offset, window in ((0, (-5, 5)), (2, (-3, 7)), (-2, (-7, 3))):
        for name in ("ConvLSTMDwell", "ConvLSTMRemora"):
            spec = LeechInputSpec.from_config({**lstm, "model_name": name, "dwell_offset": offset})
            assert (spec.feature_start, spec.feature_end) == window
    with pytest.raises(KennelError, match="'dwell_offset': the 11-base window from -2 does not"):
        LeechInputSpec.from_config({**lstm, "dwell_offset": 3})
    with pytest.raises(KennelError, match="'model_name': not recorded"):
        LeechInputSpec.from_config({key: v for key, v in wide.items() if key != "model_name"})
    with pytest.raises(KennelError, match="narrower than the kmer_len=11"):
        LeechInputSpec.from_config({**lstm, "feature_start": -2, "feature_end": 2})
    # a network without a feature branch is fed none: leech predict cuts no window for it, so
    # refuses neither (test_leech_made runs one with leech's tags)
    for name in ("ConvLSTMBase", "ConvLSTMRemoraBase", "SignalCNN"):
        featureless = {**lstm, "model_name": name}
        spec = LeechInputSpec.from_config({**featureless, "dwell_offset": 3})
        assert (spec.feature_start, spec.feature_end) == (-2, 8)
        spec = LeechInputSpec.from_config({**featureless, "feature_start": -2, "feature_end": 2})
        assert (spec.feature_start, spec.feature_end) == (-2, 2)
    # leech's wrapper of a TorchScript file: code, not weights (never loaded)
    with pytest.raises(KennelError, match="'TracedModelWrapper' is not supported"):
        LeechInputSpec.from_config({**wide, "model_name": "TracedModelWrapper"})
    # a wide config from before the window was recorded: leech widens the k-mer window by the
    # model's dwell margin (InferenceSpec.from_config), 15 unless the config records one
    unrecorded = {key: v for key, v in leech_config.items() if not key.startswith("feature_")}
    for name in ("TCNDwell", "ConvLSTMDwellAttn"):
        for margin, half_width in ((None, 5 + 15), (3, 5 + 3), (0, 5)):
            config = {**unrecorded, "model_name": name, "dwell_margin": margin}
            spec = LeechInputSpec.from_config(config)
            assert (spec.feature_start, spec.feature_end) == (-half_width, half_width)
            assert spec.feature_width == feature_width(name, config)
    # leech widens by its network's dwell_margin attribute, which the hand-written classes lack
    # (so InferenceSpec leaves the window unset: the k-mer window, whatever the config records)
    for name in ("TransformerDwell", "TransformerDwellResidual", "ResNetDwell", "ConvOnly"):
        for margin in (None, 3):
            config = {**unrecorded, "model_name": name, "dwell_margin": margin}
            spec = LeechInputSpec.from_config(config)
            assert (spec.feature_start, spec.feature_end) == (-5, 5)
            assert spec.feature_width == feature_width(name, config) == 11


def test_legacy_window_keys_are_read_as_leech_reads_them(leech_config):
    """leech's fallback chain (chunking/extractor.py): feature_start/end, else feature_left/right
    (bases from the focus base), else dwell_margin_left/right (added to the k-mer window's half,
    5 here); each end on its own, an unrecorded one the k-mer window's; a recorded end keeps a
    wide model's window from being widened."""
    base = {k: v for k, v in leech_config.items() if k not in ("feature_start", "feature_end")}
    cases = [
        ({"feature_left": 7, "feature_right": 6}, (-7, 6)),
        ({"dwell_margin_left": 2, "dwell_margin_right": 1}, (-7, 6)),
        ({"feature_start": -6, "feature_left": 9, "dwell_margin_right": 2}, (-6, 7)),
        (
            {"feature_left": 8, "dwell_margin_left": 0, "feature_end": 5, "feature_right": 9},
            (-8, 5),
        ),
        ({"dwell_margin_left": 3}, (-8, 5)),
    ]
    for keys, window in cases:
        spec = LeechInputSpec.from_config({**base, **keys})
        assert (spec.feature_start, spec.feature_end) == window, keys


def test_a_bundle_naming_its_architecture_in_metadata_only(leech_dir, tmp_path):
    """leech's bundle loader takes the architecture from the metadata when the config lacks
    it; the input spec must see it too (it decides the feature window)."""
    import torch

    bundle = torch.load(leech_dir / "models" / "fx_tcndwell_multiclass.pt", weights_only=True)
    del bundle["config"]["model_name"]
    for key in ("feature_start", "feature_end"):
        del bundle["config"][key]
    path = tmp_path / "metadata_only.pt"
    torch.save(bundle, path)
    config = load_leech_config(path)
    assert config["model_name"] == bundle["metadata"]["architecture"] == "TCNDwell"
    assert LeechInputSpec.from_config(config).feature_width == 11 + 2 * 15


def test_leech_defaults_fill_absent_keys(leech_config):
    config = {
        key: value
        for key, value in leech_config.items()
        if key in ("motif", "motif_offset", "signal_in_channels", "kmer_table_sha256")
    }
    spec = LeechInputSpec.from_config(config)
    assert spec.signal_len == 100 and spec.signal_context == (50, 50)
    assert spec.seq_encoding == "base_onehot" and spec.sequence_shape == (4, 9)
    assert (spec.feature_start, spec.feature_end) == (-4, 4)
    assert len(spec.feature_channels) == 12


@pytest.mark.parametrize("bundle", ["fx_convlstmdwell_multiclass.pt", "fx_gly_phe_pairwise.pt"])
def test_the_other_bundles_share_the_preprocessing(leech_dir, leech_spec, level_table, bundle):
    config = load_leech_config(leech_dir / "models" / bundle)
    assert LeechInputSpec.from_config(config, level_table.sha256) == leech_spec


def test_pa_scaling_needs_the_basecallers_shift_and_scale(leech_config):
    """leech fails every read of a pa_scaling model without them; kennel refuses the model."""
    config = {**leech_config, "signal_norm": "pa_scaling"}
    for missing, given in (("pa_mean", {"pa_stdev": 20.0}), ("pa_stdev", {"pa_mean": 90.0})):
        with pytest.raises(KennelError, match=f"'{missing}': None: pa_scaling needs"):
            LeechInputSpec.from_config({**config, **given})
    with pytest.raises(KennelError, match="'pa_stdev': 0: pa_scaling divides by it"):
        LeechInputSpec.from_config({**config, "pa_mean": 90.0, "pa_stdev": 0})
    spec = LeechInputSpec.from_config({**config, "pa_mean": 90, "pa_stdev": 20})
    assert (spec.signal_norm, spec.pa_mean, spec.pa_stdev) == ("pa_scaling", 90.0, 20.0)


TEMPLATE = "# motif_offset: 2\naa\tposition\tdwell_mean\nAla\t-1\t20\nGly\t-1\t30\nGly\t0\t0\n"


def test_a_dwell_template_adds_a_row_per_amino_acid(leech_config):
    config = {**leech_config, "dwell_template_table": "t.tsv", "num_features": 14}
    spec = LeechInputSpec.from_config(config, dwell_template_text=TEMPLATE)
    assert spec.feature_rows == 14 and spec.dwell_template == TEMPLATE
    # leech's reading: Ala's missing entry at 0 is 1, Gly's 0 the position's mean (0 + 0) / 1
    from kennel.trna.leech_config import dwell_template

    table = dwell_template(TEMPLATE)
    assert (table.first, table.last, table.motif_offset) == (-1, 0, 2)
    assert table.expected.tolist() == [[20.0, 1.0], [30.0, 0.0]]


@pytest.mark.parametrize(
    ("change", "text", "message"),
    [
        (
            {},
            TEMPLATE.replace("offset: 2", "offset: 3"),
            "built at motif_offset 3, the model's is 2",
        ),
        ({"num_features": 12}, TEMPLATE, "12 != the 12 feature_channels and 2 dwell template rows"),
        (
            {},
            TEMPLATE.replace("\t-1\t", "\t20\t").replace("\t0\t0", "\t21\t0"),
            "miss the feature window -5..5",
        ),
        ({"feature_channels": ["dwell_log"], "num_features": 3}, TEMPLATE, "have no dwell row"),
        ({}, "aa\tposition\tdwell_mean\nAla\tminus one\t20\n", "unreadable table"),
        ({}, "aa\tposition\tdwell_mean\n", "a table without rows"),
    ],
    ids=["motif_offset", "num_features", "outside_window", "no_dwell_row", "unreadable", "empty"],
)
def test_a_dwell_template_kennel_cannot_apply_is_refused(leech_config, change, text, message):
    config = {**leech_config, "dwell_template_table": "t.tsv", "num_features": 14, **change}
    with pytest.raises(KennelError, match=message) as error:
        LeechInputSpec.from_config(config, dwell_template_text=text)
    assert "\n" not in str(error.value)
