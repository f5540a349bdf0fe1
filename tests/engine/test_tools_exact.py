"""Tools as pure functions, held to their exact output: the schema a Python function gives, the
envelope every answer must match, the instruction the members read, a streamed envelope read
without a parser, and each refusal's words and field."""

from __future__ import annotations

import datetime
import json
from typing import Any

import jsonschema
import llguidance
import pytest

from specem_local.engine.format_compiler import byte_tokenizer, compile_format
from specem_local.engine.prompting import Message
from specem_local.engine.tool_stream import StreamedCall, partial_reply
from specem_local.engine.tools import (
    Tool,
    ToolChoice,
    envelope_schema,
    instruction,
    json_type,
    render_messages,
    tools_from,
)
from specem_local.errors import SettingError

ADD = Tool("add", "Adds two numbers", {"type": "object", "properties": {"a": {"type": "number"}}})


def closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def arrays(times: int, inner: dict[str, Any]) -> dict[str, Any]:
    for _ in range(times):
        inner = {"type": "array", "items": inner}
    return inner


def lists(times: int, hint: Any) -> Any:
    for _ in range(times):
        hint = list[hint]
    return hint


def test_tools_that_are_not_a_list_are_refused_naming_the_field():
    with pytest.raises(SettingError) as caught:
        tools_from("add")
    assert str(caught.value) == "tools must be a list of functions" and caught.value.field == "tools"


def test_parameters_that_do_not_say_their_type_are_an_object_schema():
    parameters = {"properties": {"a": {"type": "string"}}}
    assert tools_from([{"name": "f", "parameters": parameters}]) == (Tool("f", "", parameters),)


def test_a_function_whose_type_hints_cannot_be_read_is_refused_with_the_reason():
    def lookup(city: Nowhere) -> str:  # noqa: F821
        return city

    with pytest.raises(SettingError) as caught:
        tools_from([lookup])
    said = "tools[0]: the type hints of lookup cannot be read (name 'Nowhere' is not defined)"
    assert str(caught.value) == said and caught.value.field == "tools"


def test_a_function_taking_keyword_arguments_accepts_extra_arguments():
    def search(query: str, **filters: str) -> list:
        """Search the notes."""
        return [query, filters]

    [tool] = tools_from([search])
    assert tool.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": True,
    }


def test_type_hints_are_their_json_schema():
    assert json_type(int | str | None) == {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}
    assert json_type(list[str]) == {"type": "array", "items": {"type": "string"}}
    assert json_type(tuple) == {"type": "array"}
    assert json_type(datetime.date) == {"type": "string"}  # a class of its own is written as a string


def test_a_hint_is_followed_eight_levels_deep_and_no_deeper():
    assert json_type(lists(8, int)) == arrays(8, {"type": "integer"})
    assert json_type(lists(9, int)) == arrays(9, {})
    assert json_type(lists(7, int | str)) == arrays(7, {"anyOf": [{"type": "integer"}, {"type": "string"}]})
    assert json_type(lists(8, int | str)) == arrays(8, {"anyOf": [{}, {}]})


def test_the_envelope_is_one_call_of_an_offered_function_or_a_message():
    schema = envelope_schema((ADD,), ToolChoice(), parallel=False)
    call = closed({"name": {"const": "add"}, "arguments": ADD.parameters})
    calls = {"type": "array", "items": {"anyOf": [call]}, "minItems": 1, "maxItems": 1}
    assert schema == {"anyOf": [closed({"tool_calls": calls}), closed({"response": {"type": "string"}})]}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"tool_calls": [{"name": "add", "arguments": {"a": 1}}]})
    assert not validator.is_valid({"tool_calls": []})  # no call at all is no answer
    assert not validator.is_valid({"tool_calls": [{"name": "add", "arguments": {}}] * 2})


POINT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
NESTED = Tool("move", "", {"type": "object", "$defs": {"Point": POINT}, "properties": {"to": {"$ref": "#/$defs/Point"},
              "tag": {"const": {"$ref": "#/x"}}}, "required": ["to"]})  # fmt: skip
ZOD = Tool("copy", "", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"},
                        "tree": {"type": "array", "items": {"$ref": "#"}}}})  # fmt: skip


