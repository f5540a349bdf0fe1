"""The vote (pure): normalisation, pooling, merged drafts, the winner."""

import dataclasses
import warnings

import numpy as np
import pytest

from specem_local.engine import vote
from specem_local.events import Candidate, RoundEvent


def test_logit_normalisation_matches_paper_for_positive_scores():
    row = np.array([2.3, 2.6, 3.2])
    np.testing.assert_allclose(vote.normalise_logit_row(row), [0.284, 0.321, 0.395], atol=1e-3)


@pytest.mark.parametrize("row", [[-1.0, 2.0, 0.5], [0.0, 0.0, 3.0], [-5.0, -4.0, -3.0], [0.0, 1.0]])
def test_logit_normalisation_is_a_distribution_for_any_real_scores(row):
    out = vote.normalise_logit_row(np.array(row))
    assert np.all(out > 0) and out.sum() == pytest.approx(1.0)
    assert list(np.argsort(out)) == list(np.argsort(row))  # order kept


@pytest.mark.parametrize("row", [[0.0, 0.0, 0.0], [-2.0, -2.0], [3.0, 3.0, 3.0]])
def test_equal_scores_give_uniform(row):
    np.testing.assert_allclose(vote.normalise_logit_row(np.array(row)), 1 / len(row))
    np.testing.assert_allclose(vote.normalise_logprob_row(np.array(row)), 1 / len(row))


def test_logprob_normalisation_is_softmax():
    out = vote.normalise_logprob_row(np.array([-1.0, -2.0]))
    assert out[0] == pytest.approx(1 / (1 + np.exp(-1)))


def test_segment_normalisation_compares_whole_segments():
    # a judge's mean log-probabilities of three 10-token candidates (a measured round)
    row = np.array([-0.28, -1.03, -0.49])
    per_token = vote.normalise_logprob_row(row)
    per_segment = vote.normalise_logprob_row(row, tokens=10)
    assert per_token.max() < 0.45  # flat: the judge barely prefers its favourite
    assert per_segment[0] == pytest.approx(1 / (1 + np.exp(-7.5) + np.exp(-2.1)))  # ~0.89
    assert np.argsort(per_token).tolist() == np.argsort(per_segment).tolist()
    scores = np.array([row, [np.nan, -1.0, -1.5]])
    out = vote.normalise(scores, "logprob", tokens=10)
    np.testing.assert_allclose(out[0], per_segment)
    assert np.isnan(out[1, 0]) and out[1, 1] == pytest.approx(1 / (1 + np.exp(-5)))
    np.testing.assert_allclose(vote.normalise(scores[:1], "logit", tokens=10)[0], vote.normalise_logit_row(row))


def test_normalise_skips_missing_scores():
    scores = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    out = vote.normalise(scores, "logit")
    assert out[0, 0] == pytest.approx(0.25) and np.isnan(out[0, 1]) and np.isnan(out[1]).all()


def test_combine_weights_verifiers():
    shares = np.array([[0.9, 0.1], [0.2, 0.8]])
    np.testing.assert_allclose(vote.combine(shares, np.array([0.75, 0.25])), [0.725, 0.275])


def test_self_votes_removed_from_the_vote():
    shares = np.array([[0.8, 0.2], [0.3, 0.7]])
    votes = vote.mask_self_judgements(shares, {0: [0], 1: [1]})
    assert np.isnan(votes[0, 0]) and np.isnan(votes[1, 1])
    # each candidate is now judged only by the other model
    np.testing.assert_allclose(vote.combine(votes, np.array([0.5, 0.5])), [0.3, 0.2])


