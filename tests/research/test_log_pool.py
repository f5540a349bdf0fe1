"""The log-linear pool tried for issue 56 (research/log_pool.py): its mix, its fit and the
penalty cross-validation chooses, on numbers made up so each answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from specem_research import log_pool


def test_the_pool_is_the_softmax_of_the_weighted_log_beliefs():
    beliefs = {"a": np.array([0.8, 0.2]), "b": np.array([0.4, 0.6]), "c": np.array([0.01, 0.99])}
    # 0.8 * 0.4^2 = 0.128 against 0.2 * 0.6^2 = 0.072; c has no weight and counts for nothing
    assert log_pool.log_mixed(beliefs, {"a": 1.0, "b": 2.0}) == pytest.approx([0.64, 0.36])
    assert log_pool.log_mixed(beliefs, {"a": -1.0}) == pytest.approx([0.2, 0.8])  # against a's lean
    assert log_pool.log_mixed(beliefs, {}) == pytest.approx([0.5, 0.5])


def test_a_belief_of_nothing_counts_as_the_floor_and_a_missing_source_as_silence():
    floor = np.log(log_pool.LOG_FLOOR)
    found = log_pool.log_beliefs({"a": np.array([0.0, 1.0])}, ["a", "lost"], 2)
    assert found == pytest.approx(np.array([[floor, 0.0], [0.0, 0.0]]))
    sure = log_pool.log_mixed({"a": np.array([0.0, 1.0])}, {"a": 0.5})
    assert sure[0] == pytest.approx(np.exp(0.5 * floor) / (1 + np.exp(0.5 * floor)))


def made_up(n: int, seed: int) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """``knows`` is right 85% of the time, ``wrong`` leans to the wrong option, ``noise`` guesses."""
    rng = np.random.default_rng(seed)
    beliefs, answers = [], []
    for _ in range(n):
        answer = int(rng.integers(0, 2))
        knows = np.array([0.8, 0.2]) if (answer == 0) != (rng.random() < 0.15) else np.array([0.2, 0.8])
        wrong = np.array([0.3, 0.7]) if answer == 0 else np.array([0.7, 0.3])
        beliefs.append({"knows": knows, "wrong": wrong, "noise": rng.dirichlet([1, 1])})
        answers.append(answer)
    return beliefs, answers


def test_the_fit_trusts_what_knows_leans_away_from_what_is_wrong_and_ignores_noise():
    beliefs, answers = made_up(200, 0)
    weights = log_pool.fitted_log_weights(beliefs, answers, 1.0)
    assert weights["knows"] > 0.3 and weights["wrong"] < -2 and abs(weights["noise"]) < 0.3
    right = [int(np.argmax(log_pool.log_mixed(b, weights))) == a for b, a in zip(beliefs, answers)]
    assert np.mean(right) == 1.0  # wrong is always wrong: leaning away from it is always right


def test_the_fit_is_the_penalised_likelihoods_optimum_and_a_larger_penalty_shrinks_it():
    beliefs, answers = made_up(60, 1)
    weights = log_pool.fitted_log_weights(beliefs, answers, 3.0)

    def objective(w: dict[str, float]) -> float:
        return log_pool.log_likelihood(beliefs, answers, w) - 3.0 * sum(v * v for v in w.values())

    best = objective(weights)
    for name in weights:  # a nudge either way, in any weight, is worse
        for nudge in (-1e-3, 1e-3):
            assert objective({**weights, name: weights[name] + nudge}) < best
    shrunk = log_pool.fitted_log_weights(beliefs, answers, 30.0)
    assert sum(v * v for v in shrunk.values()) < sum(v * v for v in weights.values())
    assert log_pool.fitted_log_weights([], [], 1.0) == {}
    assert log_pool.fitted(beliefs, answers) == log_pool.fitted_log_weights(
        beliefs, answers, log_pool.chosen_penalty(beliefs, answers)
    )


def test_cross_validation_chooses_a_small_penalty_for_signal_and_the_largest_for_noise():
    beliefs, answers = made_up(100, 2)
    assert log_pool.chosen_penalty(beliefs, answers) == log_pool.PENALTIES[0]
    rng = np.random.default_rng(3)
    noise = [{"noise": rng.dirichlet([1, 1])} for _ in range(100)]
    guessed = [int(rng.integers(0, 2)) for _ in range(100)]
    assert log_pool.chosen_penalty(noise, guessed) == log_pool.PENALTIES[-1]
    assert log_pool.chosen_penalty(beliefs[:1], answers[:1]) == log_pool.PENALTIES[0]  # no fold to hold: the least