def test_functions_whose_parameters_refer_to_themselves_keep_their_own_definitions_in_the_envelope():
    schema = envelope_schema((ADD, NESTED, ZOD), ToolChoice("required"))
    calls = schema["properties"]["tool_calls"]["items"]["anyOf"]
    assert [call["properties"]["arguments"] for call in calls] == [
        ADD.parameters, {"$ref": "#/$defs/function_move"}, {"$ref": "#/$defs/function_copy"}]  # fmt: skip
    moved = schema["$defs"]["function_move"]
    assert moved["properties"]["to"] == {"$ref": "#/$defs/function_move/$defs/Point"}
    assert moved["properties"]["tag"] == {"const": {"$ref": "#/x"}}  # data, not a reference
    copied = schema["$defs"]["function_copy"]["properties"]
    assert copied["b"] == {"$ref": "#/$defs/function_copy/properties/a"}
    assert copied["tree"]["items"] == {"$ref": "#/$defs/function_copy"}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"tool_calls": [{"name": "move", "arguments": {"to": {"x": 1}}}]})
    assert not validator.is_valid({"tool_calls": [{"name": "move", "arguments": {"to": {"x": "1"}}}]})
    assert validator.is_valid({"tool_calls": [{"name": "copy", "arguments": {"b": "s", "tree": [{"a": "t"}]}}]})
    assert not validator.is_valid({"tool_calls": [{"name": "copy", "arguments": {"tree": [{"b": 2}]}}]})
    grammar = compile_format("tools", json.dumps(schema), "tools").grammar  # llguidance finds them too
    matcher = llguidance.LLMatcher(byte_tokenizer(), grammar, log_level=0)
    good = '{"tool_calls": [{"name": "move", "arguments": {"to": {"x": 12}}}]}'
    assert matcher.consume_tokens(list(good.encode())) and matcher.is_accepting()
    matcher.reset()
    assert not matcher.consume_tokens(list(b'{"tool_calls": [{"name": "move", "arguments": {"to": {"x": "'))


INSTRUCTIONS = {
    ToolChoice(): 'To call functions, answer {"tool_calls": [{"name": "...", "arguments": {...}}]}; to answer the '
    'user directly, answer {"response": "your answer"}.',
    ToolChoice("required"): 'Answer by calling functions: {"tool_calls": [{"name": "...", "arguments": {...}}]}.',
    ToolChoice("none"): 'Do not call a function now: answer with {"response": "your answer"}.',
    ToolChoice("function", "add"): 'Answer by calling add: {"tool_calls": [{"name": "add", "arguments": {...}}]}.',
}


@pytest.mark.parametrize("choice", list(INSTRUCTIONS))
def test_the_instruction_lists_the_tools_as_json_and_says_what_to_answer(choice):
    listed = (
        '[{"name": "add", "description": "Adds two numbers", '
        '"parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}]'
    )
    said = f"You can call these functions:\n{listed}\n{INSTRUCTIONS[choice]} Answer with that JSON only, on one line."
    assert instruction((ADD,), choice) == said


def test_a_streamed_envelope_reads_every_call_after_the_first():
    text = '{"tool_calls": [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]}'
    assert partial_reply(text) == (None, [StreamedCall("f", '{"a": 1}', True), StreamedCall("g", "{}", True)])


def test_a_streamed_message_that_is_not_json_so_far_reads_as_no_text_yet():
    assert partial_reply('{"response": "a bad escape \\q') == ("", [])


def test_a_message_of_parts_is_its_text_parts_joined():
    parts = [
        {"type": "text", "text": "What is "},
        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
        {"type": "text", "text": "this?"},
    ]
    assert render_messages([{"role": "user", "content": parts}]) == [Message("user", "What is this?")]


def test_a_result_answering_an_unknown_call_id_is_refused_naming_the_messages():
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "sunny"}]
    with pytest.raises(SettingError) as caught:
        render_messages(messages)
    said = "messages[1].tool_call_id 'call_x' answers no earlier tool call"
    assert str(caught.value) == said and caught.value.field == "messages"


def test_an_envelope_read_as_it_streams_to_the_letter():
    """Escapes whole and not yet whole, an empty name, a name not yet followed by its arguments
    (``tool_stream.py``'s survivors)."""
    from specem_local.engine.tool_stream import whole_part

    assert partial_reply('{"response": "say \\"hi\\" now') == ('say "hi" now', [])
    for cut in ("\\u00e", "\\u00E", "\\", "\\uD83D", "\\ud83d"):
        assert partial_reply('{"response": "a ' + cut) == ("a ", []), cut
    empty = '{"tool_calls": [{"name": "", "arguments": {}}]}'
    assert partial_reply(empty) == (None, [StreamedCall("", "{}", True)])
    assert [(c.name, c.arguments) for c in whole_part(empty).calls] == [("", {})]
    assert partial_reply('{"tool_calls": [{"name": "f"') == (None, [StreamedCall(None, "", False)])
