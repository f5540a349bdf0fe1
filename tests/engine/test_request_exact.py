"""An answer's request to the letter (engine/request.py as pure functions over fake members): the
conversation as the members read it (earlier tool calls told in words or kept as turns, the
system prompt first), the prompt's first token, the exact one-line refusals of a prompt or a
segment that does not fit, the reasoning budget fitted at its exact edge, and the start of an
answer to continue."""

from __future__ import annotations

import pytest

from specem_local.engine.formats import output_format_from
from specem_local.engine.member import EXTRA_TOKENS
from specem_local.engine.prompting import Message
from specem_local.engine.request import (
    PromptTooLong,
    checked_prefix,
    conversation,
    fitted_thinking,
    prompt_tokens,
    round_cells,
)
from specem_local.engine.thinking import MIN_REASONING, ThinkPlan, answer_messages, fitting_budget, reasoning_room
from specem_local.engine.tools import ToolUse
from specem_local.errors import SettingError, SpecemError
from specem_local.settings import EnsembleSettings
from tests.engine.conftest import QUESTION, fake_member
from tests.fake_model import BOS

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
GET_TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}],
}
ASKED = {"role": "user", "content": "What time is it?"}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "12:00"}
TOLD_CALL = Message("assistant", '(I called get_time({"zone": "UTC"}).)')


# -- the conversation as the members read it ---------------------------------------------------


def test_an_earlier_call_without_a_result_is_told_in_words_without_tools_offered():
    asked = [ASKED, CALL, {"role": "user", "content": "Never mind."}]
    assert conversation(asked, EnsembleSettings(), None) == [
        Message("user", "What time is it?"),
        TOLD_CALL,
        Message("user", "Never mind."),
    ]


def test_without_tools_offered_a_call_and_its_result_are_told_in_words_after_the_system_prompt():
    told = conversation([ASKED, CALL, RESULT], EnsembleSettings(system_prompt="Be brief."), None)
    assert told == [
        Message("system", "Be brief."),
        Message("user", "What time is it?"),
        TOLD_CALL,
        Message("user", "The functions returned:\nget_time returned: 12:00"),
    ]


def test_with_tools_offered_a_call_and_its_result_stay_turns_of_their_own():
    tools = output_format_from(offered=[GET_TIME])
    told = conversation([ASKED, CALL, RESULT], EnsembleSettings(system_prompt="Be brief."), tools)
    assert told == [
        Message("system", "Be brief."),
        Message("user", "What time is it?"),
        Message("assistant", "", (ToolUse("get_time", {"zone": "UTC"}, "c1"),)),
        Message("tool", "12:00", name="get_time"),
    ]


def test_the_system_prompt_comes_first_in_a_plain_conversation():
    assert conversation("Hi", EnsembleSettings(system_prompt="Be brief."), None) == [
        Message("system", "Be brief."),
        Message("user", "Hi"),
    ]


# -- the prompt's tokens and its refusals --------------------------------------------------------


def test_a_model_that_adds_a_bos_token_has_its_prompt_begin_with_it_and_one_that_does_not_has_none():
    settings, said = EnsembleSettings(), [Message("user", "Hi")]
    plain = fake_member("a", "x")
    assert prompt_tokens(plain, said, settings, 1, False)[0] != BOS
    bos = fake_member("b", "x")
    bos.model.adds_bos = True
    tokens = prompt_tokens(bos, said, settings, 1, False)
    assert tokens[0] == BOS and tokens[1:] == prompt_tokens(plain, said, settings, 1, False)


def test_segments_that_do_not_fit_the_context_are_one_line_counting_every_drafter():
    member = fake_member("a", "x", n_ctx=30)
    with pytest.raises(SpecemError) as refused:
        prompt_tokens(member, [Message("user", "Hi")], EnsembleSettings(segment_tokens=10), 3, False)
    assert str(refused.value) == (
        "segment_tokens = 10 does not fit the context of a (30 tokens for 3 drafters' segments at once); "
        "lower segment_tokens or raise n_ctx in models.toml"
    )


