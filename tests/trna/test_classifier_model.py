"""The tRNA classifier: padding cannot change a real row, the view hides what it should, and the
model survives a bundle round trip (compiled or not)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kennel.errors import KennelError
from kennel.feed import has_forward_hooks
from kennel.models.bundle import build_model, load_bundle, save_bundle
from kennel.models.trna_classifier import AttentionPool, ChannelNorm, TrnaTcn

N_CLASSES = 4


@pytest.fixture(autouse=True)
def one_deterministic_thread():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def random_reads(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs shaped and scaled like a features file's (dwell in samples, levels ~N(0, 1))."""
    generator = torch.Generator().manual_seed(seed)
    signal = torch.randn(n, 2, 512, generator=generator)
    bases = torch.randn(n, 25, 5, generator=generator)
    bases[..., 0] = torch.randint(2, 150, (n, 25), generator=generator).float()
    return signal, bases


TRAINED_LOOKING = {
    "n_classes": N_CLASSES,
    "signal_mean": [-0.2, 0.0],
    "signal_scale": [1.1, 0.6],
    "base_mean": [3.5, 0.0, 0.2, 0.0, 0.0],
    "base_scale": [0.6, 0.9, 0.1, 0.9, 0.5],
}


def trained_looking_model(**overrides) -> TrnaTcn:
    torch.manual_seed(3)
    hyperparameters = {**TRAINED_LOOKING, **overrides}
    model = TrnaTcn(**hyperparameters).eval()
    with torch.no_grad():  # move the output layers off their near-zero start
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model


def test_padding_cannot_change_a_real_row():
    model = trained_looking_model()
    signal, bases = random_reads(64, seed=1)
    with torch.no_grad():
        full_logits, full_charging = model(signal, bases)
        for row in (0, 17, 63):
            # the runner's case: one real row, the rest zero padding, same batch shape
            padded_signal, padded_bases = torch.zeros_like(signal), torch.zeros_like(bases)
            padded_signal[row], padded_bases[row] = signal[row], bases[row]
            logits, charging = model(padded_signal, padded_bases)
            assert torch.equal(logits[row], full_logits[row])
            assert torch.equal(charging[row], full_charging[row])
        # a different batch shape may pick a different BLAS kernel (hence the runner's fixed
        # shape): equal to rounding, not necessarily to the bit
        alone_logits, alone_charging = model(signal[5:6], bases[5:6])
    torch.testing.assert_close(alone_logits[0], full_logits[5], rtol=0, atol=1e-5)
    torch.testing.assert_close(alone_charging[0], full_charging[5], rtol=0, atol=1e-5)


def test_outputs_shapes_ranges_and_dtypes():
    model = trained_looking_model()
    signal, bases = random_reads(8, seed=2)
    with torch.no_grad():
        logits, charging = model(signal, bases)
        half_logits, _ = model(signal.half(), bases.half())  # features files hold float16
        zero_logits, zero_charging = model(torch.zeros_like(signal), torch.zeros_like(bases))
    assert logits.shape == (8, N_CLASSES) and charging.shape == (8,)
    assert bool(((charging >= 0) & (charging <= 1)).all())
    assert half_logits.dtype == torch.float32
    assert torch.isfinite(zero_logits).all() and torch.isfinite(zero_charging).all()
    without = trained_looking_model(charging_head=False)
    assert without(signal, bases)[1] is None


def test_the_view_hides_what_it_should():
    """A model restricted to bases 16..24 and no signal ignores everything else."""
    model = trained_looking_model(bases_view=[16, 25], use_signal=False)
    signal, bases = random_reads(4, seed=3)
    other_signal, other_bases = random_reads(4, seed=4)
    other_bases[:, 16:] = bases[:, 16:]
    with torch.no_grad():
        logits, charging = model(signal, bases)
        other_logits, other_charging = model(other_signal, other_bases)
        changed, _ = model(signal, bases.flip(1))
    assert torch.equal(logits, other_logits) and torch.equal(charging, other_charging)
    assert not torch.equal(logits, changed)


def test_input_transform_matches_a_numpy_formula():
    """The base branch reads (log1p(dwell), mean, ...) standardised with the stored constants."""
    model = trained_looking_model(use_signal=False)
    signal, bases = random_reads(3, seed=5)
    expected_input = bases.numpy().astype(np.float64)
    expected_input[..., 0] = np.log1p(expected_input[..., 0])
    expected_input = (expected_input - np.array([3.5, 0.0, 0.2, 0.0, 0.0])) / np.array(
        [0.6, 0.9, 0.1, 0.9, 0.5]
    )
    seen = {}
    model.base_embed.register_forward_hook(lambda module, args, out: seen.update(x=args[0]))
    assert has_forward_hooks(model)
    with torch.no_grad():
        model(signal, bases)
    np.testing.assert_allclose(seen["x"].numpy(), expected_input, rtol=1e-5, atol=1e-5)


def test_norm_and_pooling_against_plain_loops():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 9)
    norm, pool = ChannelNorm(6), AttentionPool(6)
    with torch.no_grad():
        normed, pooled = norm(x), pool(x)
    for b in range(2):
        for t in range(9):
            column = x[b, :, t].double()
            expected = (column - column.mean()) / torch.sqrt(column.var(unbiased=False) + 1e-5)
            torch.testing.assert_close(normed[b, :, t].double(), expected, rtol=0, atol=1e-5)
        weight, bias = pool.score.weight.detach()[0, :, 0], pool.score.bias.detach()
        scores = [float(weight @ x[b, :, t] + bias) for t in range(9)]
        weights = np.exp(scores) / np.exp(scores).sum()
        expected = sum(weights[t] * x[b, :, t].numpy() for t in range(9))
        np.testing.assert_allclose(pooled[b].numpy(), expected, rtol=1e-5, atol=1e-6)


def test_small_by_default_and_no_hooks():
    model = TrnaTcn(n_classes=N_CLASSES)
    n_parameters = sum(p.numel() for p in model.parameters())
    assert 50_000 <= n_parameters <= 150_000
    assert not has_forward_hooks(model)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_bundle_round_trip_and_compiled_prefix(tmp_path):
    model = trained_looking_model()
    hyperparameters = dict(TRAINED_LOOKING)
    signal, bases = random_reads(5, seed=6)
    with torch.no_grad():
        logits, charging = model(signal, bases)
    for name, saved in (("eager", model), ("compiled", torch.compile(model))):
        path = tmp_path / f"{name}.pt"
        save_bundle(path, saved, hyperparameters, metadata={"class_names": list("abcd")})
        bundle = load_bundle(path)
        assert not any(key.startswith("_orig_mod.") for key in bundle["state_dict"])
        rebuilt = build_model(bundle, path)
        with torch.no_grad():
            rebuilt_logits, rebuilt_charging = rebuilt(signal, bases)
        assert torch.equal(rebuilt_logits, logits) and torch.equal(rebuilt_charging, charging)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"bases_view": [20, 30]}, "does not fit a window of 25"),
        ({"downsample": 3}, "must divide chunk_length"),
        ({"base_scale": [1.0, 1.0]}, "needs 5 means and scales"),
        ({"n_classes": 1}, "at least two classes"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(overrides, message):
    with pytest.raises(KennelError, match=message):
        TrnaTcn(**{"n_classes": N_CLASSES, **overrides})
