"""A member whose model is lost mid-answer (its worker missed a deadline or died: issue 40)
leaves the answer and the others finish it; the events say who and why; the next answer brings
it back or says it cannot. Fake models in seconds; real ggml-rpc servers stopped and killed
are in tests/real_models/test_rpc_faults.py."""

from __future__ import annotations

import re

import pytest

from specem_local.backend.protocol import MemberLost, StepAbandoned
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, RoundEvent, StartEvent, member_news
from tests.engine.conftest import QUESTION, fake_member
from tests.engine.conftest import fake_ensemble as ensemble_of

ANSWER = "Six times seven is forty two, and that is the answer."
REASON = "127.0.0.1:50052 stopped answering: no reply in 5.2 s"


class LoseAt:
    """Loses the model at its ``decode``-th decode (that decode raises, as a worker's would)."""

    def __init__(self, decode: int, what: type[Exception] = MemberLost) -> None:
        self.decode, self.what, self.count = decode, what, 0

    def __call__(self, model, _rows) -> None:
        self.count += 1
        if self.count == self.decode:
            if self.what is MemberLost:
                model.lose(REASON)
            raise self.what(REASON)


def trio(lose: LoseAt, **settings):
    members = [
        fake_member("a", ANSWER, on_decode=lose),
        fake_member("b", ANSWER, words=[" seven"]),
        fake_member("c", ANSWER, words=[" forty"]),
    ]
    return ensemble_of(*members, segment_tokens=4, model_exit=False, max_tokens=120, **settings)


def lose_in(model, method: str, call: int = 1) -> None:
    """Lose ``model`` at the ``call``-th call of ``method`` (seq_copy: scoring others'
    candidates; seq_keep: committing the winner)."""
    original, calls = getattr(model, method), []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) == call:
            model.lose(REASON)
        return original(*args, **kwargs)

    setattr(model, method, failing)


@pytest.mark.parametrize("drafting", ["round-robin", "threads"])
@pytest.mark.parametrize(
    ("phase", "decode", "method"),
    [("prompt", 1, None), ("drafting", 3, None), ("scoring", 0, "seq_copy"), ("committing", 0, "seq_keep")],
)
def test_a_member_lost_mid_answer_leaves_it_and_the_others_finish(drafting, phase, decode, method):
    with trio(LoseAt(decode), drafting=drafting) as ensemble:
        if method is not None:
            lose_in(ensemble.members[0].model, method)
        events = list(ensemble.stream(QUESTION))
        start, final = events[0], events[-1]
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert isinstance(final, FinalEvent) and final.finish_reason == "eos" and final.text.startswith("Six")
        assert final.lost == {"a": REASON}
        said = [e for e in rounds if e.lost]
        assert len(said) <= 1 and (said == [] or said[0].lost == {"a": REASON})
        # lost while committing, the round it drafted in is over and says so; else the round runs again without it
        first = rounds.index(said[0]) + (phase == "committing") if said else len(rounds)
        after = rounds[first:]
        assert after and all("a" not in e.drafters and all(c.model != "a" for c in e.candidates) for e in after)
        assert final.weights["a"] == 0 and sum(final.weights.values()) == pytest.approx(1)
        assert start.absent == {}
        lines: set[str] = set()
        assert member_news(final, lines) == [f"a left the answer: {REASON}"] and member_news(final, lines) == []


def test_the_next_answer_brings_the_member_back():
    lose = LoseAt(6)
    with trio(lose) as ensemble:
        assert ensemble.generate(QUESTION).lost == {"a": REASON}
        model = ensemble.members[0].model
        events = list(ensemble.stream(QUESTION))
        assert model.restarts == 1 and model.lost is None
        assert events[0].models == ("a", "b", "c") and events[0].absent == {} and events[-1].lost == {}


def test_a_member_that_cannot_come_back_sits_the_answer_out_and_says_why():
    with trio(LoseAt(6)) as ensemble:
        ensemble.generate(QUESTION)
        ensemble.members[0].model.comes_back = False
        events = list(ensemble.stream(QUESTION))
        start = events[0]
        assert isinstance(start, StartEvent) and start.models == ("b", "c")
        assert start.absent == {"a": f"cannot come back: {REASON}"}
        assert member_news(start, set()) == [f"a is out of this answer: cannot come back: {REASON}"]
        assert events[-1].finish_reason == "eos" and events[-1].text.startswith("Six")


def test_losing_the_only_verifier_ends_the_answer_with_a_clear_error_and_the_next_one_runs():
    lose = LoseAt(6)
    members = [fake_member("a", ANSWER, on_decode=lose), fake_member("b", ANSWER, role="draft")]
    with ensemble_of(*members, segment_tokens=4, model_exit=False) as ensemble:
        with pytest.raises(SpecemError, match=re.escape(f"every member that could verify was lost (a: {REASON})")):
            ensemble.generate(QUESTION)
        assert ensemble.generate(QUESTION).text.startswith("Six")  # brought back: the ensemble is free


def test_a_member_that_cannot_come_back_and_leaves_no_verifier_is_a_clear_error():
    members = [fake_member("a", ANSWER, on_decode=LoseAt(6)), fake_member("b", ANSWER, role="draft")]
    with ensemble_of(*members, segment_tokens=4, model_exit=False) as ensemble:
        with pytest.raises(SpecemError):
            ensemble.generate(QUESTION)
        ensemble.members[0].model.comes_back = False
        with pytest.raises(SpecemError, match=re.escape("no member left can answer (a: cannot come back")):
            ensemble.generate(QUESTION)


def test_a_step_given_up_on_ends_the_answer_as_cancelled():
    with trio(LoseAt(6, StepAbandoned)) as ensemble:
        final = ensemble.generate(QUESTION)
        assert final.finish_reason == "cancelled" and final.lost == {}
        assert ensemble.generate(QUESTION).finish_reason == "eos"  # nothing was lost


def test_a_cancel_interrupts_every_model():
    interrupted = []
    with trio(LoseAt(10_000)) as ensemble:
        for member in ensemble.members:
            member.model.interrupt = lambda name=member.name: interrupted.append(name)
        stream = ensemble.stream(QUESTION)
        next(stream)
        stream.cancel()
        assert sorted(interrupted) == ["a", "b", "c"]
        assert list(stream)[-1].finish_reason == "cancelled"


def test_a_lost_member_the_roster_cannot_find_is_a_bug_never_a_users_error():
    """A ``MemberLost`` from a member whose model says nothing was lost is specem's own fault:
    a server answers it 500 and logs it, never a 400 that blames the request."""

    def lost_unsaid(_model, _rows) -> None:
        raise MemberLost("lost, but its model does not say so")

    ensemble = ensemble_of(fake_member("a", "One two.", on_decode=lost_unsaid), fake_member("b", "One two."))
    with pytest.raises(RuntimeError, match="a bug in specem") as failed:
        ensemble.generate(QUESTION)
    assert not isinstance(failed.value, SpecemError)
    ensemble.close()