def long_prompt(formatted: bool) -> tuple[str, int]:
    member = fake_member("a", "x", n_ctx=40)
    said = [Message("user", "a long question " * 4)]
    length = len(prompt_tokens(fake_member("a", "x"), said, EnsembleSettings(segment_tokens=10), 1, formatted))
    with pytest.raises(PromptTooLong) as refused:
        prompt_tokens(member, said, EnsembleSettings(segment_tokens=10), 1, formatted)
    assert refused.value.field == "messages" and refused.value.code == "context_length_exceeded"
    return str(refused.value), length


def test_a_conversation_too_long_asks_for_a_new_chat_in_one_exact_line():
    said, length = long_prompt(False)
    assert said == (
        f"the conversation ({length} tokens for a) leaves no room to answer in its context of 40 tokens "
        "(a round needs 11); raise n_ctx in models.toml or start a new chat"
    )


def test_a_formatted_prompt_too_long_asks_for_a_shorter_schema_or_fewer_tools_in_one_exact_line():
    said, length = long_prompt(True)
    assert said == (
        f"the conversation with the format's instructions ({length} tokens for a) leaves no room to answer in "
        "its context of 40 tokens (a round needs 11); raise n_ctx in models.toml or use a shorter schema or "
        "fewer tools"
    )


# -- thinking fitted to the format's phase ------------------------------------------------------

SETTINGS = EnsembleSettings(segment_tokens=10)
ROUND = 2 * 10 + 1  # two drafters' segments of 10 tokens, and the next token


def bridged_length() -> int:
    """The format's phase after a budget cut the reasoning: the conversation, the cut said, the
    instruction (no reasoning yet)."""
    asked = [Message("user", QUESTION)]
    bridged = answer_messages(asked, "", output_format_from(schema=SCHEMA), "budget")
    assert "That is enough thinking. Now give the final answer" in bridged[-1].content
    return len(prompt_tokens(fake_member("a", "x"), bridged, SETTINGS, 2, True))


def fitted(room: int) -> tuple[ThinkPlan, int]:
    n_ctx = bridged_length() + ROUND + room
    members = [fake_member("a", "x", n_ctx=n_ctx), fake_member("b", "x", n_ctx=n_ctx)]
    asked = [Message("user", QUESTION)]
    return fitted_thinking(ThinkPlan(256), members, asked, output_format_from(schema=SCHEMA), SETTINGS, 2)


def test_the_room_to_think_is_counted_after_the_bridge_that_says_the_budget_cut_the_thinking():
    plan, longest = fitted(1000)
    assert plan == ThinkPlan(256) and longest == bridged_length() + reasoning_room(256, 10)


def test_a_default_budget_squeezed_to_exactly_the_least_worth_thinking_is_kept():
    room = 69  # (69 - 16) * 4 // 5 - 10 = 32
    assert fitting_budget(room, 10) == MIN_REASONING == 32
    plan, longest = fitted(room)
    assert plan == ThinkPlan(MIN_REASONING) and longest == bridged_length() + reasoning_room(MIN_REASONING, 10)


def test_a_default_budget_squeezed_one_below_the_least_worth_thinking_is_no_thinking():
    assert fitting_budget(68, 10) == MIN_REASONING - 1
    assert fitted(68) == (ThinkPlan(0), 0)


# -- the start of an answer to continue ------------------------------------------------------------

CONTINUED = [Message("user", QUESTION), Message("assistant", '{"answer": ')]


def test_with_a_format_the_start_of_the_answer_is_the_trailing_assistant_message():
    assert checked_prefix(CONTINUED, output_format_from(schema=SCHEMA), lambda _: True) == '{"answer": '


def test_without_a_format_there_is_no_start_of_an_answer_to_check():
    assert checked_prefix(CONTINUED, None, lambda _: False) == ""


def test_a_start_of_the_answer_the_format_refuses_is_one_exact_line_naming_messages():
    with pytest.raises(SettingError) as refused:
        checked_prefix(CONTINUED, output_format_from(schema=SCHEMA), lambda _: False)
    assert str(refused.value) == "messages: the start of the answer does not match the format"
    assert refused.value.field == "messages"


