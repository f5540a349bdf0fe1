"""The token-level contrast as a plain function over logits rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specem_local.engine.contrastive import contrast_logits
from specem_local.engine.vote import PLAUSIBLE


def test_only_what_the_expert_finds_plausible_can_be_chosen():
    expert = np.array([5.0, 5.0 + math.log(0.5), 5.0 + math.log(0.05), 0.0])
    amateur = np.array([9.0, 0.0, -9.0, -20.0])  # it loves token 0 and hates 2 and 3
    out = contrast_logits(expert, [amateur], np.array([1.0]), 0.5)
    assert np.isneginf(out[2]) and np.isneginf(out[3])  # below 0.1 of the favourite, however the amateur rates them
    assert np.argmax(out) == 1  # what the expert likes and the amateur does not
    assert out[1] == pytest.approx(1.5 * expert[1] - 0.5 * amateur[1])


def test_the_boundary_is_a_tenth_of_the_favourite_probability():
    expert = np.array([0.0, math.log(PLAUSIBLE) + 1e-9, math.log(PLAUSIBLE) - 1e-6])
    out = contrast_logits(expert, [np.zeros(3)], np.array([1.0]), 0.5)
    assert np.isfinite(out[:2]).all() and np.isneginf(out[2])


def test_no_beta_is_the_expert_over_its_plausible_tokens():
    expert = np.array([3.0, 2.5, -4.0])
    out = contrast_logits(expert, [np.array([9.0, -9.0, 0.0])], np.array([1.0]), 0.0)
    assert list(out[:2]) == [3.0, 2.5] and np.isneginf(out[2])


def test_a_constant_shift_of_a_row_changes_no_choice():
    """Logits and log-probabilities differ by one constant per row: the contrast may use either."""
    rng = np.random.default_rng(0)
    expert, amateur = rng.normal(size=50) * 3, rng.normal(size=50) * 3
    one = contrast_logits(expert, [amateur], np.array([1.0]), 0.5)
    other = contrast_logits(expert - 7.0, [amateur + 11.0], np.array([1.0]), 0.5)
    assert np.array_equal(np.isfinite(one), np.isfinite(other))
    finite = np.isfinite(one)
    assert np.allclose(one[finite] - other[finite], 1.5 * 7.0 + 0.5 * 11.0)  # one constant: the same choice


def test_amateurs_are_pooled_by_their_weights():
    expert = np.zeros(3)
    first, second = np.array([4.0, 0.0, 0.0]), np.array([0.0, 4.0, 0.0])
    out = contrast_logits(expert, [first, second], np.array([3.0, 1.0]), 1.0)
    assert out == pytest.approx([-3.0, -1.0, 0.0])  # pooled: 0.75 * first + 0.25 * second
    unweighted = contrast_logits(expert, [first, second], np.array([0.0, 0.0]), 1.0)
    assert unweighted == pytest.approx([-2.0, -2.0, 0.0])  # no weight at all: an equal say


def test_nan_in_a_row_never_wins():
    expert = np.array([1.0, np.nan, 0.5])
    out = contrast_logits(expert, [np.array([np.nan, 0.0, 0.0])], np.array([1.0]), 0.5)
    assert np.isneginf(out[1]) and out[0] == 1.0  # the amateur's NaN: the expert's own value
    assert np.argmax(out) == 0
