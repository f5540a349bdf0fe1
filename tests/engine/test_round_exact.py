"""The round loop's events to the letter, with fake models: the vote normalised as ``scoring``
says, the runner-up named, each drafter's seconds summed over its drafts, each round's own
duration, the loop guard's copies, and the user's choices the starting weights carry."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specem_local.engine import learned, vote
from specem_local.engine.choices import pick_rewards
from specem_local.engine.member import Member
from specem_local.engine.segments import copied_fraction
from specem_local.events import RoundEvent
from specem_local.storage.weights import WeightStore
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_round import split, trio

LOOP = "one two three four five six seven eight nine ten eleven twelve " * 3


def voted(rounds: list[RoundEvent]) -> list[RoundEvent]:
    found = [event for event in rounds if event.decision == "vote"]
    assert found, "no round was voted on"
    return found


def distinct(event: RoundEvent):
    return [c for c in event.candidates if c.same_as is None]


def test_logit_scoring_normalises_each_verifiers_mean_logits_as_logits_in_the_vote():
    ensemble = fake_ensemble(*trio(), segment_tokens=6, model_exit=False, scoring="logit")
    _, rounds, _ = split(list(ensemble.stream(QUESTION)))
    for event in voted(rounds):
        candidates = distinct(event)
        for verifier in [member.name for member in ensemble.members]:
            scored = [c for c in candidates if verifier in c.scores]
            row = np.array([c.scores[verifier] for c in scored])
            as_logits = vote.normalise_logit_row(row)
            assert [c.shares[verifier] for c in scored] == pytest.approx(list(as_logits))
            assert not np.allclose(as_logits, vote.normalise_logprob_row(row, 6))  # the two rules differ here


def test_a_voted_round_names_the_best_other_candidates_author_as_the_runner_up():
    _, rounds, _ = split(list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False).stream(QUESTION)))
    for event in voted(rounds):
        others = [c for c in distinct(event) if c.model != event.author]
        assert event.runner_up == max(others, key=lambda c: c.combined).model


def test_each_round_says_how_long_it_took_within_the_answer():
    _, rounds, final = split(list(fake_ensemble(*trio(), segment_tokens=6).stream(QUESTION)))
    for event in rounds:
        assert isinstance(event.seconds, float) and 0.0 <= event.seconds <= final.seconds


def test_a_drafters_seconds_are_summed_over_all_its_drafts_of_the_round(monkeypatch):
    drafting = Member.draft

    def timed(self, *args, **kwargs):
        return dataclasses.replace(drafting(self, *args, **kwargs), seconds=0.25)

    monkeypatch.setattr(Member, "draft", timed)
    ensemble = fake_ensemble(*trio(), segment_tokens=6, model_exit=False, draft_budget=3, weight_prior="size")
    _, rounds, _ = split(list(ensemble.stream(QUESTION, weight_prior="size")))
    for event in voted(rounds):
        drafts = {name: sum(c.model == name for c in event.candidates) for name in event.drafters}
        assert drafts["big"] == 2  # two drafts of one member in the round
        assert event.draft_seconds == {name: 0.25 * count for name, count in drafts.items()}


def test_the_loop_guard_measures_each_candidates_copy_of_the_answer_so_far():
    members = (
        fake_member("big", LOOP, n_params=3000),
        fake_member("mid", LOOP, n_params=1500, words=[" three", " seven"]),
        fake_member("small", "Seven, I guess.", n_params=500),
    )
    ensemble = fake_ensemble(*members, segment_tokens=6, model_exit=False, loop_guard=True)
    _, rounds, final = split(list(ensemble.stream(QUESTION, max_tokens=120)))
    written, copies = "", []
    for event in rounds:
        if event.decision == "vote":
            for candidate in distinct(event):
                assert candidate.copied == pytest.approx(copied_fraction(written, candidate.text))
                copies.append(candidate.copied)
        written += event.text
    assert max(copies) > 0 and final.text == written


def test_the_start_says_how_many_of_your_choices_the_weights_carry(tmp_path):
    members = list(trio())
    store = WeightStore(tmp_path / "specem.db")
    with fake_ensemble(*members, weight_store=store) as ensemble:
        for _ in range(2):
            learned.choose(store, ensemble.members, ensemble.settings, "pick", pick_rewards("small", "big"))
        start = next(iter(ensemble.stream(QUESTION)))
    assert start.choices == 2 and start.weights_origin == "the prior and 2 of your choices"