def test_an_explicit_budget_that_does_not_fit_is_one_exact_line_naming_think_with_the_room_there_is():
    n_ctx = bridged_length() + ROUND + 100
    members = [fake_member("a", "x", n_ctx=n_ctx), fake_member("b", "x", n_ctx=n_ctx)]
    schema = output_format_from(schema=SCHEMA)
    with pytest.raises(SettingError) as refused:
        fitted_thinking(ThinkPlan(200, explicit=True), members, [Message("user", QUESTION)], schema, SETTINGS, 2)
    assert str(refused.value) == (
        f"think: a reasoning budget of 200 tokens does not fit beside the format's instruction in the members' "
        f"context (room for about {fitting_budget(100, 10)}); think less, use a shorter schema or raise n_ctx in "
        "models.toml"
    )
    assert refused.value.field == "think"


def test_an_explicit_budget_whose_room_is_exactly_the_room_left_is_kept():
    room = reasoning_room(40, 10)
    n_ctx = bridged_length() + ROUND + room
    members = [fake_member("a", "x", n_ctx=n_ctx), fake_member("b", "x", n_ctx=n_ctx)]
    asked, schema = [Message("user", QUESTION)], output_format_from(schema=SCHEMA)
    plan, longest = fitted_thinking(ThinkPlan(40, explicit=True), members, asked, schema, SETTINGS, 2)
    assert plan == ThinkPlan(40, explicit=True) and longest == bridged_length() + room


def test_the_room_is_the_smallest_members_and_the_longest_prompt_the_longest_members():
    asked, schema = [Message("user", QUESTION)], output_format_from(schema=SCHEMA)
    bridged = answer_messages(asked, "", schema, "budget")
    small = fake_member("a", "x", n_ctx=bridged_length() + ROUND + 69)
    worded = fake_member("b", "x", n_ctx=4096, words=["Now give", "the final answer"])
    assert len(prompt_tokens(worded, bridged, SETTINGS, 2, True)) < bridged_length()
    plan, longest = fitted_thinking(ThinkPlan(256), [worded, small], asked, schema, SETTINGS, 2)
    assert plan == ThinkPlan(MIN_REASONING) and longest == bridged_length() + reasoning_room(MIN_REASONING, 10)


def test_thinking_in_the_same_turn_keeps_its_plan_and_adds_no_prompt_of_its_own():
    members = [fake_member("a", "x", n_ctx=64)]
    settings = EnsembleSettings(segment_tokens=10, think_bridge="same-turn")
    schema = output_format_from(schema=SCHEMA)
    assert fitted_thinking(ThinkPlan(256), members, [Message("user", QUESTION)], schema, settings, 2) == (
        ThinkPlan(256),
        0,
    )


def test_a_round_holds_every_drafters_segment_and_the_tokens_that_finish_a_word_and_one_more():
    assert round_cells(EnsembleSettings(segment_tokens=10), 2) == 2 * (10 + EXTRA_TOKENS) + 1
    assert round_cells(EnsembleSettings(segment_tokens=10, draft_budget=5), 2, past_segment=0) == 51
    assert round_cells(EnsembleSettings(segment_tokens=10), 0, past_segment=0) == 11


def test_a_prompt_that_leaves_exactly_one_round_fits_and_one_token_more_does_not():
    said = [Message("user", "Hi")]
    length = len(prompt_tokens(fake_member("a", "x"), said, SETTINGS, 1, False))
    fits = fake_member("a", "x", n_ctx=length + 3 + 11)
    assert len(prompt_tokens(fits, said, SETTINGS, 1, False, after=3)) == length
    with pytest.raises(PromptTooLong):
        prompt_tokens(fits, said, SETTINGS, 1, False, after=4)


def test_a_context_exactly_one_rounds_segments_long_is_refused_as_segments_that_do_not_fit():
    with pytest.raises(SpecemError) as refused:
        prompt_tokens(fake_member("a", "x", n_ctx=11), [Message("user", "Hi")], SETTINGS, 1, False)
    assert not isinstance(refused.value, PromptTooLong)
    assert str(refused.value).startswith("segment_tokens = 10 does not fit the context of a (11 tokens for 1 drafters'")