def test_log_pooling_lets_a_trusted_verifier_veto():
    # verifier 0 (weight 0.6) nearly rules out candidate 1; verifiers 1 and 2 like it a lot
    shares = np.array([[0.98, 0.02], [0.3, 0.7], [0.3, 0.7]])
    weights = np.array([0.6, 0.2, 0.2])
    linear = vote.combine(shares, weights)
    pooled = vote.combine_log(shares, weights)
    assert linear[0] > linear[1] and pooled[0] > pooled[1]
    assert pooled[0] - pooled[1] > linear[0] - linear[1]
    assert pooled.sum() == pytest.approx(1.0)
    even = vote.combine_log(np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([0.5, 0.5]))
    np.testing.assert_allclose(even, [0.5, 0.5])
    partial = vote.combine_log(np.array([[0.9, np.nan], [0.4, 0.6]]), np.array([0.5, 0.5]))
    assert not np.isnan(partial).any() and partial.sum() == pytest.approx(1.0)


def test_loop_guard_lets_new_text_beat_a_copied_favourite():
    combined = np.array([0.7, 0.2, 0.1])
    assert vote.pick_winner([0, 1, 2], combined) == 0
    assert vote.pick_winner([0, 1, 2], combined, np.array([1.0, 0.0, 0.0])) == 1
    # a partial copy is discounted, not excluded: 0.7 * 0.5 still beats 0.2
    assert vote.pick_winner([0, 1, 2], combined, np.array([0.5, 0.0, 0.0])) == 0


def test_loop_guard_falls_back_to_the_vote_when_every_candidate_copies():
    combined = np.array([0.2, 0.7, 0.1])
    assert vote.pick_winner([0, 1, 2], combined, np.ones(3)) == 1


def test_tally_says_why_the_winner_won():
    scores = np.log(np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]]))
    result = vote.tally(scores, np.array([0.5, 0.3, 0.2]), {0: [0], 1: [1], 2: [2]}, vote.VoteRule(segment_tokens=1))
    assert result.winner == 0 and result.runner_up == 1 and result.discounted is None  # 0.57, 0.23, 0.20
    assert result.ranked_first_by == (0, 1)


def test_tally_names_the_candidate_the_loop_guard_kept_from_winning():
    scores = np.log(np.array([[0.7, 0.3], [0.6, 0.4]]))
    copied = np.array([1.0, 0.0])
    result = vote.tally(scores, np.array([0.5, 0.5]), {0: [0], 1: [1]}, vote.VoteRule(segment_tokens=1), copied)
    assert result.winner == 1 and result.discounted == 0 and result.runner_up == 0


def candidate(model: str, combined: float, copied: float | None = None) -> Candidate:
    return Candidate(model, "text", False, {}, {"a": combined, "b": combined}, combined, copied=copied)


def round_event(author: str, candidates: list[Candidate], **why) -> RoundEvent:
    return RoundEvent(3, "text", author, "vote", tuple(candidates), {"a": 0.6, "b": 0.4}, (), {}, {}, {}, 0.1, 5, **why)


def test_explain_a_plain_vote_names_the_runner_up():
    text = vote.explain(round_event("a", [candidate("a", 0.7), candidate("b", 0.3)], runner_up="b"))
    assert "Round 3: a won the weighted vote with 0.700 against 0.300 (b)." in text
    assert "loop guard" not in text
    assert "Weights after this round: a 0.60, b 0.40." in text


def test_explain_a_loop_guard_win_says_which_candidate_was_discounted():
    event = round_event(
        "b",
        [candidate("a", 0.7, copied=1.0), candidate("b", 0.3, copied=0.0)],
        runner_up="a",
        discounted="a",
        ranked_first_by=("b",),
    )
    text = vote.explain(event)
    assert "with 0.300 against 0.700 (a)." in text
    assert "The loop guard discounted a: 100% of it repeats the answer." in text
    assert "Ranked first by: b." in text


def test_explain_a_gated_round_gives_the_leading_drafts_confidence():
    sure = dataclasses.replace(round_event("a", [candidate("a", 0.0)]), decision="confident", confidence=0.8123)
    text = vote.explain(sure)
    assert "Round 3: a was sure of every token (vote gate: the others did not draft)." in text
    assert "least likely token had p = 0.81." in text
    unsure = round_event("a", [candidate("a", 0.7), candidate("b", 0.3)], runner_up="b", confidence=0.12)
    assert "(b). Its leading draft's least likely token had p = 0.12." in vote.explain(unsure)


