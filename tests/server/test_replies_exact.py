"""What an answer says back, to the letter (server/replies.py): the exact keys and values of the
ensemble's own facts (``x_specem``) for a round, with and without its vote, and for a whole
answer, with a start event and without one, calibrated or escalated; tokens as OpenAI's
``logprobs.content``; what a whole answer keeps; when an answer ended in calls."""

from __future__ import annotations

import dataclasses

from specem_local.engine import ToolCall, ToolReply
from specem_local.events import FinalEvent, RoundEvent, StartEvent, TokenLogprob
from specem_local.server.replies import Whole, answer_facts, called, logprobs_content, round_facts


def voted_round(lost: dict[str, str] | None = None) -> RoundEvent:
    return RoundEvent(
        4, "Paris", "b", "vote", (), {"a": 0.25, "b": 0.75}, ("a", "b"), {}, {}, {}, 0.1, 7, lost=lost or {}
    )  # type: ignore[arg-type]


def final_event() -> FinalEvent:
    return FinalEvent(
        "Paris", "length", 5, 9, 1.0, 0.2, {"a": 2, "b": 3}, 2.0, {"a": 0.4, "b": 0.6}, False, lost={"c": "crashed"}
    )  # type: ignore[arg-type]


def test_a_voted_rounds_facts_are_its_number_author_candidates_decision_and_weights_after_it():
    assert round_facts(voted_round()) == {
        "round": 4,
        "author": "b",
        "candidates": 0,
        "decision": "vote",
        "weights": {"a": 0.25, "b": 0.75},
    }


def test_a_round_that_lost_a_member_says_who_and_why_after_its_vote():
    assert round_facts(voted_round({"a": "worker ended"})) == {
        "round": 4,
        "author": "b",
        "candidates": 0,
        "decision": "vote",
        "weights": {"a": 0.25, "b": 0.75},
        "lost": {"a": "worker ended"},
    }


def test_a_whole_answers_facts_are_wins_weights_rounds_finish_absent_and_lost_exactly():
    start = StartEvent(("a", "b"), ("a", "b"), {"a": 0.5, "b": 0.5}, {"a": 3}, False, absent={"d": "gone"})
    assert answer_facts(start, final_event()) == {
        "wins": {"a": 2, "b": 3},
        "weights": {"a": 0.4, "b": 0.6},
        "rounds": 5,
        "specem_finish_reason": "length",
        "absent": {"d": "gone"},
        "lost": {"c": "crashed"},
    }


def test_without_a_start_event_nobody_is_absent_and_there_are_no_notes():
    facts = answer_facts(None, final_event())
    assert facts == {
        "wins": {"a": 2, "b": 3},
        "weights": {"a": 0.4, "b": 0.6},
        "rounds": 5,
        "specem_finish_reason": "length",
        "absent": {},
        "lost": {"c": "crashed"},
    }


def test_a_round_sure_alone_says_so_rounded_to_four_places_even_without_its_vote():
    sure = RoundEvent(2, "x", "a", "vote", (), {}, (), {}, {}, {}, 0.1, 3, sure=0.123456)  # type: ignore[arg-type]
    assert round_facts(sure, vote=False) == {"round": 2, "author": "a", "candidates": 0, "sure": 0.1235}
    unsure = RoundEvent(2, "x", "a", "vote", (), {}, (), {}, {}, {}, 0.1, 3, sure=0.0)  # type: ignore[arg-type]
    assert round_facts(unsure, vote=False)["sure"] == 0.0


def test_the_formats_notes_are_listed_after_the_members_lost():
    start = StartEvent(("a",), ("a",), {"a": 1.0}, {"a": 3}, True, notes=("pattern served loosely", "no maxItems"))
    facts = answer_facts(start, final_event())
    assert list(facts) == ["wins", "weights", "rounds", "specem_finish_reason", "absent", "lost", "notes"]
    assert facts["notes"] == ["pattern served loosely", "no maxItems"] and facts["absent"] == {}


def test_a_calibrated_answer_says_how_sure_it_is_rounded_to_four_places_what_it_was_fitted_on_and_if_unsure():
    final = FinalEvent(
        "41", "eos", 1, 2, 1.0, 0.1, {}, 1.0, {}, False, confidence=0.612345, confidence_from="gsm8k", unsure=True
    )  # type: ignore[arg-type]
    facts = answer_facts(None, final)
    assert {k: facts[k] for k in list(facts)[6:]} == {
        "confidence": 0.6123,
        "confidence_from": "gsm8k",
        "unsure": True,
    }


def test_an_answer_its_reserve_gave_instead_names_the_reserve_and_keeps_the_ensembles_own_text():
    final = FinalEvent(
        "42", "eos", 1, 2, 1.0, 0.1, {}, 1.0, {}, False, confidence=0.9, confidence_from="x", unsure=False,
        escalated="big", ensemble_text="41",
    )  # type: ignore[arg-type]  # fmt: skip
    facts = answer_facts(None, final)
    assert {k: facts[k] for k in list(facts)[6:]} == {
        "confidence": 0.9,
        "confidence_from": "x",
        "unsure": False,
        "escalated": "big",
        "ensemble_text": "41",
    }


def test_tokens_are_written_as_openai_writes_logprobs_content():
    tokens = [TokenLogprob("é", -0.5, (195, 169), (("é", -0.5, (195, 169)), ("\ufffd", -1.25, (195,))))]
    assert logprobs_content(tokens) == [
        {
            "token": "é",
            "logprob": -0.5,
            "bytes": [195, 169],
            "top_logprobs": [
                {"token": "é", "logprob": -0.5, "bytes": [195, 169]},
                {"token": "\ufffd", "logprob": -1.25, "bytes": [195]},  # part of a character: its own byte
            ],
        }
    ]


def test_a_whole_answer_keeps_its_start_its_final_and_only_the_answers_tokens():
    token = TokenLogprob("a", -0.1, (97,))
    start = StartEvent(("a",), ("a",), {"a": 1.0}, {"a": 3}, True)
    thinking = RoundEvent(1, "h", "a", "vote", (), {}, (), {}, {}, {}, 0.1, 1, phase="reasoning", logprobs=(token,))  # type: ignore[arg-type]
    said = RoundEvent(2, "a", "a", "vote", (), {}, (), {}, {}, {}, 0.1, 1, logprobs=(token, token))  # type: ignore[arg-type]
    whole = Whole()
    for event in (start, thinking, said, final_event()):
        whole.add(event)
    assert whole.start is start and whole.final == final_event() and whole.tokens == [token, token]


def test_only_an_answer_that_ended_on_its_own_with_calls_ended_in_calls():
    calls = ToolReply((ToolCall("a", {}),))
    ended = FinalEvent("{}", "eos", 1, 2, 1.0, 0.1, {}, 1.0, {}, False, parsed=calls)  # type: ignore[arg-type]
    assert called(ended)
    assert not called(dataclasses.replace(ended, finish_reason="length", parsed=calls))
    assert not called(dataclasses.replace(ended, parsed=ToolReply(content="hi")))
    assert not called(dataclasses.replace(ended, parsed={"a": 1}))
