"""What an answer's confidence pays for, where it broke (stop 65's hostile read): escalation with
carried weights, a close or a cancel while the paid check runs, the escalated answer's own
confidence, an answer with nothing written, and the checks' decoding (``checking.py``)."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest

from specem_local.engine.answer_stream import AnswerStream
from specem_local.engine.checking import check_requests, escalated, escalation_request, with_check
from specem_local.engine.evidence import Calibrator, RoundEvidence, answer_confidence
from specem_local.engine.learned import confidence_calibrator, keep_calibrator
from specem_local.engine.request import prompt_tokens
from specem_local.engine.thinking import ThinkPlan
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_carried_weights import ensemble_with_store, start_and_final, trio


def members():
    return [fake_member("a", "It is 42.", n_params=3000), fake_member("b", "So 7.")]


def reserve(name: str = "big"):
    return fake_member(name, "Surely 41.", role="reserve", n_params=9000)


def test_an_escalated_answer_with_carried_weights_hands_on_the_ensembles_weights(tmp_path):
    ensemble = ensemble_with_store(tmp_path, [*trio(), reserve("reserve")])
    first_start, final = start_and_final(ensemble, escalate_below=0.9999)
    assert final.escalated == "reserve" and final.text == "Surely 41."
    assert set(final.weights) == {"big", "mid", "small"} and final.weights != pytest.approx(first_start.weights)
    second_start, _ = start_and_final(ensemble)
    assert second_start.weights_from == "carried" and second_start.weights == pytest.approx(final.weights)


def spy_on_checks(stream: AnswerStream, during) -> list[bool]:
    """Runs ``during(stream)`` as each check or escalation answer starts; returns, for each time
    the runner took the stream's place back, whether a check was still running then."""
    checking = threading.Event()
    ended: list[bool] = []
    end, alone = stream._runner.end, stream._answer_alone

    def spied_end(s):
        ended.append(checking.is_set())
        end(s)

    def spied_alone(request):
        checking.set()
        during(stream)
        try:
            return alone(request)
        finally:
            checking.clear()

    stream._runner.end = spied_end  # type: ignore[method-assign]
    stream._answer_alone = spied_alone  # type: ignore[method-assign]
    return ended


def test_a_stream_closed_while_its_check_runs_keeps_its_place_until_the_check_returns():
    with fake_ensemble(*members(), max_tokens=40) as ensemble:
        stream = ensemble.stream(QUESTION, confidence_check="witnesses")
        ended = spy_on_checks(stream, lambda s: threading.Thread(target=s.close).start() or s.cancel())
        final = stream.final()
        assert ended == [False] and final.text == "It is 42."
        assert "witnesses" not in final.evidence  # the check was cancelled: it says nothing
        assert ensemble.generate(QUESTION, confidence_check="witnesses").evidence["witnesses"] == 0.0  # b disagrees


def test_a_cancel_during_the_check_keeps_the_answer_and_escalates_nothing():
    with fake_ensemble(*members(), reserve(), max_tokens=40) as ensemble:
        stream = ensemble.stream(QUESTION, confidence_check="witnesses", escalate_below=0.9999)
        spy_on_checks(stream, AnswerStream.cancel)
        final = stream.final()
        assert (final.text, final.escalated, final.finish_reason) == ("It is 42.", "", "eos")
        assert "witnesses" not in final.evidence and final.confidence is not None
        assert ensemble.generate(QUESTION, escalate_below=0.9999).escalated == "big"  # the next one escalates


def test_cancelled_checks_and_a_cancelled_reserve_answer_change_nothing():
    with fake_ensemble(*members(), reserve(), max_tokens=40) as ensemble:
        stream = ensemble.stream(QUESTION, confidence_check="witnesses")
        final = stream.final()
        cancelled = dataclasses.replace(final, text="", finish_reason="cancelled", confidence=None)
        agreeing = dataclasses.replace(final, text="42")
        assert with_check(final, [cancelled], stream.request) is final
        assert with_check(final, [cancelled, agreeing], stream.request).evidence["witnesses"] == 1.0
        assert escalated(final, cancelled, "big") is final


