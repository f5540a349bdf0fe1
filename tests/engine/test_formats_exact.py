"""Formats as asked, held to their exact output: where a format's instruction goes in the
conversation and its words, the tool choice a tools format keeps, and each refusal's words and
field."""

from __future__ import annotations

import pytest

from specem_local.engine.formats import OutputFormat, output_format_from, with_instruction
from specem_local.engine.prompting import Message
from specem_local.engine.tools import ToolChoice
from specem_local.errors import SettingError

ADD = {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}}
ANY_JSON = OutputFormat("json", "", "")
SAID = "Answer with a JSON object only, on one line."


def refusal(**asked) -> tuple[str, str]:
    with pytest.raises(SettingError) as caught:
        output_format_from(**asked)
    return str(caught.value), caught.value.field


def test_any_json_object_is_asked_for_in_these_words():
    assert ANY_JSON.instruction() == SAID


def test_the_instruction_goes_after_the_last_user_message_in_that_message():
    messages = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello")]
    messages += [Message("user", "Your answer?"), Message("assistant", "")]
    told = with_instruction(messages, ANY_JSON)
    assert told == [*messages[:3], Message("user", f"Your answer?\n\n{SAID}"), messages[4]]


def test_without_a_user_message_the_instruction_is_one_of_its_own():
    messages = [Message("system", "Be brief.")]
    assert with_instruction(messages, ANY_JSON) == [messages[0], Message("user", SAID)]


def test_a_tool_choice_without_tools_is_refused_unless_it_allows_a_message():
    assert output_format_from(tool_choice="auto") is None
    assert output_format_from(tool_choice="none") is None
    assert refusal(tool_choice="required") == ("tool_choice needs tools to choose from", "tool_choice")


def test_a_tools_format_keeps_its_choice_and_says_it():
    asked = output_format_from(offered=[ADD], tool_choice="required")
    assert asked is not None and asked.choice == ToolChoice("required")
    assert asked.instruction().endswith(
        'Answer by calling functions: {"tool_calls": [{"name": "...", "arguments": {...}}]}. '
        "Answer with that JSON only, on one line."
    )


def test_a_tools_parameters_out_of_range_are_refused_naming_the_tools_and_where():
    parameters = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 1 << 70}}}
    where = "tools[0].function.parameters.properties.n.maximum"
    said = f"{where}: an integer of 71 bits is out of range (64-bit integers only)"
    assert refusal(offered=[{"name": "f", "parameters": parameters}]) == (said, "tools")


def test_a_grammar_of_too_many_rules_is_refused_naming_the_grammar():
    grammar = "\n".join(f'r{index}: "x"' for index in range(501))
    assert refusal(grammar=grammar) == ("grammar: 501 rules is too many (at most 500)", "grammar")
