"""The drafting budget (``draft_budget``): a round's drafts shared out by weight, several
candidates from one model in one vote, and the rewards, shares and commits that follow."""

from __future__ import annotations

import numpy as np
import pytest

from specem_local.engine import feedback, vote
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_round import RIGHT, split, trio


@pytest.mark.parametrize(
    ("weights", "budget", "expected"),
    [
        ([0.93, 0.05, 0.02], 3, {0: 3}),  # the calibrated trio: the strong member drafts all three
        ([0.61, 0.26, 0.13], 3, {0: 2, 1: 1}),  # the size prior: 1.83 / 0.78 / 0.39
        ([0.4, 0.35, 0.25], 3, {0: 1, 1: 1, 2: 1}),
        ([0.34, 0.33, 0.33], 1, {0: 1}),  # fewer drafts than drafters: the heaviest
        ([0.0, 0.5, 0.5], 4, {1: 2, 2: 2}),
    ],
)
def test_draft_counts_share_the_budget_by_weight(weights, budget, expected):
    counts = feedback.draft_counts(np.array(weights), [0, 1, 2], budget)
    assert counts == expected and sum(counts.values()) == budget


def test_a_model_with_several_candidates_is_rewarded_for_its_best_and_never_judges_its_own():
    # columns: model 0's two drafts (0 and 3), model 1's (1); model 2 drafts none
    author = np.array([0, 1, 2, 0])
    shares = np.array(
        [
            [0.5, 0.2, np.nan, 0.3],
            [0.2, 0.3, np.nan, 0.5],
            [0.1, 0.3, np.nan, 0.6],
        ]
    )
    groups = {0: [0], 1: [1], 3: [3]}
    wins, comparisons = feedback.win_counts(shares, groups, author=author)
    assert comparisons[0] == comparisons[3] == 4 and comparisons[1] == 4  # model 0 never judges 0 or 3
    assert wins[3] == 4 and wins[0] == 0 and wins[1] == 1
    reward = feedback.rewards(shares, groups, author=author)
    assert reward[0] == pytest.approx(4.5 / 5) and reward[1] == pytest.approx(1.5 / 5)  # model 0: its best
    assert reward[2] == pytest.approx(np.mean([0.5 / 5, 1.5 / 5, 4.5 / 5]))  # no candidate: the mean
    masked = vote.mask_self_judgements(shares, groups, author)
    assert np.isnan(masked[0, 0]) and np.isnan(masked[0, 3]) and np.isnan(masked[1, 1]) and masked[1, 3] == 0.5


def test_the_strong_member_drafts_the_whole_budget_and_the_others_follow():
    members = trio()
    ensemble = fake_ensemble(*members, segment_tokens=6, model_exit=False, draft_budget=3, weight_prior="size")
    _, rounds, final = split(list(ensemble.stream(QUESTION, weight_prior="size")))
    assert final.text == RIGHT and final.finish_reason == "eos"
    first = rounds[0]
    assert first.drafters == ("big", "mid")  # 0.6 / 0.3 / 0.1 of 3 drafts: 2, 1, 0
    assert sorted((c.model, c.sample) for c in first.candidates) == [("big", 0), ("big", 1), ("mid", 0)]
    main, extra = (next(c for c in first.candidates if c.model == "big" and c.sample == n) for n in (0, 1))
    same = extra.text == main.text  # the extra draft, at extra_temperature, wrote what big's first did
    assert (extra.same_as, extra.same_as_sample) == (("big", 0) if same else (None, None))
    assert set(extra.scores) == set(main.scores) == {"big", "mid", "small"}  # scored once, shown on both
    assert all(event.author in ("big", "mid") for event in rounds)
    tokens = members[2].model.tokenize(RIGHT)
    assert members[2].tokens[-len(tokens) :] == tokens  # the member that never drafted kept up
    assert all(m.model.violations == [] for m in members)


def test_a_budget_from_a_greedy_answer_samples_its_extra_drafts_reproducibly():
    settings = dict(segment_tokens=6, model_exit=False, draft_budget=4, extra_temperature=3.0, seed=7)
    first = list(fake_ensemble(*trio(strength=2.0), **settings).stream(QUESTION))
    again = list(fake_ensemble(*trio(strength=2.0), **settings).stream(QUESTION))
    texts = [[(c.model, c.sample, c.text) for c in e.candidates] for e in split(first)[1]]
    assert texts == [[(c.model, c.sample, c.text) for c in e.candidates] for e in split(again)[1]]
    samples = [c for e in split(first)[1] for c in e.candidates if c.sample > 0]
    assert samples and any(c.text not in RIGHT for c in samples)  # hot extra drafts wander off the target


def test_no_budget_is_the_round_as_before():
    plain = list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False).stream(QUESTION))
    assert all(c.sample == 0 for e in split(plain)[1] for c in e.candidates)
    single = fake_ensemble(fake_member("big", RIGHT), draft_budget=3)
    assert single.generate(QUESTION).text == RIGHT  # one model: plain generation, the budget unused


def test_a_contrastive_vote_over_the_strong_members_own_drafts():
    """draft_budget + contrast: the strong member drafts the candidates, the vote contrasts its
    judgement with the others'; every round's combined scores form a distribution."""
    settings = dict(segment_tokens=6, model_exit=False, draft_budget=3, contrast=0.5, weight_prior="size")
    _, rounds, final = split(list(fake_ensemble(*trio(), **settings).stream(QUESTION)))
    assert final.text == RIGHT and any(e.decision == "contrast" for e in rounds)
    assert "won the contrastive vote" in vote.explain(next(e for e in rounds if e.decision == "contrast"))
    for event in rounds:
        combined = [c.combined for c in event.candidates if c.same_as is None and c.combined is not None]
        if event.decision == "contrast":
            assert sum(combined) == pytest.approx(1.0) and all(value >= 0 for value in combined)


def test_with_model_exit_the_light_members_still_follow_and_verify_the_budgets_drafts(tmp_path):
    """Model exit takes the members known to lose out of drafting from the first round; with a
    budget the strong one drafts every candidate and the others still keep up and judge them."""
    from specem_local.engine.learned import calibrate
    from specem_local.storage.weights import WeightStore

    members = trio()
    store = WeightStore(tmp_path / "specem.db")
    ensemble = fake_ensemble(*members, weight_store=store, segment_tokens=6, model_exit=True, draft_budget=2)
    calibrate(store, ensemble.members, ensemble.settings, {"big": 0, "mid": 19, "small": 20}, 20)
    start, rounds, final = split(list(ensemble.stream(QUESTION, extra_temperature=3.0)))
    assert start.drafters == ("big",) and final.text == RIGHT
    voted = [e for e in rounds if e.decision == "vote"]  # the weighted vote: no contrast here
    assert voted and all(set(c.scores) == {"big", "mid", "small"} for e in voted for c in e.candidates)
    assert all(m.model.violations == [] for m in members)


def test_the_final_record_counts_every_drafted_token():
    _, rounds, final = split(
        list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False, draft_budget=3).stream(QUESTION))
    )
    assert final.drafted_tokens == sum(sum(e.draft_tokens.values()) for e in rounds) > final.tokens
