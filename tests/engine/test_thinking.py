"""Think first, then the format (issue 46), on fake members: the phases, the switch (the members
end their thinking, or its budget runs out), both bridges, the reasoning kept apart from the
answer, and every bad value a one-line error naming ``think``."""

from __future__ import annotations

import json

import pytest

from specem_local.engine import thinking
from specem_local.errors import SettingError
from specem_local.events import FinalEvent, RoundEvent
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.fake_model import FakeModel

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
WORKING = "Six times seven: 6 * 7 = 42. So it is 42."
REPLY = '{"answer": 42}'


class Thinker(FakeModel):
    """Writes its working when asked a question (or asked to think first), and the JSON once
    asked for the final answer (a new user turn, or past "Final answer:" in the same turn) or
    told to answer with JSON and nothing about thinking."""

    working = WORKING

    def next_logits(self, history: list[int]):
        text = b"".join(self.pieces[t] for t in history).lower()
        asked_json = b"final answer" in text or (b"answer with json" in text and b"first think" not in text)
        self.target = (REPLY if asked_json else self.working).encode()
        return super().next_logits(history)


def thinker(name: str, **options):
    member = fake_member(name, WORKING, n_ctx=2048, **options)
    member.model.__class__ = Thinker
    return member


def answer(reasoning_budget: int = 256, **options) -> tuple[list, FinalEvent]:
    with fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=reasoning_budget) as ensemble:
        events = list(ensemble.stream(QUESTION, schema=SCHEMA, max_tokens=200, **options))
    return [e for e in events if isinstance(e, RoundEvent)], events[-1]


@pytest.mark.parametrize("bridge", ["new-turn", "same-turn"])
def test_the_members_think_freely_then_write_the_format(bridge):
    rounds, final = answer(think_bridge=bridge)
    assert final.reasoning == WORKING and final.text == REPLY and final.parsed == {"answer": 42}
    assert final.switched == "eos" and final.finish_reason == "eos"
    phases = [r.phase for r in rounds]
    assert phases == sorted(phases, key=["reasoning", "answer"].index) and {"reasoning", "answer"} <= set(phases)
    assert "".join(r.text for r in rounds if r.phase == "reasoning") == WORKING
    assert 0 < final.reasoning_tokens < final.tokens


def test_a_budget_cuts_the_thinking_and_says_so():
    _, final = answer(think=8)
    assert final.switched == "budget" and final.reasoning_tokens >= 8 and WORKING.startswith(final.reasoning)
    assert json.loads(final.text) == {"answer": 42}


@pytest.mark.parametrize("off", [False, "none", 0])
def test_think_off_writes_the_format_from_the_first_token(off):
    rounds, final = answer(think=off)
    assert final.reasoning == "" and final.switched is None and {r.phase for r in rounds} == {"answer"}


def test_the_default_budget_is_the_setting_and_zero_turns_it_off():
    _, thought = answer(reasoning_budget=256)
    _, plain = answer(reasoning_budget=0)
    assert thought.reasoning and not plain.reasoning


def test_without_a_format_think_is_checked_and_changes_nothing():
    with fake_ensemble(fake_member("a", WORKING), fake_member("b", WORKING)) as ensemble:
        final = ensemble.generate(QUESTION, think="high", max_tokens=60)
        assert final.reasoning == "" and final.text == WORKING
        with pytest.raises(SettingError):
            ensemble.generate(QUESTION, think="lots")


@pytest.mark.parametrize(
    ("think", "max_tokens", "says"),
    [
        ("lots", 200, "think must be true, false, one of low, medium, high or none"),
        (-1, 200, "must be 0 to 32,768 tokens"),
        (1 << 20, 1 << 19, "must be 0 to 32,768 tokens"),
        (1.5, 200, "think must be true, false, a level or a number of tokens, not float"),
        ([], 200, "not list"),
        (300, 200, "a reasoning budget of 300 tokens leaves the answer 0 of max_tokens = 200 (it needs at least 64)"),
        ("high", 300, "a reasoning budget of 512 tokens"),
    ],
)
def test_bad_thinking_is_one_line_naming_think_and_the_next_answer_runs(think, max_tokens, says):
    with fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=64) as ensemble:
        with pytest.raises(SettingError) as caught:
            ensemble.prepare(QUESTION, schema=SCHEMA, think=think, max_tokens=max_tokens)
        assert caught.value.field == "think" and says in str(caught.value) and "\n" not in str(caught.value)
        assert ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=200).parsed == {"answer": 42}


def test_the_default_fits_a_small_max_tokens_or_steps_aside():
    assert thinking.plan(None, 256, 256, True).budget == 256 - thinking.MIN_ANSWER
    assert thinking.plan(None, 80, 256, True).budget == 0  # 16 tokens left to think: not worth it
    assert thinking.plan(True, 600, 0, True).budget == thinking.LEVELS["medium"]


def test_cancelled_while_thinking_keeps_the_reasoning_and_no_answer():
    with fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=256) as ensemble:
        stream = ensemble.stream(QUESTION, schema=SCHEMA, max_tokens=200)
        for event in stream:
            if isinstance(event, RoundEvent):
                stream.cancel()
        final = stream.final()
    assert final.finish_reason == "cancelled" and final.text == "" and final.reasoning and final.parsed is None


def test_tools_are_told_while_thinking_and_called_after():
    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    with fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=256) as ensemble:
        unasked = ensemble.prepare(QUESTION, tools=[weather], max_tokens=300)
        request = ensemble.prepare(QUESTION, tools=[weather], max_tokens=300, think=True)
        told = b"".join(ensemble.members[0].model.pieces[t] for t in request.prompts["a"]).decode()
    assert unasked.think.budget == 0  # thinking before tool calls is asked for, not the default
    assert "get_weather" in told and "First think it through in plain words" in told
