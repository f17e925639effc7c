"""dna_1hot (lookup table) against a plain per-base loop written from baskerville's definition."""

from __future__ import annotations

import random

import numpy as np
import pytest
from kennel.snp.onehot import dna_1hot, dna_1hot_per_base

ALPHABET = "ACGTacgtNnRYKMSWBDHVrykmswbdhv-.*X0 "


def random_case(rng: random.Random) -> tuple[str, int | None]:
    length = rng.choice([0, 1, 2, 3, rng.randint(4, 64), rng.randint(65, 400)])
    weights = [10] * 8 + [1] * (len(ALPHABET) - 8)  # mostly bases, some of everything else
    seq = "".join(rng.choices(ALPHABET, weights=weights, k=length))
    shorter, longer = max(0, length - rng.randint(0, 9)), length + rng.randint(1, 9)
    seq_len = rng.choice([None, length, shorter, longer])
    return seq, seq_len


@pytest.mark.parametrize("mode", ["plain", "n_uniform", "n_sample"])
def test_equals_the_per_base_loop_over_thousands_of_random_cases(mode):
    rng = random.Random(f"onehot-{mode}")
    for case in range(2000):
        seq, seq_len = random_case(rng)
        flags = {"n_uniform": mode == "n_uniform", "n_sample": mode == "n_sample"}
        random.seed(case)
        expected = dna_1hot_per_base(seq, seq_len, **flags)
        random.seed(case)
        actual = dna_1hot(seq, seq_len, **flags)
        assert actual.dtype == expected.dtype, (seq, seq_len)
        assert actual.shape == expected.shape, (seq, seq_len)
        assert np.array_equal(actual, expected), (seq, seq_len, mode)


def test_n_sample_draws_the_same_random_calls_in_the_same_order():
    seq = "ANNcRtgN" * 50
    random.seed(5)
    dna_1hot(seq, 300, n_sample=True)
    after_table = random.random()
    random.seed(5)
    dna_1hot_per_base(seq, 300, n_sample=True)
    assert random.random() == after_table  # same number of draws


def test_long_window_equals_the_loop():
    rng = random.Random(1)
    seq = "".join(rng.choices("ACGTNacgtn", k=65_537))
    assert np.array_equal(dna_1hot(seq), dna_1hot_per_base(seq))
    assert np.array_equal(dna_1hot(seq, 65_536), dna_1hot_per_base(seq, 65_536))


@pytest.mark.parametrize("one_hot", [dna_1hot, dna_1hot_per_base])
def test_trim_and_pad_about_the_centre(one_hot):
    """Hand-checked cases, for the table and for the per-base reference it is compared to."""
    # odd surplus: the extra base dropped is on the right
    assert one_hot("ACGTA", 2).argmax(1).tolist() == [1, 2]
    # odd padding: the extra pad base goes on the right, and stays zero with n_uniform
    padded = one_hot("NA", 5, n_uniform=True)
    assert padded.tolist() == [
        [0, 0, 0, 0],
        [0.25, 0.25, 0.25, 0.25],
        [1, 0, 0, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
    ]
    assert one_hot("acgt").dtype == bool and one_hot("acgt", n_uniform=True).dtype == np.float16
    assert one_hot("acgt").argmax(1).tolist() == [0, 1, 2, 3]
    assert not one_hot("RYN").any()
