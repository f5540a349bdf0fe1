import numpy as np
import pytest

from specem_local import feedback


def test_logit_normalisation_matches_paper_for_positive_scores():
    row = np.array([2.3, 2.6, 3.2])
    np.testing.assert_allclose(feedback.normalise_logit_row(row), [0.284, 0.321, 0.395], atol=1e-3)


@pytest.mark.parametrize("row", [[-1.0, 2.0, 0.5], [0.0, 0.0, 3.0], [-5.0, -4.0, -3.0], [0.0, 1.0]])
def test_logit_normalisation_is_a_distribution_for_any_real_scores(row):
    out = feedback.normalise_logit_row(np.array(row))
    assert np.all(out > 0) and out.sum() == pytest.approx(1.0)
    assert list(np.argsort(out)) == list(np.argsort(row))  # order kept


@pytest.mark.parametrize("row", [[0.0, 0.0, 0.0], [-2.0, -2.0], [3.0, 3.0, 3.0]])
def test_equal_scores_give_uniform(row):
    np.testing.assert_allclose(feedback.normalise_logit_row(np.array(row)), 1 / len(row))
    np.testing.assert_allclose(feedback.normalise_logprob_row(np.array(row)), 1 / len(row))


def test_logprob_normalisation_is_softmax():
    out = feedback.normalise_logprob_row(np.array([-1.0, -2.0]))
    assert out[0] == pytest.approx(1 / (1 + np.exp(-1)))


def test_segment_normalisation_compares_whole_segments():
    # a judge's mean log-probabilities of three 10-token candidates (a measured round)
    row = np.array([-0.28, -1.03, -0.49])
    per_token = feedback.normalise_logprob_row(row)
    per_segment = feedback.normalise_logprob_row(row, tokens=10)
    assert per_token.max() < 0.45  # flat: the judge barely prefers its favourite
    assert per_segment[0] == pytest.approx(1 / (1 + np.exp(-7.5) + np.exp(-2.1)))  # ~0.89
    assert np.argsort(per_token).tolist() == np.argsort(per_segment).tolist()
    scores = np.array([row, [np.nan, -1.0, -1.5]])
    out = feedback.normalise(scores, "logprob", tokens=10)
    np.testing.assert_allclose(out[0], per_segment)
    assert np.isnan(out[1, 0]) and out[1, 1] == pytest.approx(1 / (1 + np.exp(-5)))
    np.testing.assert_allclose(feedback.normalise(scores[:1], "logit", tokens=10)[0], feedback.normalise_logit_row(row))


def test_normalise_skips_missing_scores():
    scores = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    out = feedback.normalise(scores, "logit")
    assert out[0, 0] == pytest.approx(0.25) and np.isnan(out[0, 1]) and np.isnan(out[1]).all()


def test_combine_weights_verifiers():
    shares = np.array([[0.9, 0.1], [0.2, 0.8]])
    np.testing.assert_allclose(feedback.combine(shares, np.array([0.75, 0.25])), [0.725, 0.275])


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


def test_self_votes_removed_from_the_vote():
    shares = np.array([[0.8, 0.2], [0.3, 0.7]])
    votes = feedback.mask_self_judgements(shares, {0: [0], 1: [1]})
    assert np.isnan(votes[0, 0]) and np.isnan(votes[1, 1])
    # each candidate is now judged only by the other model
    np.testing.assert_allclose(feedback.combine(votes, np.array([0.5, 0.5])), [0.3, 0.2])


def test_identical_drafts_become_one_candidate():
    groups = feedback.merge_identical({0: "is 4 pairs", 1: "is $2 + $7", 2: "is $2 + $7"}, np.array([0.2, 0.3, 0.5]))
    assert groups == {0: [0], 2: [2, 1]}  # the higher-weight author represents the text
    scores = np.array([[0.9, np.nan, 0.1], [0.2, np.nan, 0.8], [0.3, np.nan, 0.7]])
    masked = feedback.mask_self_judgements(scores, groups)
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


def test_log_pooling_lets_a_trusted_verifier_veto():
    # verifier 0 (weight 0.6) nearly rules out candidate 1; verifiers 1 and 2 like it a lot
    shares = np.array([[0.98, 0.02], [0.3, 0.7], [0.3, 0.7]])
    weights = np.array([0.6, 0.2, 0.2])
    linear = feedback.combine(shares, weights)
    pooled = feedback.combine_log(shares, weights)
    assert linear[0] > linear[1] and pooled[0] > pooled[1]
    assert pooled[0] - pooled[1] > linear[0] - linear[1]
    assert pooled.sum() == pytest.approx(1.0)
    even = feedback.combine_log(np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([0.5, 0.5]))
    np.testing.assert_allclose(even, [0.5, 0.5])
    partial = feedback.combine_log(np.array([[0.9, np.nan], [0.4, 0.6]]), np.array([0.5, 0.5]))
    assert not np.isnan(partial).any() and partial.sum() == pytest.approx(1.0)


def test_loop_guard_lets_new_text_beat_a_copied_favourite():
    combined = np.array([0.7, 0.2, 0.1])
    assert feedback.pick_winner([0, 1, 2], combined) == 0
    assert feedback.pick_winner([0, 1, 2], combined, np.array([1.0, 0.0, 0.0])) == 1
    # a partial copy is discounted, not excluded: 0.7 * 0.5 still beats 0.2
    assert feedback.pick_winner([0, 1, 2], combined, np.array([0.5, 0.0, 0.0])) == 0


def test_loop_guard_falls_back_to_the_vote_when_every_candidate_copies():
    combined = np.array([0.2, 0.7, 0.1])
    assert feedback.pick_winner([0, 1, 2], combined, np.ones(3)) == 1
