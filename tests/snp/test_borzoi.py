"""Borzoi through borzoi-pytorch (optional extra): a tiny random config through the scorer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hound_reference import hound_scores
from kennel.errors import KennelError
from kennel.snp import borzoi as adapter
from kennel.snp.model import load_sequence_model
from kennel.snp.scoring import ScoreOptions, prepare, score_in_memory, score_snps
from snp_helpers import TINY_BORZOI_BINS, read_scores, save_tiny_borzoi, vcf_lines, write_vcf

SEQ_LEN = 4096
BINS = TINY_BORZOI_BINS
PRIME_BINS = 128  # Borzoi Prime's 16-bp bins: 2,048 of the 4,096 bases


def _tiny(tmp_path_factory, network: str, bins: int, seed: int, **heads):
    directory = tmp_path_factory.mktemp(f"tiny_{network.lower()}")
    return save_tiny_borzoi(directory, network, bins, seed, **heads)


@pytest.fixture(scope="module")
def tiny_prime(tmp_path_factory):
    """Borzoi Prime (``model_type: prime``): a third U-net level, 16-bp bins."""
    return _tiny(tmp_path_factory, "Prime", PRIME_BINS, seed=2)


@pytest.fixture(scope="module")
def tiny_mouse(tmp_path_factory):
    """A mouse model as borzoi-pytorch ships its mouse replicates: the human head turned off."""
    return _tiny(
        tmp_path_factory, "Borzoi", BINS, seed=3, enable_human_head=False, enable_mouse_head=True
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("network", "bin_size", "bins", "tracks"),
    [
        ("tiny_borzoi", 32, BINS, 7611),
        ("tiny_prime", 16, PRIME_BINS, 5431),
        ("tiny_mouse", 32, BINS, 2608),
    ],
)
def test_adapter_layout_and_track_subset(request, network, bin_size, bins, tracks, four_tracks):
    """Borzoi; Borzoi Prime (a third U-net level: 16-bp bins, its own 5,431-track head); a mouse
    model (the human head off: the mouse head's 2,608 tracks, through borzoi-pytorch's
    ``is_human=False``)."""
    from kennel.snp.targets import read_targets

    model = load_sequence_model(request.getfixturevalue(network), SEQ_LEN)
    layout = (model.kind, model.seq_len, model.stride, model.bin_size, model.target_length)
    assert layout == ("borzoi", SEQ_LEN, 128, bin_size, bins)
    assert model.n_tracks == tracks
    one_hot = torch.zeros(2, SEQ_LEN, 4)
    one_hot[:, :, 0] = 1
    with torch.no_grad():
        full = model.module(one_hot)
        native = model.module.borzoi(one_hot.transpose(1, 2), is_human=network != "tiny_mouse")
    assert full.shape == (2, bins, tracks)
    torch.testing.assert_close(full, native.transpose(1, 2))
    model.select_tracks(read_targets(four_tracks))
    with torch.no_grad():
        subset = model.module(one_hot)
    assert subset.shape == (2, bins, 4)
    torch.testing.assert_close(subset, full[..., :4], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_tiny_borzoi_runs_through_the_scorer(snp_sim, tiny_borzoi, four_tracks, tmp_path):
    header, records = vcf_lines(snp_sim["variants"])
    vcf = write_vcf(tmp_path / "three.vcf", header, records[5:8])
    out = tmp_path / "scores.h5"
    options = ScoreOptions(seq_len=SEQ_LEN, rc=True, batch_size=4, device="cpu", compile="off")
    report = score_snps(vcf, snp_sim["genome"], tiny_borzoi, four_tracks, out, options)
    scores = read_scores(out)["data"]
    assert report.variants == scores["SUM"].shape[0] >= 3
    assert scores["target_ids"].astype(str).tolist() == ["CNhs10608+", "CNhs10610+"]
    for stat in options.stats:
        assert np.isfinite(scores[stat].astype(np.float32)).all(), stat
    assert np.abs(scores["D1"].astype(np.float32)).max() > 0  # a random model still reacts


@pytest.mark.slow
def test_stitching_joins_borzoi_shifts_at_the_32bp_bin_of_the_indel(
    snp_sim, tiny_borzoi, four_tracks, tmp_path
):
    """Borzoi's input must be a multiple of 128 bp but its bins are 32 bp: hound_snp crops
    ``target_crops * 32`` bases and stitches at ``(pos - start - crop) // 32``. A deletion
    300 bp right of the window centre (it shares the window with an SNV) lands on bin 36;
    taking the 128-bp stride for the bin size put it on bin 33 (the centre bin is right
    either way, so a lone variant cannot tell)."""
    _score_a_pair_against_hound_snp(snp_sim, tiny_borzoi, four_tracks, tmp_path, 32, BINS)


def _score_a_pair_against_hound_snp(snp_sim, model_dir, four_tracks, tmp_path, bin_size, bins):
    """An SNV and a deletion 300 bp to its right in one window, stitched, scored by kennel and
    by the hound_snp reference taking ``bin_size``-bp bins."""
    import pysam

    header, _ = vcf_lines(snp_sim["variants"])
    with pysam.FastaFile(str(snp_sim["genome"])) as fasta:
        chrom = fasta.references[0]
        snv, deletion = 20_000, 20_300
        snv_ref = fasta.fetch(chrom, snv - 1, snv).upper()
        snv_alt = "ACGT"[("ACGT".index(snv_ref) + 1) % 4]
        deleted = fasta.fetch(chrom, deletion - 1, deletion + 2).upper()
    records = [
        f"{chrom}\t{snv}\tsnv\t{snv_ref}\t{snv_alt}\t.\t.\t.",
        f"{chrom}\t{deletion}\tdel\t{deleted}\t{deleted[0]}\t.\t.\t.",
    ]
    vcf = write_vcf(tmp_path / "pair.vcf", header, records)
    settings = dict(cluster_pct=0.1, rc=True, shifts=(0, 1), indel_stitch=True)
    options = ScoreOptions(
        seq_len=SEQ_LEN, stats=("SUM", "D1"), alts="first", device="cpu", compile="off",
        batch_size=4, **settings,
    )  # fmt: skip
    prepared = prepare(vcf, snp_sim["genome"], model_dir, four_tracks, options)
    assert len(prepared.clusters) == 1  # the two share one window
    kennel = score_in_memory(prepared)
    model = load_sequence_model(model_dir, SEQ_LEN).module
    crop = (SEQ_LEN - bins * bin_size) // 2  # hound_snp: target_crops * model_stride
    reference = hound_scores(
        vcf, snp_sim["genome"], model, four_tracks, seq_len=SEQ_LEN, stride=bin_size, crop=crop,
        stats=("SUM", "D1"), **settings,
    )  # fmt: skip
    for stat in ("SUM", "D1"):
        ours, theirs = kennel[stat].astype(np.float64), reference[stat].astype(np.float64)
        assert np.abs(theirs[1]).max() > 0, stat  # the random model reacts to the deletion
        # batched and one-by-one forwards differ in float32's last bits: two float16 units
        np.testing.assert_allclose(ours, theirs, rtol=2e-3, atol=1e-6, err_msg=stat)


def test_seq_len_must_fit_the_unet_and_the_output(tiny_borzoi):
    with pytest.raises(KennelError, match=r"seq_len=4000 is not a positive multiple .*\(128\)"):
        load_sequence_model(tiny_borzoi, 4000)
    with pytest.raises(KennelError, match=r"output length 64 bins needs seq_len >= 2048"):
        load_sequence_model(tiny_borzoi, 1024)


def test_without_the_extra_the_error_says_what_to_install(tiny_borzoi, monkeypatch):
    monkeypatch.setattr(adapter, "borzoi_available", lambda: False)
    with pytest.raises(
        KennelError, match=r"needs borzoi-pytorch \(pip install 'kennel\[borzoi\]'\)"
    ):
        load_sequence_model(tiny_borzoi, SEQ_LEN)


def test_borzoi_prime_has_no_package_targets_and_needs_its_length(tiny_prime):
    model = load_sequence_model(tiny_prime, SEQ_LEN)
    assert model.default_targets is None  # borzoi-pytorch's table is Borzoi's 7,611 tracks
    with pytest.raises(KennelError, match=r"output length 128 bins needs seq_len >= 2048"):
        load_sequence_model(tiny_prime, 1024)


def test_borzoi_prime_needs_a_targets_table(snp_sim, tiny_prime, tmp_path):
    header, records = vcf_lines(snp_sim["variants"])
    vcf = write_vcf(tmp_path / "one.vcf", header, records[5:6])
    options = ScoreOptions(seq_len=SEQ_LEN, device="cpu", compile="off")
    with pytest.raises(KennelError, match=rf"^{tiny_prime}: a targets table is required"):
        prepare(vcf, snp_sim["genome"], tiny_prime, None, options)


@pytest.mark.slow
def test_prime_stitches_at_the_16bp_bin_of_the_indel(snp_sim, tiny_prime, four_tracks, tmp_path):
    """hound_snp crops and stitches in the model's own bins: 16 bp for Prime. The deletion 300
    bp right of the window centre lands on bin 73 (at 32-bp bins it would be bin 36)."""
    _score_a_pair_against_hound_snp(snp_sim, tiny_prime, four_tracks, tmp_path, 16, PRIME_BINS)


def test_an_unknown_model_type_is_refused_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "enformer"}')
    with pytest.raises(KennelError) as error:
        load_sequence_model(tmp_path, SEQ_LEN)
    assert str(error.value) == (
        f"{tmp_path}/config.json: model_type 'enformer' is not one of borzoi-pytorch's "
        "networks kennel runs (borzoi, prime)"
    )


def test_a_mouse_model_has_no_package_targets(tiny_mouse):
    assert load_sequence_model(tiny_mouse, SEQ_LEN).default_targets is None


def test_a_config_with_both_heads_off_is_refused_in_one_line(tmp_path_factory):
    directory = _tiny(tmp_path_factory, "Borzoi", BINS, seed=4, enable_human_head=False)
    with pytest.raises(KennelError) as error:
        load_sequence_model(directory, SEQ_LEN)
    assert str(error.value) == f"{directory}/config.json: the config turns both heads off"
