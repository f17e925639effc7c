"""Flashzoi (borzoi-pytorch's ``flashed`` models) without flash_attn: against flash_attn's own
module (``flashzoi_reference/``, made by ``make_flashzoi_reference.py``) and through the scorer."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from kennel.errors import KennelError
from kennel.snp.model import load_sequence_model
from kennel.snp.scoring import ScoreOptions, score_snps
from snp_helpers import (
    FLASHZOI_REFERENCE,
    TINY_BORZOI_BINS,
    flashzoi_attention_reference,
    read_scores,
    vcf_lines,
    write_vcf,
)

from tests.conftest import require_module

SEQ_LEN = 4096
BINS = TINY_BORZOI_BINS  # the same layout as the conftest's tiny Borzoi: replicates


def _borzoi_pytorch():
    return require_module("borzoi_pytorch", "pip install 'kennel[borzoi]'")


def _flashed_config(**sizes):
    return _borzoi_pytorch().config_borzoi.BorzoiConfig(flashed=True, **sizes)


@pytest.fixture(scope="module")
def tiny_flashzoi(tmp_path_factory):
    """A random small Flashzoi saved as borzoi-pytorch saves one (``flashed: true``, flash_attn's
    parameter names: the layout test shows they are a Flashzoi checkpoint's)."""
    _borzoi_pytorch()
    from kennel.snp.flashzoi import rotary

    torch.manual_seed(1)
    config = _flashed_config(dim=256, depth=1, heads=2, bins_to_return=BINS)
    model = rotary(_borzoi_pytorch().Borzoi)(config).eval()
    directory = tmp_path_factory.mktemp("tiny_flashzoi")
    model.save_pretrained(directory)
    return directory, model.state_dict()


def test_the_attention_is_flash_attns():
    """borzoi-pytorch's FlashAttention (flash_attn's MHA: 4 query heads over 2 key/value
    heads, 136 channels per head of which 128 rotate) gave these outputs; the same weights
    give them here within float32 rounding. Grouping the heads the other way, rotating
    interleaved pairs, another base or no rotation each miss by more than 6 on values up to 7."""
    module, x, expected = flashzoi_attention_reference()
    with torch.no_grad():
        ours = module(x).numpy()
    assert np.abs(expected).max() > 5  # the softmax is not saturated to one key: see the maker
    np.testing.assert_allclose(ours, expected, rtol=0, atol=5e-5)


def test_the_attention_runs_under_autocast_as_borzoi_pytorch_runs_flashzoi():
    """In bfloat16 (the projections, the rotation table and the attention), within its
    rounding: 8 bits of mantissa on values up to 7."""
    module, x, expected = flashzoi_attention_reference()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours = module(x)
    assert ours.dtype == torch.bfloat16
    np.testing.assert_allclose(ours.float().numpy(), expected, rtol=0, atol=0.25)
    assert np.corrcoef(ours.float().numpy().ravel(), expected.ravel())[0, 1] > 0.9999


@pytest.mark.parametrize(
    ("network", "config"), [("Borzoi", "BorzoiConfig"), ("Prime", "PrimeConfig")]
)
def test_a_flashed_checkpoint_is_the_network_kennel_builds(network, config):
    """Parameter names and shapes of a flashed Borzoi and Borzoi Prime as borzoi-pytorch builds
    them with flash_attn (``layout.json``) are those of kennel's networks for the same config."""
    borzoi_pytorch = _borzoi_pytorch()
    from kennel.snp.flashzoi import rotary

    layout = json.loads((FLASHZOI_REFERENCE / "layout.json").read_text())
    config = getattr(borzoi_pytorch.config_borzoi, config)(**layout["config"])
    built = rotary(getattr(borzoi_pytorch, network))(config)
    ours = {name: list(tensor.shape) for name, tensor in built.state_dict().items()}
    assert ours == layout["state_dict"][network]


@pytest.mark.slow
def test_a_flashzoi_model_scores_variants(snp_sim, tiny_flashzoi, four_tracks, tmp_path):
    directory, saved = tiny_flashzoi
    model = load_sequence_model(directory, SEQ_LEN)
    assert (model.kind, model.target_length, model.n_tracks) == ("borzoi", BINS, 7611)
    loaded = model.module.borzoi.state_dict()
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)  # none left random

    header, records = vcf_lines(snp_sim["variants"])
    vcf = write_vcf(tmp_path / "three.vcf", header, records[5:8])
    targets = four_tracks
    out = tmp_path / "scores.h5"
    options = ScoreOptions(seq_len=SEQ_LEN, rc=True, batch_size=4, device="cpu", compile="off")
    report = score_snps(vcf, snp_sim["genome"], directory, targets, out, options)
    scores = read_scores(out)["data"]
    assert report.variants == scores["SUM"].shape[0] >= 3
    for stat in options.stats:
        assert np.isfinite(scores[stat].astype(np.float32)).all(), stat
    assert np.abs(scores["D1"].astype(np.float32)).max() > 0  # a random model still reacts