def test_explain_names_which_of_a_models_drafts_won():
    first = Candidate("a", "one", False, {}, {"a": 0.2}, 0.2)
    second = Candidate("a", "text", False, {}, {"a": 0.5}, 0.5, sample=1)
    other = Candidate("b", "two", False, {}, {"a": 0.3}, 0.3)
    text = vote.explain(round_event("a", [first, second, other], runner_up="b"))
    assert "Round 3: a #2 won the weighted vote with 0.500 against 0.300 (b)." in text


def test_the_contrastive_vote_prefers_what_the_expert_likes_and_the_amateur_does_not():
    # the expert (weight 0.9) likes 0 and 1 about equally; the amateur likes 0 much more
    shares = np.array([[0.45, 0.40, 0.15, 0.0001], [0.70, 0.10, 0.10, 0.10]])
    weights = np.array([0.9, 0.1])
    plain = vote.combine(shares, weights)
    contrast = vote.combine_contrast(shares, weights, 0.5)
    assert np.argmax(plain) == 0 and np.argmax(contrast) == 1
    assert contrast[3] == 0.0  # below 0.1 of the expert's favourite: not plausible, however the amateur rates it
    assert contrast.sum() == pytest.approx(1.0)
    assert np.allclose(vote.combine_contrast(shares, weights, 0.0)[:3], shares[0, :3] / shares[0, :3].sum())


def test_a_contrast_with_no_expert_judgement_falls_back_to_the_weighted_vote():
    shares = np.array([[np.nan, np.nan], [0.3, 0.7]])
    weights = np.array([0.9, 0.1])
    assert np.allclose(vote.combine_contrast(shares, weights, 0.5), vote.combine(shares, weights))


def test_tally_with_contrast_picks_the_contrastive_winner():
    scores = np.log(np.array([[0.45, 0.40, 0.15], [0.70, 0.10, 0.20]]))
    rule = vote.VoteRule(segment_tokens=1, contrast=0.5)
    result = vote.tally(scores, np.array([0.9, 0.1]), {0: [0], 1: [1], 2: [2]}, rule)
    assert result.winner == 1 and result.decision == "contrast"


def test_explain_says_whether_the_others_drafted_nothing_or_did_not_draft():
    """Issue 36: "the only non-empty draft" when the others had not drafted at all."""
    alone = dataclasses.replace(round_event("a", [candidate("a", 0.0)]), decision="only-candidate", drafters=("a",))
    assert "a was the only draft: no other model drafted this round (no vote needed)" in vote.explain(alone)
    empty = dataclasses.replace(alone, drafters=("a", "b"))
    assert "a was the only non-empty draft (no vote needed)" in vote.explain(empty)


# -- each rule of the vote, to the number (mutation testing: these fail when a rule is gone) --------
def test_explain_in_full_for_each_kind_of_round():
    forced = dataclasses.replace(round_event("", []), decision="forced")
    assert vote.explain(forced) == (
        "Round 3: 'text' was forced by the answer's format (a key, punctuation): no model drafted it."
    )
    assert vote.explain(dataclasses.replace(forced, decision="mystery")) == "Round 3: 'text' mystery."
    unknown = dataclasses.replace(round_event("a", [candidate("a", 0.5)]), decision="mystery")
    assert vote.explain(unknown) == "Round 3: a mystery\nWeights after this round: a 0.60, b 0.40."
    zero = Candidate("c", "other", False, {}, {}, 0.0)
    contrast = dataclasses.replace(
        round_event("a", [candidate("a", 0.6), candidate("b", 0.3), zero], ranked_first_by=("a", "b")),
        decision="contrast",
    )
    assert vote.explain(contrast) == (
        "Round 3: a won the contrastive vote (the heaviest verifier against the others) with 0.600 against 0.300"
        " (b). Ranked first by: a, b.\nWeights after this round: a 0.60, b 0.40."
    )
    picked = dataclasses.replace(round_event("b", [candidate("a", 0.6), candidate("b", 0.3)]), decision="picked")
    assert vote.explain(picked) == (
        "Round 3: b was picked by you over the vote's winner (the answer went on from it)\n"
        "Weights after this round: a 0.60, b 0.40."
    )


