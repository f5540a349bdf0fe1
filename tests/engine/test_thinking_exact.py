"""Think first, then the format, to the letter (engine/thinking.py as pure functions): the exact
budgets and rooms, the exact words the members are told in each phase and across the bridge,
and the exact one-line errors naming ``think``."""

from __future__ import annotations

import pytest

from specem_local.engine import thinking
from specem_local.engine.formats import output_format_from
from specem_local.engine.prompting import Message
from specem_local.errors import SettingError

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
THINK_FIRST = "First think it through in plain words; the answer in that form comes after."
NOW = "Now give the final answer, with at most one short sentence of explanation."


def schema_format():
    return output_format_from(schema=SCHEMA)


def test_the_reasoning_room_is_the_budget_and_a_round_a_quarter_more_and_sixteen_in_whole_tokens():
    assert thinking.reasoning_room(100, 1) == 142  # 101 * 5 // 4 = 126, + 16
    assert isinstance(thinking.reasoning_room(100, 1), int)
    assert thinking.reasoning_room(0, 0) == 16


def test_the_fitting_budget_is_the_largest_whose_room_fits_in_whole_tokens_and_never_below_zero():
    assert thinking.fitting_budget(1000, 32) == 755  # (1000 - 16) * 4 // 5 = 787, - 32
    assert isinstance(thinking.fitting_budget(1000, 32), int)
    assert thinking.reasoning_room(755, 32) <= 1000 < thinking.reasoning_room(756, 32)
    assert thinking.fitting_budget(10, 4) == 0


def test_a_named_budget_is_kept_as_named_and_the_largest_allowed_is_taken():
    assert thinking.plan("high", 1000, 256, True) == thinking.ThinkPlan(512, explicit=True)
    assert thinking.plan(thinking.MAX_BUDGET, thinking.MAX_BUDGET + 64, 0, True) == thinking.ThinkPlan(
        thinking.MAX_BUDGET, explicit=True
    )
    assert thinking.plan(None, 1000, 256, True) == thinking.ThinkPlan(256, explicit=False)


def test_a_budget_past_the_largest_is_one_line_saying_the_range_and_naming_the_field():
    with pytest.raises(SettingError) as caught:
        thinking.plan(thinking.MAX_BUDGET + 1, 1 << 20, 0, True, field="reasoning_budget_tokens")
    assert str(caught.value) == "reasoning_budget_tokens: a reasoning budget must be 0 to 32,768 tokens; got 32769"
    assert caught.value.field == "reasoning_budget_tokens"


def test_a_word_that_is_no_level_is_quoted_up_to_forty_characters():
    with pytest.raises(SettingError) as caught:
        thinking.plan("x" * 50, 1000, 256, True)
    quoted = repr("x" * 40)
    assert str(caught.value) == (
        f"think must be true, false, one of low, medium, high or none, or a number of tokens; got {quoted}"
    )
    assert caught.value.field == "think"


def test_same_turn_thinking_tells_the_last_user_turn_the_format_then_to_think_first():
    messages = [Message("system", "Be brief."), Message("user", "Six times seven?"), Message("assistant", "Hmm")]
    told = thinking.reasoning_messages(messages, schema_format(), "same-turn")
    said = f"Six times seven?\n\n{schema_format().instruction()}\n{THINK_FIRST}"
    assert told == [Message("system", "Be brief."), Message("user", said), Message("assistant", "Hmm")]


def test_same_turn_thinking_without_a_user_turn_adds_one():
    messages = [Message("system", "Be brief.")]
    told = thinking.reasoning_messages(messages, schema_format(), "same-turn")
    assert told == [Message("system", "Be brief."), Message("user", f"{schema_format().instruction()}\n{THINK_FIRST}")]


def test_new_turn_thinking_reads_the_conversation_as_asked_unless_tools_are_offered():
    messages = [Message("user", "Six times seven?")]
    assert thinking.reasoning_messages(messages, schema_format(), "new-turn") == messages
    tools = output_format_from(offered=[WEATHER])
    told = thinking.reasoning_messages(messages, tools, "new-turn")
    assert told == [Message("user", f"Six times seven?\n\n{tools.instruction()}\n{THINK_FIRST}")]


@pytest.mark.parametrize(("switch", "cut"), [("budget", "That is enough thinking. "), ("eos", "")])
def test_the_new_turn_asks_for_the_final_answer_in_the_format_and_says_when_the_budget_cut_it(switch, cut):
    messages = [Message("user", "Six times seven?")]
    asked = thinking.answer_messages(messages, "6 * 7 = 42.", schema_format(), switch)
    assert asked == [
        Message("user", "Six times seven?"),
        Message("assistant", "6 * 7 = 42."),
        Message("user", f"{cut}{NOW}\n\n{schema_format().instruction()}"),
    ]


def test_the_same_turn_bridge_says_when_the_budget_cut_the_thinking():
    assert thinking.same_turn_bridge("budget") == "\n\nThat is enough thinking.\nFinal answer:\n"
    assert thinking.same_turn_bridge("eos") == "\n\nFinal answer:\n"
