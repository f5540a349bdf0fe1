"""What the round loop's events and final record say of an answer, to the letter, with fake
models: how it was pooled and guarded, how it ended and how sure it was, what nothing written or a
cancel leaves, and which winner each member was told to commit."""

from __future__ import annotations

import threading

import pytest

from specem_local.engine import rounds as rounds_module
from specem_local.engine.drafted import Draft
from specem_local.engine.member import Member
from specem_local.events import RoundEvent
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_round import split, trio

LOOPER = "la la la la la la la la la la la la la la la la"


def test_the_pooling_setting_reaches_the_vote():
    combined = {}
    for pooling in ("linear", "log"):
        _, rounds, _ = split(
            list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False).stream(QUESTION, pooling=pooling))
        )
        combined[pooling] = [c.combined for e in rounds if e.decision == "vote" for c in e.candidates]
    assert combined["linear"] and combined["linear"] != pytest.approx(combined["log"])


@pytest.mark.parametrize("guard", [True, False])
def test_the_loop_guard_keeps_a_favourite_that_repeats_the_answer_from_winning_and_says_so(guard):
    members = (
        fake_member("big", LOOPER, n_params=3000),
        fake_member("mid", "Six times seven is forty two.", n_params=1500),
    )
    ensemble = fake_ensemble(*members, segment_tokens=6, model_exit=False, loop_guard=guard, weight_prior="size")
    _, rounds, _ = split(list(ensemble.stream(QUESTION, max_tokens=60)))
    kept_out = [e for e in rounds if e.discounted is not None]
    if guard:
        assert kept_out and all(e.discounted == "big" and e.author == "mid" for e in kept_out)
    else:
        assert kept_out == [] and all(e.author == "big" for e in rounds)
    assert all(e.ranked_first_by and set(e.ranked_first_by) <= {"big", "mid"} for e in rounds if e.decision == "vote")


def test_the_final_says_whether_the_answer_ended_by_itself_and_how_long_it_took():
    ended = fake_ensemble(*trio(), segment_tokens=6, model_exit=False).generate(QUESTION)
    cut = fake_ensemble(*trio(), segment_tokens=6, model_exit=False).generate(QUESTION, max_tokens=6)
    assert ended.finish_reason == "eos" and ended.evidence["ended"] == 1.0 and ended.confidence is not None
    assert cut.finish_reason == "length" and cut.evidence["ended"] == 0.0 and cut.confidence is not None
    for final in (ended, cut):
        assert 0 < final.first_segment_seconds <= final.seconds < 60
        assert final.reasoning_tokens == 0 and final.drafters_per_round > 0


def test_an_answer_cancelled_mid_way_says_nothing_of_how_sure_it_is():
    with fake_ensemble(*trio(), segment_tokens=6, model_exit=False) as ensemble:
        stream = ensemble.stream(QUESTION)
        assert any(isinstance(event, RoundEvent) for event in (next(stream), next(stream)))
        stream.cancel()
        final = stream.final()
        assert final.finish_reason == "cancelled" and final.confidence is None and final.evidence == {}


def test_an_answer_stopped_while_it_thinks_counts_every_token_as_reasoning():
    members = fake_member("a", LOOPER * 4), fake_member("b", LOOPER * 4)
    with fake_ensemble(*members, segment_tokens=6, model_exit=False, reasoning_budget=200) as ensemble:
        stream = ensemble.stream(QUESTION, schema={"type": "object"}, think=True, max_tokens=400)
        thought = next(e for e in stream if isinstance(e, RoundEvent))
        assert thought.phase == "reasoning"
        stream.cancel()
        final = stream.final()
        assert final.finish_reason == "cancelled" and final.text == "" and final.reasoning_tokens == final.tokens > 0


@pytest.mark.parametrize(("ended", "finish"), [(True, "eos"), (False, "empty")])
def test_a_round_whose_drafters_wrote_nothing_ends_the_answer_as_they_did(monkeypatch, ended, finish):
    monkeypatch.setattr(Member, "draft", lambda self, *_, **__: Draft("", ended, [], [self.last_row]))
    final = fake_ensemble(*trio(), model_exit=False).generate(QUESTION)
    assert final.finish_reason == finish and final.text == "" and final.rounds == 0
    assert final.drafters_per_round == 0.0


def test_each_member_commits_a_voted_round_by_its_winning_column(monkeypatch):
    told = []
    commit = Member.commit

    def spy(self, winner, text, own, scored):
        told.append((winner, scored))
        return commit(self, winner, text, own, scored)

    monkeypatch.setattr(Member, "commit", spy)
    _, rounds, _ = split(list(fake_ensemble(*trio(), segment_tokens=6, model_exit=False).stream(QUESTION)))
    assert any(e.decision == "vote" for e in rounds)
    adopted = [winner for winner, scored in told if scored is not None and winner in scored.seq_of]
    assert adopted and all(isinstance(winner, int) and winner >= 0 for winner, _ in told if _ is not None)


def test_every_round_drafts_and_an_answer_ends_within_seconds(monkeypatch):
    """A round that drafted nothing and ended nothing would loop for ever: bounded here (the
    answer runs in a thread; a hang fails the test instead of holding it)."""
    drafts = []
    original = rounds_module.RoundLoop._draft
    monkeypatch.setattr(rounds_module.RoundLoop, "_draft", lambda loop: drafts.append(1) or original(loop))
    ensemble = fake_ensemble(*trio(), segment_tokens=6, model_exit=False)
    got = []
    answering = threading.Thread(target=lambda: got.extend(ensemble.stream(QUESTION)), daemon=True)
    answering.start()
    answering.join(5)
    assert not answering.is_alive(), "the answer did not end"
    ensemble.close()
    _, rounds, final = split(got)
    assert rounds and len(drafts) == len(rounds) == final.rounds


def test_the_start_of_a_drafted_answer_carries_the_requests_notes_or_none():
    with fake_ensemble(fake_member("a", '"x"'), fake_member("b", '"x"')) as ensemble:
        start = next(iter(ensemble.stream(QUESTION, schema={"type": "string"}, stop=["q"])))
        assert start.notes == ("stop strings are not applied to an answer with a format: it ends when whole",)
        assert next(iter(ensemble.stream(QUESTION))).notes == ()