def test_explain_a_contrasted_draft_in_full_after_a_sentence_with_or_without_its_full_stop():
    one = dataclasses.replace(candidate("a", 0.7), contrasted_with=("b", "c"), contrast_changed=1)
    alone = dataclasses.replace(round_event("a", [one]), decision="only-candidate", drafters=("a",))
    assert vote.explain(alone) == (
        "Round 3: a was the only draft: no other model drafted this round (no vote needed). Drafted against b, c"
        " token by token (contrast): its top choice changed on 1 token.\nWeights after this round: a 0.60, b 0.40."
    )
    two = dataclasses.replace(one, contrast_changed=2)
    voted = round_event("a", [two, candidate("b", 0.3)], confidence=0.5)
    assert vote.explain(voted) == (
        "Round 3: a won the weighted vote with 0.700 against 0.300 (b). Drafted against b, c token by token"
        " (contrast): its top choice changed on 2 tokens. Its leading draft's least likely token had p = 0.50."
        "\nWeights after this round: a 0.60, b 0.40."
    )


def test_the_winning_candidate_is_the_authors_draft_with_the_answers_text_then_the_best_vote():
    unvoted = Candidate("a", "text", False, {}, {}, None)
    voted = Candidate("a", "text", False, {}, {}, 0.4, sample=1)
    event = round_event("a", [unvoted, voted, Candidate("a", "else", False, {}, {}, 0.9, sample=2)])
    assert vote.winning_candidate(event) is voted


def test_softmax_is_exact_for_one_value_and_does_not_overflow():
    np.testing.assert_array_equal(vote.softmax(np.array([3.0])), [1.0])
    np.testing.assert_allclose(vote.softmax(np.array([800.0, 800.0 - np.log(3)])), [0.75, 0.25])


def test_logit_rows_to_the_number():
    np.testing.assert_allclose(vote.normalise_logit_row(np.array([0.5, 2.5])), [1 / 6, 5 / 6])  # positive: s / sum
    np.testing.assert_allclose(vote.normalise_logit_row(np.array([-2.0, 0.0, 4.0])), [1 / 7, 2 / 7, 4 / 7])  # gap 2
    np.testing.assert_allclose(vote.normalise_logit_row(np.array([-0.5, 0.0])), [0.25, 0.75])  # gap 0.25
    np.testing.assert_array_equal(vote.normalise_logit_row(np.array([5.0])), [1.0])
    single = np.array([2.0, 6.0], dtype=np.float32)
    assert vote.normalise_logit_row(single).dtype == np.float64 == vote.normalise_logprob_row(single).dtype


def test_normalise_compares_tokens_one_at_a_time_unless_told_the_length():
    scores = np.array([[-1.0, -2.0]])
    np.testing.assert_allclose(vote.normalise(scores, "logprob"), [vote.softmax(np.array([-1.0, -2.0]))])


