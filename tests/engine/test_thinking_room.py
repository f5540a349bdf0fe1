"""Thinking first is checked and reserved for both of its phases (issue 53): the format's phase
reads the conversation, the reasoning, a bridge and the format's instruction, so the room check
before the queue and the KV cells a place reserves cover it. Before, ``prepare`` counted only the
reasoning phase's prompt (no instruction): a long schema thought for its whole budget and then
raised ``ContextFull`` (a 500 on the server), and four such answers at once overran the shared
KV memory."""

from __future__ import annotations

import pytest

from specem_local.engine import request as request_module
from specem_local.engine import thinking
from specem_local.engine.request import PromptTooLong, prompt_tokens
from specem_local.errors import SettingError
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_thinking import Thinker

LONG_WORKING = "Six times seven: 6 * 7 = 42, as six sevens are forty-two. " * 8
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "integer"},
        **{f"note_{i}": {"type": "string", "description": "a note on the answer " * 8} for i in range(6)},
    },
    "required": ["answer"],
}


class LongThinker(Thinker):
    """Works at length before it answers, so the reasoning fills its budget."""

    working = LONG_WORKING


def thinkers(n_ctx: int, n_seq_max: int = 8):
    made = []
    for name in ("a", "b"):
        member = fake_member(name, LONG_WORKING, n_ctx=n_ctx, n_seq_max=n_seq_max)
        member.model.__class__ = LongThinker
        made.append(member)
    return made


ROUND = 2 * 10 + 1  # two drafters' segments of 10 tokens, and the next token


def instruction_tokens() -> int:
    """The prompt of the format from the first token (no thinking)."""
    with fake_ensemble(*thinkers(4096)) as ensemble:
        return len(ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=300, think=False).prompts["a"])


def bridged_tokens() -> int:
    """The prompt of the format's phase after thinking, less the reasoning (its bridge and instruction)."""
    with fake_ensemble(*thinkers(4096)) as ensemble:
        request = ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=300, think=False)
        bridged = thinking.answer_messages(list(request.asked), "", request.output_format, "budget")
        return len(prompt_tokens(ensemble.members[0], bridged, request.settings, 2, True))


def test_a_default_budget_is_fitted_into_the_room_the_format_leaves_and_the_answer_ends_whole():
    n_ctx = bridged_tokens() + ROUND + 120  # room for a budget of 73
    with fake_ensemble(*thinkers(n_ctx), reasoning_budget=256) as ensemble:
        request = ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=300)
        assert 0 < request.think.budget < 100
        final = ensemble.stream(request).final()
    assert final.finish_reason == "eos" and final.parsed == {"answer": 42} and final.reasoning


def test_no_room_to_think_at_all_writes_the_format_from_the_first_token():
    n_ctx = bridged_tokens() + ROUND + 40  # room for a budget of 9: too little to think
    with fake_ensemble(*thinkers(n_ctx), reasoning_budget=256) as ensemble:
        request = ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=300)
        assert request.think.budget == 0 and len(request.prompts["a"]) >= instruction_tokens()
        final = ensemble.stream(request).final()
    assert final.reasoning == "" and final.parsed == {"answer": 42}


def test_an_explicit_budget_that_does_not_fit_is_a_setting_error_naming_think_before_anything_runs():
    n_ctx = bridged_tokens() + ROUND + 120
    with fake_ensemble(*thinkers(n_ctx)) as ensemble:
        with pytest.raises(SettingError, match="does not fit beside the format's instruction") as refused:
            ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=300, think=200)
        assert refused.value.field == "think"
        assert ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=300, think=40).parsed == {"answer": 42}


def test_an_instruction_that_leaves_no_room_is_refused_up_front_with_thinking_on_as_with_it_off():
    n_ctx = instruction_tokens() + 10
    with fake_ensemble(*thinkers(n_ctx), reasoning_budget=256) as ensemble:
        for think in (None, False):
            with pytest.raises(PromptTooLong, match="with the format's instructions"):
                ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=300, think=think)


def test_four_answers_that_think_at_once_reserve_their_format_phase_and_all_end_whole():
    from specem_local.engine import Ensemble
    from specem_local.settings import EnsembleSettings

    n_ctx = 2 * instruction_tokens() + 700  # two answers' format phases fit at once, not four
    members = thinkers(n_ctx, n_seq_max=32)
    settings = EnsembleSettings(greedy=True, reasoning_budget=256, max_tokens=300)
    with Ensemble(members, settings, parallel=4) as ensemble:
        got = list(ensemble.answers([QUESTION] * 4, schema=SCHEMA))
    assert [a.error for a in got] == [None] * 4
    assert all(a.final.parsed == {"answer": 42} and a.final.reasoning for a in got)


def test_no_room_at_the_switch_ends_the_answer_as_context_never_as_an_exception(monkeypatch):
    n_ctx = bridged_tokens() + ROUND + 120
    monkeypatch.setattr(request_module, "reasoning_room", lambda budget, segment: 0)  # a reservation too small
    with fake_ensemble(*thinkers(n_ctx)) as ensemble:
        final = ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=300, think=120)
        assert final.finish_reason == "context" and final.reasoning and final.parsed is None
        assert ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=300, think=False).parsed == {"answer": 42}
