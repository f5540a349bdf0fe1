"""The online feedback (pure): rewards, Hedge, starting weights, model exit."""

import numpy as np
import pytest

from specem_local.engine import feedback, vote


def test_wins_exclude_self_judgement():
    # model 0 rates its own candidate highest, but the others prefer candidate 1
    shares = np.array([[0.8, 0.1, 0.1], [0.2, 0.6, 0.2], [0.2, 0.5, 0.3]])
    wins, comparisons = feedback.win_counts(shares, {0: [0], 1: [1], 2: [2]})
    assert comparisons.tolist() == [4, 4, 4]
    # author 1: judge 0 ties candidate 2 (1 win), judge 2 prefers it to both (2 wins)
    assert wins.tolist() == [1, 3, 2]


def test_two_models_weights_move():
    """The reference's floor makes every K = 2 reward 1 (inert); smoothing must not."""
    shares = np.array([[0.3, 0.7], [0.4, 0.6]])  # both judges prefer candidate 1
    reward = feedback.rewards(shares, {0: [0], 1: [1]})
    assert reward[1] > reward[0]
    weights = feedback.hedge_update(np.array([0.5, 0.5]), reward, feedback.learning_rate(1.0, 2, 1))
    assert weights[1] > 0.5 > weights[0] and weights.sum() == pytest.approx(1.0)


def test_absent_model_gets_neutral_reward():
    shares = np.array([[0.5, 0.5, np.nan], [0.4, 0.6, np.nan], [0.3, 0.7, np.nan]])
    reward = feedback.rewards(shares, {0: [0], 1: [1]})
    assert reward[2] == pytest.approx((reward[0] + reward[1]) / 2)


def test_learning_rate_decays_as_paper():
    assert feedback.learning_rate(1.0, 4, 1) == pytest.approx(0.5)
    assert feedback.learning_rate(1.0, 4, 4) == pytest.approx(0.25)


def test_model_exit_keeps_best_and_waits_for_warmup():
    totals = np.array([5.0, 0.5, 4.5])
    assert feedback.exiting_drafters(totals, [0, 1, 2], rounds=2, warmup=4, exit_share=0.5) == []
    assert feedback.exiting_drafters(totals, [0, 1, 2], rounds=5, warmup=4, exit_share=0.5) == [1]
    assert feedback.exiting_drafters(totals, [1], rounds=9, warmup=4, exit_share=0.9) == []


def test_initial_weights_uniform_or_by_size():
    verifies = np.array([True, True, False])
    sizes = np.array([600.0, 200.0, 100.0])
    np.testing.assert_allclose(feedback.initial_weights(verifies, sizes, "uniform"), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(feedback.initial_weights(verifies, sizes, "size"), [0.75, 0.25, 0.0])


def test_identical_drafts_become_one_candidate():
    groups = vote.merge_identical({0: "is 4 pairs", 1: "is $2 + $7", 2: "is $2 + $7"}, np.array([0.2, 0.3, 0.5]))
    assert groups == {0: [0], 2: [2, 1]}  # the higher-weight author represents the text
    scores = np.array([[0.9, np.nan, 0.1], [0.2, np.nan, 0.8], [0.3, np.nan, 0.7]])
    masked = vote.mask_self_judgements(scores, groups)
    assert np.isnan(masked[1, 2]) and np.isnan(masked[2, 2]) and masked[0, 2] == 0.1
    reward = feedback.rewards(scores, groups)
    assert reward[1] == reward[2]  # co-authors share the reward
    _, comparisons = feedback.win_counts(scores, groups)
    assert comparisons[2] == 1  # only judge 0 may judge the merged text; models 1 and 2 drafted it


def test_weighted_judges_trust_the_heavier_judge():
    # models 0 and 1 drafted; judge 2 (weight 1.8) prefers candidate 1, judge 3 (weight 0.2) candidate 0
    nan = np.nan
    shares = np.array([[nan] * 4, [nan] * 4, [0.1, 0.9, nan, nan], [0.8, 0.2, nan, nan]])
    equal = feedback.rewards(shares, {0: [0], 1: [1]})
    weighted = feedback.rewards(shares, {0: [0], 1: [1]}, judge_weights=np.array([1.0, 1.0, 1.8, 0.2]))
    assert equal[0] == equal[1]
    assert weighted[1] > weighted[0]