def test_pooling_without_warnings_where_no_verifier_scored_a_candidate():
    shares = np.array([[0.5, 0.5, np.nan], [np.nan, 1.0, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        linear = vote.combine(shares, np.array([0.5, 0.5]))
        log = vote.combine_log(shares, np.array([0.5, 0.5]))
    np.testing.assert_allclose(linear[:2], [0.5, 0.75])
    assert np.isnan(linear[2])
    # each candidate pooled over its own verifiers: 0 by v0 alone (log 0.5), 1 by both (0.5 log 0.5)
    expected = vote.softmax(np.array([np.log(0.5), 0.5 * np.log(0.5)]))
    np.testing.assert_allclose(log[:2], expected)
    assert np.isnan(log[2])


def test_log_pooling_keeps_a_zero_share_just_above_zero():
    out = vote.combine_log(np.array([[1.0, 0.0]]), np.array([1.0]))
    assert 0 < out[1] < 1e-11


def test_contrast_to_the_number():
    shares = np.array([[0.3, 0.6, 0.1], [0.5, 0.05, 0.45]])
    weights = np.array([0.2, 0.8])  # the expert is verifier 1
    beta = 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = vote.combine_contrast(shares, weights, beta)
    # candidate 1 at exactly PLAUSIBLE of the expert's favourite is plausible
    logits = (1 + beta) * np.log(shares[1]) - beta * np.log(vote.combine_log(shares[:1], weights[:1]))
    np.testing.assert_allclose(out, vote.softmax(logits))


def test_contrast_with_the_expert_alone_and_with_a_candidate_no_amateur_scored():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alone = vote.combine_contrast(np.array([[0.25, 0.75]]), np.array([1.0]), 0.5)
        unscored = vote.combine_contrast(
            np.array([[0.5, 0.5, np.nan], [np.nan, 1.0, np.nan]]), np.array([1.0, 0.5]), 1.0
        )
    np.testing.assert_allclose(alone, [0.25, 0.75])  # no amateur: the expert's own shares
    # candidate 0 judged by the expert alone (as if the amateurs agreed): log 0.5; candidate 1: 2 log 0.5 - log 1
    np.testing.assert_allclose(unscored[:2], vote.softmax(np.array([np.log(0.5), 2 * np.log(0.5)])))
    assert np.isnan(unscored[2])


def test_identical_drafts_are_kept_under_the_heaviest_author():
    assert vote.merge_identical({0: "x", 1: "x", 2: "y"}, np.array([0.2, 0.8, 0.5])) == {1: [1, 0], 2: [2]}


def test_fast_finish_goes_to_the_heaviest_ender():
    result = vote.shortcut({0: [0], 1: [1], 2: [2]}, [0, 2], np.array([0.9, 0.1, 0.3]), True, 3)
    assert result is not None and result.winner == 0 and result.decision == "fast-finish"


def test_tally_masks_self_votes_by_author_and_pools_as_told():
    # every verifier likes its own drafts best; model 0 drafted candidates 0 and 2
    scores = np.log(np.array([[0.5, 0.1, 0.4], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5]]))
    weights = np.array([0.5, 0.3, 0.2])
    groups, author = {0: [0], 1: [1], 2: [2]}, np.array([0, 1, 0])
    token = vote.VoteRule(normalise="token", self_vote=False)
    result = vote.tally(scores, weights, groups, token, author=author)
    shares = vote.normalise(scores, "logprob")
    masked = shares.copy()
    masked[0, [0, 2]] = np.nan
    masked[1, 1] = np.nan
    np.testing.assert_allclose(result.shares, shares)
    np.testing.assert_allclose(result.combined, vote.combine(masked, weights))
    segment = vote.tally(scores, weights, groups, vote.VoteRule(segment_tokens=4, pooling="log"), author=author)
    np.testing.assert_allclose(segment.combined, vote.combine_log(vote.normalise(scores, "logprob", 4), weights))
    copied = np.array([0.0, 0.5, 0.0])
    assert vote.tally(scores, weights, groups, token, copied=copied, author=author).copied is copied


def test_tally_reads_logit_rows_as_logits():
    scores = np.array([[2.0, 6.0], [1.0, 3.0]])
    result = vote.tally(scores, np.array([0.5, 0.5]), {0: [0], 1: [1]}, vote.VoteRule(scoring="logit"))
    np.testing.assert_allclose(result.shares, [[0.25, 0.75], [0.25, 0.75]])


def test_tally_of_one_candidate_has_no_runner_up():
    result = vote.tally(np.array([[-1.0], [-2.0]]), np.array([0.5, 0.5]), {0: [0, 1]}, vote.VoteRule())
    assert result.winner == 0 and result.runner_up is None
