"""The vote gate (``vote_gate``): the leading drafter's sure segments are taken unvoted, its
unsure ones go to everyone's drafts and the vote."""

from __future__ import annotations

import pytest

from specem_local.backend.scoring import least_probability
from specem_local.events import FinalEvent, RoundEvent
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_round import RIGHT, WRONG, split, trio


def test_least_probability_is_the_weakest_token():
    import numpy as np

    chosen = np.log(np.array([0.9, 0.2, 0.6]))
    assert least_probability(chosen, np.zeros(3)) == pytest.approx(0.2)
    assert least_probability(np.empty(0), np.empty(0)) == 1.0


def test_a_sure_leader_drafts_alone_and_the_others_follow():
    members = trio()
    ensemble = fake_ensemble(*members, segment_tokens=6, model_exit=False, vote_gate=0.5)
    _, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert final.text == RIGHT and final.confident_rounds == final.rounds == len(rounds)
    for event in rounds:
        assert (event.decision, event.drafters, event.author) == ("confident", ("big",), "big")
        assert event.confidence is not None and event.confidence >= 0.5
        assert [c.model for c in event.candidates] == ["big"] and event.verify_seconds == {}
    assert final.drafters_per_round == 1.0
    # the others committed every segment: their sequences hold the whole answer
    assert members[1].tokens[-len(members[1].model.tokenize(RIGHT)) :] == members[1].model.tokenize(RIGHT)


def test_an_unsure_leader_calls_the_vote_as_without_the_gate():
    plain = list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False).stream(QUESTION))
    gated = list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False, vote_gate=0.999).stream(QUESTION))
    _, plain_rounds, plain_final = split(plain)
    _, rounds, final = split(gated)
    assert final.text == plain_final.text and final.confident_rounds == 0
    assert [(e.author, e.decision, e.text) for e in rounds] == [(e.author, e.decision, e.text) for e in plain_rounds]
    assert all(e.confidence is not None and e.confidence < 0.999 and len(e.drafters) == 3 for e in rounds)
    assert final.weights == pytest.approx(plain_final.weights)


def test_the_gate_follows_the_weights_not_the_order():
    """The heaviest drafter leads, wherever it is in models.toml; a sure wrong leader is taken
    (the gate trusts the weights: it saves the vote, it does not second-guess it)."""
    small = fake_member("small", WRONG, n_params=500)
    big = fake_member("big", RIGHT, n_params=3000)
    _, rounds, final = split(list(fake_ensemble(small, big, segment_tokens=6, vote_gate=0.5).stream(QUESTION)))
    assert final.text == RIGHT and {e.drafters for e in rounds} == {("big",)}


def test_the_gate_off_or_one_drafter_records_no_confidence():
    _, rounds, final = split(list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False).stream(QUESTION)))
    assert all(e.confidence is None for e in rounds) and final.confident_rounds == 0
    alone = fake_ensemble(fake_member("big", RIGHT), vote_gate=0.5)
    events = list(alone.stream(QUESTION))
    assert all(e.confidence is None for e in events if isinstance(e, RoundEvent))
    assert isinstance(events[-1], FinalEvent) and events[-1].text == RIGHT