def test_an_escalated_answer_is_read_by_the_reserves_own_calibrator_and_marked_unsure_as_any(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    ensemble_members, big = members(), reserve()
    general = confidence_calibrator(ensemble_members, "none")
    zero = (0.0,) * len(general.weights)
    keep_calibrator(ensemble_members, "none", Calibrator(zero, -5.0, general.fill, "the ensemble's"))
    keep_calibrator([big], "none", Calibrator(zero, 0.0, general.fill, "the reserve's"))
    with fake_ensemble(*ensemble_members, big, max_tokens=40) as ensemble:
        kept = ensemble.generate(QUESTION, escalate_below=0.001, abstain_below=0.6)
        given = ensemble.generate(QUESTION, escalate_below=0.1, abstain_below=0.6)
        sure = ensemble.generate(QUESTION, escalate_below=0.1, abstain_below=0.4)
    assert kept.confidence_from == "the ensemble's" and kept.confidence == pytest.approx(0.0067, abs=1e-4)
    assert (given.escalated, given.confidence_from, given.confidence) == ("big", "the reserve's", 0.5)
    assert given.unsure
    assert sure.escalated == "big" and not sure.unsure


def test_an_answer_with_nothing_written_is_read_as_the_least_sure():
    fill = (0.0,) * 8
    fitted = Calibrator((0.0,) * 8, 3.0, fill, "fitted", answers=98)
    assert answer_confidence(fitted, [RoundEvidence(())], True, 0, 0.5) == {
        "confidence": 0.01, "confidence_from": "fitted", "evidence": {"voted": 0.0, "ended": 1.0, "log_tokens": 0.0},
        "unsure": True,
    }  # fmt: skip
    assert answer_confidence(fitted, [RoundEvidence((-0.1,))], True, 1, 0.5)["confidence"] > 0.9
    assert answer_confidence(fitted, [], True, 0, 0.5)["confidence"] == 0.01  # no round at all
    prior = dataclasses.replace(fitted, answers=None)
    assert prior.least() == 0.0 and fitted.least() == 0.01
    with fake_ensemble(fake_member("a", ""), fake_member("b", ""), max_tokens=8) as ensemble:
        empty = ensemble.generate(QUESTION, abstain_below=0.01)
    assert empty.text == "" and empty.tokens == 0 and empty.confidence == 0.0 and empty.unsure


def test_witnesses_answer_greedy_and_samples_sample_with_seeds_that_wrap():
    with fake_ensemble(*members(), fake_member("c", "I think 7."), max_tokens=40, greedy=False) as ensemble:
        stream = ensemble.stream(QUESTION, confidence_check="witnesses", seed=(1 << 64) - 1)
        final = stream.final()
        witnesses = check_requests(stream.request, list(stream.request.members), final)
        assert len(witnesses) == 2 and all(r.settings.greedy for r in witnesses)
        assert all(r.settings.confidence_check == "none" for r in witnesses)
        asked = dataclasses.replace(stream.request.settings, confidence_check="samples", check_samples=2)
        request = dataclasses.replace(stream.request, settings=asked)
        samples = check_requests(request, list(request.members), final)
        assert [r.settings.seed for r in samples] == [0, 1] and not any(r.settings.greedy for r in samples)
        assert [r.members[0].name for r in samples] == ["a", "a"]  # the heaviest


def test_the_reserves_request_asks_in_the_answers_format_without_thinking_and_only_below_the_line():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    big = reserve()
    with fake_ensemble(*members(), big, max_tokens=100) as ensemble:
        stream = ensemble.stream(QUESTION, schema=schema, think=16, escalate_below=0.5)
        final = stream.final()
        request = stream.request
        assert request.think.budget > 0 and request.output_format is not None
        unsure = dataclasses.replace(final, confidence=0.2, finish_reason="eos")
        asked = escalation_request(request, big, unsure)
        assert asked is not None and asked.think == ThinkPlan(0) and asked.reserve is None
        [told] = [m for m in asked.messages if m.role == "user"]
        assert told.content.endswith(request.output_format.instruction())
        [member] = asked.members
        assert asked.prompts[member.name] == prompt_tokens(member, list(asked.messages), asked.settings, 1, True)
        assert escalation_request(request, big, dataclasses.replace(unsure, confidence=0.5)) is None  # at the line
        assert escalation_request(request, big, dataclasses.replace(unsure, confidence=0.49)) is not None


def test_a_checked_answer_adds_the_checks_time_and_is_unsure_below_the_line():
    calibrator = Calibrator((0.0,) * 9, -1.0, (0.0,) * 9, "fitted", answers=98)  # says 0.27 of any answer
    with fake_ensemble(*members(), max_tokens=40) as ensemble:
        stream = ensemble.stream(QUESTION)
        final = stream.final()
    check = dataclasses.replace(final, seconds=2.5, finish_reason="eos")
    for line, unsure in ((0.5, True), (0.2, False)):
        request = dataclasses.replace(
            stream.request,
            calibrator=calibrator,
            settings=dataclasses.replace(stream.request.settings, abstain_below=line),
        )
        checked = with_check(dataclasses.replace(final, confidence=0.9), [check], request)
        assert checked.seconds == pytest.approx(final.seconds + 2.5) and checked.unsure is unsure
        assert checked.confidence == pytest.approx(1 / (1 + math.exp(1.0)))