@pytest.mark.integration
def test_the_workflow_scores_a_flashzoi_and_a_borzoi_directory_as_replicates(
    workflow_copy, snp_sim, tiny_flashzoi, tiny_borzoi, four_tracks, tmp_path
):
    """A sheet row naming borzoi-pytorch directories (a Flashzoi and a Borzoi, replicates)
    through `snakemake --cores 2` in two slices: the merged scores are those of one
    in-process run over the whole VCF."""
    flashzoi, _ = tiny_flashzoi
    borzoi = tiny_borzoi
    header, records = vcf_lines(snp_sim["variants"])
    vcf = write_vcf(tmp_path / "twelve.vcf", header, records[:12])
    targets = four_tracks
    (workflow_copy / "zoo.tsv").write_text(
        "id\tarm\tvcf\tgenome\tmodel\ttargets\n"
        f"zoo\tsnp\t{vcf}\t{snp_sim['genome']}\t{flashzoi},{borzoi}\t{targets}\n"
    )
    settings = {"samples": "zoo.tsv", "snp": {"slices": 2, "score": {"seq_len": SEQ_LEN}}}
    (workflow_copy / "zoo.yaml").write_text(json.dumps(settings))
    run = [sys.executable, "-m", "snakemake", "results/snp/zoo/scores.h5", "--cores", "2",
           "--configfile", "zoo.yaml"]  # fmt: skip
    result = subprocess.run(run, cwd=workflow_copy, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    merged = read_scores(workflow_copy / "results/snp/zoo/scores.h5")["data"]
    options = ScoreOptions(seq_len=SEQ_LEN, device="cpu", compile="off")
    score_snps(vcf, snp_sim["genome"], [flashzoi, borzoi], targets, tmp_path / "one.h5", options)
    whole = read_scores(tmp_path / "one.h5")["data"]
    assert merged["snp"].tolist() == whole["snp"].tolist() and len(whole["snp"]) >= 12
    for stat in options.stats:
        np.testing.assert_allclose(
            merged[stat].astype(np.float64), whole[stat].astype(np.float64),
            rtol=1e-3, atol=1e-7, err_msg=stat,
        )  # fmt: skip


def _edited(directory, tmp_path, drop: str | list[str] | None = None, add: str | None = None):
    """A copy of the saved model whose checkpoint lacks some tensors, or holds one more."""
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "model"
    copy.mkdir()
    (copy / "config.json").write_text((directory / "config.json").read_text())
    tensors = load_file(directory / "model.safetensors")
    for name in [drop] if isinstance(drop, str) else drop or []:
        del tensors[name]
    if add:
        tensors[add] = torch.ones(3)
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def test_a_checkpoint_without_a_weight_is_refused(tiny_flashzoi, tmp_path):
    """transformers would only warn and leave the weight random."""
    directory, _ = tiny_flashzoi
    broken = _edited(directory, tmp_path, drop="transformer.0.0.fn.1.mha.Wqkv.bias")
    with pytest.raises(KennelError) as error:
        load_sequence_model(broken, SEQ_LEN)
    assert str(error.value) == (
        f"{broken}: the checkpoint lacks 1 of the weights its config.json describes "
        "(transformer.0.0.fn.1.mha.Wqkv.bias): another network's checkpoint, or a config "
        "edited since"
    )


def test_a_checkpoint_with_a_weight_the_config_turns_off_loads_and_says_so(
    tiny_flashzoi, tmp_path, caplog
):
    directory, saved = tiny_flashzoi
    extra = _edited(directory, tmp_path, add="mouse_head.weight")
    with caplog.at_level("WARNING", logger="kennel.snp.borzoi"):
        model = load_sequence_model(extra, SEQ_LEN)
    assert "1 tensors of the checkpoint are not in the network" in caplog.text
    assert "(mouse_head.weight)" in caplog.text
    loaded = model.module.borzoi.state_dict()
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)


def test_a_flashzoi_checkpoint_under_a_borzoi_config_is_refused(tiny_flashzoi, tmp_path):
    directory, _ = tiny_flashzoi
    plain = tmp_path / "plain"
    plain.mkdir()
    config = json.loads((directory / "config.json").read_text())
    config["flashed"] = False
    (plain / "config.json").write_text(json.dumps(config))
    (plain / "model.safetensors").symlink_to(directory / "model.safetensors")
    with pytest.raises(KennelError, match=rf"^{plain}: the checkpoint lacks \d+ of the weights"):
        load_sequence_model(plain, SEQ_LEN)


def test_a_flashed_config_flash_attn_could_not_build_is_refused(tmp_path):
    _flashed_config(dim=64, heads=2).save_pretrained(tmp_path)
    with pytest.raises(KennelError) as error:
        load_sequence_model(tmp_path, SEQ_LEN)
    assert str(error.value) == (
        f"{tmp_path}: a flashed (Flashzoi) config needs heads // 2 key/value heads dividing the "
        "heads, and heads dividing dim into at least 128 channels (dim=64, heads=2)"
    )


@pytest.mark.parametrize(
    ("dim", "heads", "builds"),
    [(1536, 8, True), (384, 3, True), (640, 5, False), (256, 1, False), (1002, 4, False)],
)
def test_the_flashed_configs_kennel_takes_are_those_flash_attn_builds(dim, heads, builds):
    """flash_attn's MHA asserts that its key/value heads (``heads // 2`` here) divide the heads
    and the heads divide dim; the rotation needs 128 channels in a head."""
    from kennel.snp.flashzoi import RotaryAttention

    if builds:
        RotaryAttention(dim, heads)
    else:
        with pytest.raises(KennelError, match="a flashed"):
            RotaryAttention(dim, heads)


def test_a_checkpoint_without_batchnorm_step_counters_loads(tiny_flashzoi, tmp_path):
    """Conversions that build borzoi-pytorch's state dict by hand leave out BatchNorm's
    ``num_batches_tracked`` (it counts training steps; nothing in a forward reads it)."""
    directory, saved = tiny_flashzoi
    counters = [name for name in saved if name.endswith(".num_batches_tracked")]
    assert counters
    model = load_sequence_model(_edited(directory, tmp_path, drop=counters), SEQ_LEN)
    loaded = model.module.borzoi.state_dict()
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)
