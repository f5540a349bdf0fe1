"""Anthropic's Messages API as plain functions (no server, no models): a body as the ask (the
conversation with its tool uses and results in the engine's OpenAI shape, the settings, tools,
thinking), every refusal with its status, Anthropic's error type and message, the whole
``message`` and the stream's named events in order. The same through the ``anthropic`` client
against a live server: test_anthropic_routes.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from specem_local.engine import Ask, FormatAsk, ToolCall, ToolReply
from specem_local.errors import SettingError
from specem_local.events import Event, StartEvent
from specem_local.server import anthropic_format as an
from specem_local.server import anthropic_output as ao
from specem_local.server.errors import ApiError, HttpError, anthropic_error_body, http_error
from specem_local.server.replies import Whole
from tests.server.test_replies import final_of, round_of

ASKED = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FUNCTION = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city", "parameters": WEATHER["input_schema"]},
}
MEMBERS = ("a", "b")
START = StartEvent(("a", "b"), ("a", "b"), {"a": 0.5, "b": 0.5}, {"a": 12, "b": 15}, False)


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "specem", "max_tokens": 64, "messages": ASKED, **fields}


def refusal(sent: Any) -> tuple[int, dict[str, Any]]:
    """The status and the body a client reads for a refused request."""
    with pytest.raises(ApiError) as caught:
        an.parse_request(sent, MEMBERS)
    said = http_error(caught.value)
    return said.status, said.body("/v1/messages")


def error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def test_a_whole_conversation_with_tool_uses_and_results_becomes_the_engines_ask():
    conversation = [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris", "cache_control": {"type": "x"}},
                                     {"type": "text", "text": "and Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two cities.", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "no station"}, {"type": "text", "text": "try later"}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": False},
            {"type": "text", "text": "Well?"},
            {"type": "text", "text": "Quick."},
        ]},
    ]  # fmt: skip
    parsed = an.parse_request(
        body(
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric."}],
            messages=conversation,
            temperature=0,
            top_p=0.9,
            top_k=20,
            stop_sequences=["END"],
            stream=True,
            tools=[WEATHER, {**WEATHER, "name": "get_time", "type": "custom", "description": None}],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 100},
            metadata={"user_id": "u1"},
            service_tier="auto",
            anything_else={"tolerated": True},
        )
    )
    calls = [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
    ]
    messages = [
        {"role": "system", "content": "Be brief.\nUse metric."},
        {"role": "user", "content": "Weather in Paris\nand Rome?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no station\ntry later"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
        {"role": "user", "content": "Well?\nQuick."},
    ]
    time = {
        "type": "function",
        "function": {"name": "get_time", "description": None, "parameters": WEATHER["input_schema"]},
    }
    settings = {"max_tokens": 64, "temperature": 0, "greedy": True, "top_p": 0.9, "top_k": 20, "stop": ["END"]}
    output = FormatAsk(tools=[FUNCTION, time], tool_choice="required", parallel_tool_calls=False)
    assert parsed.messages == messages and parsed.ask == Ask(messages, settings, output, 100)
    assert (parsed.stream, parsed.tools) == (True, True)
    assert parsed.fields == {
        "stop": "stop_sequences",
        "think": "thinking.budget_tokens",
        "schema": "output_config.format.schema",
    }
    assert parsed.id.startswith("msg_") and len(parsed.id) == 28 and parsed.id != an.parse_request(body()).id


def test_a_member_named_answers_alone_and_the_message_says_which():
    alone = an.parse_request(body(model="specem/b"), MEMBERS)
    assert alone.ask.models == ("b",) and alone.model == "specem/b"
    assert ao.message(alone, Whole(START, final_of("x")))["model"] == "specem/b"
    [(_, started)] = ao.StreamedMessage(alone).of(START)
    assert started["message"]["model"] == "specem/b"
    ensemble = an.parse_request(body(model="specem"), MEMBERS)
    assert ensemble.ask.models is None and ensemble.model == "specem"


def test_a_plain_request_is_the_users_text_and_max_tokens_alone():
    parsed = an.parse_request(body(system="", temperature=0.5, stream=None, tools=[], stop_sequences=[]))
    assert parsed.messages == ASKED and parsed.ask == Ask(
        ASKED, {"max_tokens": 64, "temperature": 0.5, "greedy": False}
    )
    assert (parsed.stream, parsed.tools) == (False, False)
    prefill = [*ASKED, {"role": "assistant", "content": [{"type": "text", "text": "It is"}]}]
    assert an.parse_request(body(messages=prefill)).messages[-1] == {"role": "assistant", "content": "It is"}
    system = an.parse_request(body(system="Be brief."))
    assert system.messages == [{"role": "system", "content": "Be brief."}, *ASKED]


@pytest.mark.parametrize(
    ("choice", "engine", "parallel"),
    [
        ({"type": "auto"}, "auto", True),
        ({"type": "any"}, "required", True),
        ({"type": "none"}, "none", True),
        ({"type": "tool", "name": "get_weather"}, "get_weather", True),
        ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": False}, "get_weather", True),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        (None, None, True),
    ],
)
def test_tool_choice_is_the_engines(choice, engine, parallel):
    output = an.parse_request(body(tools=[WEATHER], tool_choice=choice)).ask.output
    assert output == FormatAsk(tools=[FUNCTION], tool_choice=engine, parallel_tool_calls=parallel)


@pytest.mark.parametrize("choice", [{"type": "auto"}, {"type": "none"}, None])
def test_auto_or_none_without_tools_is_no_format(choice):
    assert an.parse_request(body(tool_choice=choice)).ask.output is None


@pytest.mark.parametrize(
    ("thinking", "think"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, 1024),
        ({"type": "enabled", "budget_tokens": 0}, 0),
        ({"type": "disabled"}, False),
        ({"type": "adaptive"}, True),
        (None, None),
    ],
)
def test_thinking_is_think(thinking, think):
    asked = an.parse_request(body(thinking=thinking)).ask.think
    assert asked == think and type(asked) is type(think)  # 0 tokens is not False


@pytest.mark.parametrize(
    ("max_tokens", "budget", "think"),
    [(32000, 31999, 31936), (200, 180, 136), (200, 136, 136), (200, 200, 200), (200, -1, -1), (64, 10, 10)],
)
def test_a_budget_below_max_tokens_is_fitted_to_leave_the_answer_its_64(max_tokens, budget, think):
    """As Anthropic's API takes it (Claude Code's ultrathink: 31,999 of 32,000); one of max_tokens
    or more, a negative one, or max_tokens too small to leave 64 are refused where every budget is."""
    thinking = {"type": "enabled", "budget_tokens": budget}
    assert an.parse_request(body(max_tokens=max_tokens, thinking=thinking)).ask.think == think


@pytest.mark.parametrize("where", ["output_config", "output_format"])
def test_a_json_schema_output_is_the_answers_schema(where):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    shaped = {"type": "json_schema", "schema": schema}
    value = {"format": shaped, "effort": "low"} if where == "output_config" else shaped
    parsed = an.parse_request(body(**{where: value}))
    named = "output_config.format.schema" if where == "output_config" else "output_format.schema"
    assert parsed.ask.output == FormatAsk(schema=schema) and parsed.fields["schema"] == named
    with pytest.raises(ApiError) as both:
        an.parse_request(body(**{where: value}, tools=[WEATHER]))
    where_named = named.removesuffix(".schema")
    assert both.value.param == where_named and both.value.message == (
        f"{where_named} and tools cannot be given together here: the ensemble writes one format per answer; drop one"
    )
    assert an.parse_request(body(output_config={"effort": "high"})).ask.output is None


REQUEST = "invalid_request_error"
SERVED = "this server serves 'specem' and each member alone: 'specem/a', 'specem/b'"
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
CALLED: list[dict[str, Any]] = [*ASKED, {"role": "assistant", "content": [TOOL_USE]}]


UNANSWERED = (
    "messages[%d]: tool_use ids were found without tool_result blocks immediately after: %s. Each tool_use "
    "block must have a corresponding tool_result block in the next message"
)


def result(**fields: Any) -> list[dict[str, Any]]:
    return [*CALLED, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", **fields}]}]


@pytest.mark.parametrize(
    ("sent", "status", "kind", "message"),
    [
        ([], 400, REQUEST, "the request body must be a JSON object"),
        ({"max_tokens": 5, "messages": ASKED}, 400, REQUEST, "model: Field required; this server serves 'specem'"),
        (body(model=3), 400, REQUEST, "model must be a string such as 'specem'"),
        (body(model=["specem"]), 400, REQUEST, "model must be a string such as 'specem'"),
        (body(mcp_servers=[{"type": "url", "url": "https://example.com/sse", "name": "ex"}]), 400, REQUEST,
         "mcp_servers: the specem ensemble connects to no MCP server a request names (its Responses route offers "
         "those specem serve --mcp started)"),
        (body(model="claude-sonnet-4-5"), 404, "not_found_error",
         f"the model 'claude-sonnet-4-5' does not exist; {SERVED}"),
        (body(model="x" * 100), 404, "not_found_error", f"the model {'x' * 80!r} does not exist; {SERVED}"),
        (body(model="specem/c"), 404, "not_found_error", f"the model 'specem/c' does not exist; {SERVED}"),
        (body(max_tokens=None), 400, REQUEST, "max_tokens: Field required (the most tokens the answer may take)"),
        (body(stream="yes"), 400, REQUEST, "stream must be true or false"),
        (body(stream=1), 400, REQUEST, "stream must be true or false"),
        (body(stop_sequences="END"), 400, REQUEST, "stop_sequences must be an array of strings"),
        (body(stop_sequences=["a", 1]), 400, REQUEST, "stop_sequences must be an array of strings"),
        (body(system=5), 400, REQUEST, "system must be a string or an array of text blocks"),
        (body(system=[{"type": "image", "source": {}}]), 400, REQUEST,
         "system[0]: a block of type 'image' is not supported here; send text blocks"),
        (body(system=["text"]), 400, REQUEST, "system[0]: a str is not supported here; send text blocks"),
        (body(system=[{"text": "x"}]), 400, REQUEST,
         'system[0]: a block without a "type" is not supported here; send text blocks'),
        (body(system=[{"type": "text", "text": 3}]), 400, REQUEST,
         "system[0]: a block of type 'text' is not supported here; send text blocks"),
        (body(messages=[]), 400, REQUEST, "messages must be a non-empty array"),
        (body(messages={"role": "user"}), 400, REQUEST, "messages must be a non-empty array"),
        (body(messages=["hi"]), 400, REQUEST, "messages[0] must be an object"),
        (body(messages=[{"role": "system", "content": "x"}, *ASKED]), 400, REQUEST,
         "messages[0].role must be user or assistant, got 'system' (system goes in system)"),
        (body(messages=[{"content": "x"}]), 400, REQUEST,
         "messages[0].role must be user or assistant, got None (system goes in system)"),
        (body(messages=[{"role": "user", "content": 5}]), 400, REQUEST,
         "messages[0].content must be a string or an array of content blocks"),
        (body(messages=[{"role": "user"}]), 400, REQUEST,
         "messages[0].content must be a string or an array of content blocks"),
        (body(messages=[{"role": "user", "content": []}]), 400, REQUEST, "messages[0].content must not be empty"),
        (body(messages=[{"role": "user", "content": [{"type": "text", "text": "Look"}, {"type": "image"}]}]), 400,
         REQUEST, "messages[0].content[1]: a block of type 'image' is not supported by the specem ensemble "
         "(it reads text and tool_result blocks)"),
        (body(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]), 400, REQUEST,
         "messages[0].content[0]: a block of type 'document' is not supported by the specem ensemble "
         "(it reads text and tool_result blocks)"),
        (body(messages=[{"role": "user", "content": [TOOL_USE]}]), 400, REQUEST,
         "messages[0].content[0]: tool_use blocks belong in the other role's messages"),
        (body(messages=[*ASKED, {"role": "assistant", "content": [{"type": "image"}]}]), 400, REQUEST,
         "messages[1].content[0]: a block of type 'image' is not supported by the specem ensemble "
         "(it reads text, tool_use and thinking blocks)"),
        (body(messages=[*ASKED, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]),
         400, REQUEST, "messages[1].content[0]: tool_result blocks belong in the other role's messages"),
        (body(messages=[{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}]), 400, REQUEST,
         "messages[0].content[0]: thinking blocks belong in the other role's messages"),
        (body(messages=[{"role": "user", "content": [7]}]), 400, REQUEST,
         "messages[0].content[0]: a int is not supported by the specem ensemble (it reads text and tool_result "
         "blocks)"),
        (body(messages=[{"role": "user", "content": [{"type": "text"}]}]), 400, REQUEST,
         "messages[0].content[0].text must be a string"),
        (body(messages=[{"role": "user", "content": "half an emoji \ud83d"}]), 400, REQUEST,
         "messages[0].content is not valid Unicode (a lone surrogate, such as half an emoji)"),
        (body(messages=[{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]), 400, REQUEST,
         "messages[0].content[0].text is not valid Unicode (a lone surrogate, such as half an emoji)"),
        (body(messages=[*ASKED, {"role": "assistant", "content": [{**TOOL_USE, "id": ""}]}]), 400, REQUEST,
         "messages[1].content[0].id must be a non-empty string"),
        (body(messages=[*ASKED, {"role": "assistant", "content": [{**TOOL_USE, "name": None}]}]), 400, REQUEST,
         "messages[1].content[0].name must be a non-empty string"),
        (body(messages=[*ASKED, {"role": "assistant", "content": [{**TOOL_USE, "input": "{}"}]}]), 400, REQUEST,
         "messages[1].content[0].input must be an object"),
        (body(messages=CALLED), 400, REQUEST,
         "messages: the last message must be the user's (or the start of the assistant's answer after it)"),
        (body(messages=[{"role": "assistant", "content": "Hi"}]), 400, REQUEST,
         "messages: the last message must be the user's (or the start of the assistant's answer after it)"),
        (body(messages=[*ASKED, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]), 400,
         REQUEST, "messages: the last message must be the user's (or the start of the assistant's answer after it)"),
        (body(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]), 400,
         REQUEST, "messages[0].content[0].tool_use_id 'toolu_1' answers no tool_use block of the message before"),
        (body(messages=result(tool_use_id="toolu_9")), 400, REQUEST,
         "messages[2].content[0].tool_use_id 'toolu_9' answers no tool_use block of the message before"),
        (body(messages=[*CALLED, {"role": "user", "content": [{"type": "tool_result"}]}]), 400, REQUEST,
         "messages[2].content[0].tool_use_id None answers no tool_use block of the message before"),
        (body(messages=[*CALLED, {"role": "user", "content": "And?"}]), 400, REQUEST, UNANSWERED % (2, "toolu_1")),
        (body(messages=[*CALLED, {"role": "user", "content": [{"type": "text", "text": "And?"}]}]), 400, REQUEST,
         UNANSWERED % (2, "toolu_1")),
        (body(messages=[*ASKED, {"role": "assistant", "content": [TOOL_USE, {**TOOL_USE, "id": "toolu_2"}]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]}]), 400,
         REQUEST, UNANSWERED % (2, "toolu_1")),
        (body(messages=[*CALLED, {"role": "assistant", "content": "Hm."}, {"role": "user", "content": "And?"}]), 400,
         REQUEST, UNANSWERED % (2, "toolu_1")),
        (body(messages=[*result(), {"role": "assistant", "content": "Sunny."},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]), 400,
         REQUEST, "messages[4].content[0].tool_use_id 'toolu_1' answers no tool_use block of the message before"),
        (body(messages=result(is_error="yes")), 400, REQUEST, "messages[2].content[0].is_error must be true or false"),
        (body(messages=result(is_error=1)), 400, REQUEST, "messages[2].content[0].is_error must be true or false"),
        (body(messages=result(content=[{"type": "image", "source": {}}])), 400, REQUEST,
         "messages[2].content[0].content[0]: a block of type 'image' is not supported here; send text blocks"),
        (body(messages=result(content={"text": "x"})), 400, REQUEST,
         "messages[2].content[0].content must be a string or an array of text blocks"),
        (body(tools={"name": "x"}), 400, REQUEST, "tools must be an array of tools"),
        (body(tools=0), 400, REQUEST, "tools must be an array of tools"),
        (body(tools=["get_weather"]), 400, REQUEST, "tools[0] must be an object"),
        (body(tools=[WEATHER, {"type": "web_search_20250305", "name": "web_search"}]), 400, REQUEST,
         "tools[1].type 'web_search_20250305' is a tool Anthropic's servers run or define; the specem ensemble "
         "serves custom tools (name, description, input_schema)"),
        (body(tools=[{"type": "bash_20250124", "name": "bash"}]), 400, REQUEST,
         "tools[0].type 'bash_20250124' is a tool Anthropic's servers run or define; the specem ensemble "
         "serves custom tools (name, description, input_schema)"),
        (body(tools=[{"name": "get_weather"}]), 400, REQUEST, "tools[0].input_schema must be a JSON Schema object"),
        (body(tools=[{**WEATHER, "input_schema": "{}"}]), 400, REQUEST,
         "tools[0].input_schema must be a JSON Schema object"),
        (body(tools=[WEATHER], tool_choice="auto"), 400, REQUEST,
         'tool_choice must be an object with a "type": auto, any, tool or none'),
        (body(tools=[WEATHER], tool_choice={"type": "required"}), 400, REQUEST,
         'tool_choice must be an object with a "type": auto, any, tool or none'),
        (body(tools=[WEATHER], tool_choice={"type": "tool"}), 400, REQUEST,
         'tool_choice.name must name a tool with "type": "tool"'),
        (body(tools=[WEATHER], tool_choice={"type": "any", "disable_parallel_tool_use": 1}), 400, REQUEST,
         "tool_choice.disable_parallel_tool_use must be true or false"),
        (body(tool_choice={"type": "any"}), 400, REQUEST, 'tool_choice "any" needs tools to choose from'),
        (body(tool_choice={"type": "tool", "name": "get_weather"}), 400, REQUEST,
         'tool_choice "tool" needs tools to choose from'),
        (body(thinking=True), 400, REQUEST, 'thinking must be an object with a "type": enabled, disabled or adaptive'),
        (body(thinking={"type": "on"}), 400, REQUEST,
         'thinking must be an object with a "type": enabled, disabled or adaptive'),
        (body(thinking={"type": "enabled"}), 400, REQUEST, "thinking.budget_tokens: Field required"),
        (body(thinking={"type": "enabled", "budget_tokens": True}), 400, REQUEST,
         "thinking.budget_tokens: must be an integer, got True"),
        (body(thinking={"type": "enabled", "budget_tokens": "high"}), 400, REQUEST,
         "thinking.budget_tokens: must be an integer, got 'high'"),
        (body(thinking={"type": "enabled", "budget_tokens": 100.0}), 400, REQUEST,
         "thinking.budget_tokens: must be an integer, got 100.0"),
        (body(output_config="json"), 400, REQUEST, "output_config must be an object"),
        (body(output_config={"format": {"type": "json_object"}}), 400, REQUEST,
         'output_config.format must be {"type": "json_schema", "schema": {...}}'),
        (body(output_format={"type": "json_schema", "schema": True}), 400, REQUEST,
         'output_format must be {"type": "json_schema", "schema": {...}}'),
    ],
)  # fmt: skip
def test_each_refusal_is_its_status_and_anthropics_error_naming_the_field(sent, status, kind, message):
    assert refusal(sent) == (status, error(kind, message))


def test_errors_take_anthropics_shape_under_v1_messages_only():
    said = HttpError(400, "tools: no good", param="tools")
    assert said.body("/v1/messages") == error(REQUEST, "tools: no good")
    assert said.body("/v1/messages/count_tokens") == error(REQUEST, "tools: no good")
    assert said.body("/v1/messagesx") == {
        "error": {"message": "tools: no good", "type": REQUEST, "param": "tools", "code": None}
    }
    assert said.body("/v1/chat/completions")["error"]["param"] == "tools" and said.body("/api/chat") == {
        "error": "tools: no good"
    }
    unnamed = HttpError(400, "must be a number", param="temperature")  # the field said first when not named
    assert unnamed.body("/v1/messages") == error(REQUEST, "temperature: must be a number")


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, REQUEST), (401, "authentication_error"), (403, "permission_error"), (404, "not_found_error"),
     (405, REQUEST), (413, "request_too_large"), (415, REQUEST), (429, "rate_limit_error"), (499, REQUEST),
     (500, "api_error"), (502, "api_error"), (503, "overloaded_error"), (529, "overloaded_error")],
)  # fmt: skip
def test_each_status_is_anthropics_error_type(status, kind):
    assert anthropic_error_body(status, "said") == error(kind, "said")


def test_a_setting_the_engine_refuses_names_the_requests_own_field():
    fields = an.parse_request(body()).fields
    for setting, sent in (("stop", "stop_sequences"), ("think", "thinking.budget_tokens")):
        said = http_error(SettingError(f"{setting}: no good", setting), fields).body("/v1/messages")
        assert said == error(REQUEST, f"{sent}: no good")


# -- responses -----------------------------------------------------------------------------------
def whole_message(final_text: str = "Hi.", **fields: Any) -> dict[str, Any]:
    final = dataclasses.replace(final_of(final_text), **fields)
    return ao.message(an.parse_request(body()), Whole(START, final))


def test_a_whole_answer_is_a_message():
    parsed = an.parse_request(body())
    sent = ao.message(parsed, Whole(START, final_of("Paris.")))
    facts = sent.pop("x_specem")
    assert sent == {
        "id": parsed.id,
        "type": "message",
        "role": "assistant",
        "model": "specem",
        "content": [{"type": "text", "text": "Paris."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 15, "output_tokens": 9},
    }
    assert facts["wins"] == {"a": 3} and facts["specem_finish_reason"] == "eos"
    assert whole_message("")["content"] == []  # nothing said: no block
    thought = whole_message("42", reasoning="6 * 7.")["content"]
    assert thought == [{"type": "thinking", "thinking": "6 * 7.", "signature": ""}, {"type": "text", "text": "42"}]


def test_a_tool_reply_is_its_tool_uses_and_stops_for_them():
    parsed = an.parse_request(body(tools=[WEATHER]))
    calls = (ToolCall("get_weather", {"city": "Paris"}, "call_abc"), ToolCall("get_weather", {"city": "Rome"}))
    sent = ao.message(parsed, Whole(START, final_of("{}", parsed=ToolReply(calls))))
    assert sent["content"][0] == {
        "type": "tool_use",
        "id": "toolu_abc",
        "name": "get_weather",
        "input": {"city": "Paris"},
    }
    assert (
        sent["content"][1]["id"] == "toolu_" + calls[1].id.removeprefix("call_") and sent["stop_reason"] == "tool_use"
    )
    said = ao.message(parsed, Whole(START, final_of("{}", parsed=ToolReply(content="Sunny."))))
    assert said["content"] == [{"type": "text", "text": "Sunny."}] and said["stop_reason"] == "end_turn"
    cut = final_of('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"na', "length")
    whole_calls = ao.message(parsed, Whole(START, cut))
    assert [b["input"] for b in whole_calls["content"]] == [{"city": "Paris"}]  # what of it is whole
    assert whole_calls["stop_reason"] == "max_tokens"
    plain = ao.message(an.parse_request(body()), Whole(START, final_of('{"response": "x"}', parsed=ToolReply(calls))))
    assert plain["content"] == [{"type": "text", "text": '{"response": "x"}'}]  # no tools offered: text as written


@pytest.mark.parametrize(
    ("finish", "stops", "matched", "reason", "sequence"),
    [
        ("eos", [], "", "end_turn", None),
        ("empty", [], "", "end_turn", None),
        ("cancelled", None, "", "end_turn", None),
        ("length", [], "", "max_tokens", None),
        ("context", [], "", "model_context_window_exceeded", None),
        ("stop", ["END"], "END", "stop_sequence", "END"),
        ("stop", ["END", "STOP"], "STOP", "stop_sequence", "STOP"),  # the one the ensemble met
        ("eos", ["END"], "", "end_turn", None),
    ],
)
def test_how_it_stopped_in_anthropics_words(finish, stops, matched, reason, sequence):
    parsed = an.parse_request(body(stop_sequences=stops))
    final = dataclasses.replace(final_of("x", finish), stop_sequence=matched)
    sent = ao.message(parsed, Whole(START, final))
    assert (sent["stop_reason"], sent["stop_sequence"]) == (reason, sequence)
    assert ao.StreamedMessage(parsed).of(final)[-2][1]["delta"] == {
        "stop_reason": reason,
        "stop_sequence": sequence,
    }


def test_a_streamed_answer_is_anthropics_events_in_order_each_block_opened_and_closed():
    parsed = an.parse_request(body(tools=[WEATHER]))
    writer = ao.StreamedMessage(parsed)
    call = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
    said = [
        *writer.of(START),
        *writer.of(round_of("Two ", 1, "reasoning")),
        *writer.of(round_of("cities.", 2, "reasoning")),
        *writer.of(round_of('{"response": "Hi', 3)),
        *writer.of(round_of(" there", 4)),
        *writer.of(round_of("", 5)),
    ]
    tools = ao.StreamedMessage(parsed)
    tools.of(START)
    called = tools.of(round_of(call, 1))
    ended = writer.of(final_of("x"))
    names = [name for name, _ in said + ended]
    assert names == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    assert all(data["type"] == name for name, data in said + ended)
    assert said[0][1]["message"] == {
        "id": parsed.id, "type": "message", "role": "assistant", "model": "specem", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 15, "output_tokens": 0},
    }  # fmt: skip
    assert said[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    }
    assert said[2][1]["delta"] == {"type": "thinking_delta", "thinking": "Two "} and said[2][1]["index"] == 0
    assert said[2][1]["x_specem"]["author"] == "a" and said[3][1]["x_specem"]["round"] == 2
    assert said[4][1] == {"type": "content_block_stop", "index": 0}
    assert said[5][1]["content_block"] == {"type": "text", "text": ""} and said[5][1]["index"] == 1
    assert [d[1]["delta"] for d in said[6:8]] == [
        {"type": "text_delta", "text": "Hi"},
        {"type": "text_delta", "text": " there"},
    ]
    assert ended[0][1] == {"type": "content_block_stop", "index": 1}
    facts = ended[1][1].pop("x_specem")
    assert ended[1][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 15, "output_tokens": 9},
    }
    assert facts["wins"] == {"a": 3} and ended[2][1] == {"type": "message_stop"}
    [(_, start), (_, delta), (_, stop)] = called  # a call: its block whole, its input in one delta
    assert start["index"] == delta["index"] == stop["index"] == 0 and start["content_block"]["input"] == {}
    assert start["content_block"]["id"].startswith("toolu_") and start["content_block"]["name"] == "get_weather"
    assert delta["delta"] == {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}


def test_a_stream_that_says_nothing_still_starts_and_stops_and_a_call_after_thinking_closes_it():
    parsed = an.parse_request(body(tools=[WEATHER]))
    empty = ao.StreamedMessage(parsed)
    assert [name for name, _ in empty.of(final_of(""))] == ["message_start", "message_delta", "message_stop"]
    assert [name for name, _ in empty.of(final_of(""))] == ["message_delta", "message_stop"]  # started once
    writer = ao.StreamedMessage(parsed)
    said = writer.of(round_of('{"response": "Hi"}', 1))  # no start event first: the message starts anyway
    assert [name for name, _ in said] == ["message_start", "content_block_start", "content_block_delta"]
    assert said[0][1]["message"]["usage"]["input_tokens"] == 0
    thinker = ao.StreamedMessage(parsed)
    thinker.of(START)
    thinker.of(round_of("Paris.", 1, "reasoning"))
    call = thinker.of(round_of('{"tool_calls": [{"name": "get_weather", "arguments": {}}]}', 2))
    assert [(name, data["index"]) for name, data in call] == [
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
    ]
    ended = thinker.of(final_of("x"))
    assert [name for name, _ in ended] == ["message_delta", "message_stop"]  # nothing open: nothing to close


async def events_of(*events: Event, fail: Exception | None = None) -> AsyncIterator[Event]:
    for event in events:
        yield event
    if fail is not None:
        raise fail


def sse(parsed: an.Request, events: AsyncIterator[Event]) -> list[dict[str, str]]:
    """The Server-Sent Events ``sse_events`` makes of these events, collected."""

    async def collect() -> list[dict[str, str]]:
        return [sent async for sent in ao.sse_events(parsed, events)]

    return asyncio.run(collect())


def test_the_sse_events_are_named_with_their_json_and_a_failure_is_an_error_event():
    parsed = an.parse_request(body())
    sent = sse(parsed, events_of(START, round_of("Hi\u2028there\n", 1), final_of("x")))
    assert [s["event"] for s in sent] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop",
    ]  # fmt: skip
    assert json.loads(sent[2]["data"])["delta"]["text"] == "Hi\u2028there\n" and "\n" not in sent[2]["data"]
    failed = sse(parsed, events_of(START, fail=RuntimeError("decode failed")))
    assert failed[-1] == {
        "event": "error",
        "data": json.dumps(error("api_error", "the answer failed: RuntimeError: decode failed")),
    }
    refused = sse(parsed, events_of(fail=SettingError("think: too much", "think")))
    assert refused == [{"event": "error", "data": json.dumps(error(REQUEST, "think: too much"))}]


@pytest.mark.parametrize(
    ("sent", "field"),
    [(body(stop_sequences="END"), "stop_sequences"), (body(stop_sequences=[1]), "stop_sequences"),
     (body(thinking=True), "thinking"), (body(thinking={"type": "on"}), "thinking")],
)  # fmt: skip
def test_each_refusal_names_the_requests_field_it_found_wrong(sent, field):
    """Anthropic's error body carries no field; the error keeps it, as every route's does."""
    with pytest.raises(ApiError) as caught:
        an.parse_request(sent, MEMBERS)
    assert caught.value.param == field


def test_what_the_start_said_rides_in_x_specem_and_every_delta_carries_its_rounds_facts():
    parsed = an.parse_request(body(tools=[WEATHER]))
    start = dataclasses.replace(START, absent={"c": "its file is missing"}, notes=("the format is approximate",))
    said = {"absent": {"c": "its file is missing"}, "notes": ["the format is approximate"]}
    whole = ao.message(parsed, Whole(start, final_of("Paris.")))["x_specem"]
    assert {key: whole[key] for key in said} == said
    writer = ao.StreamedMessage(parsed)
    writer.of(start)
    text = writer.of(round_of('{"response": "Hi', 3))
    assert text[-1][1]["x_specem"]["round"] == 3 and text[-1][1]["x_specem"]["author"] == "a"
    ended = writer.of(final_of("x"))[-2][1]["x_specem"]
    assert {key: ended[key] for key in said} == said
    called = ao.StreamedMessage(parsed)
    called.of(start)
    [_, (_, delta), _] = called.of(round_of('{"tool_calls": [{"name": "get_weather", "arguments": {}}]}', 4))
    assert delta["delta"]["type"] == "input_json_delta" and delta["x_specem"]["round"] == 4


@pytest.mark.parametrize(
    ("text", "phase"),
    [("Hmm.", "reasoning"), ('{"tool_calls": [{"name": "get_weather", "arguments": {}}]}', "answer")],
)
def test_a_stream_whose_first_event_is_a_thought_or_a_call_still_starts_with_the_message(text, phase):
    said = ao.StreamedMessage(an.parse_request(body(tools=[WEATHER]))).of(round_of(text, 1, phase))
    assert [name for name, _ in said][:2] == ["message_start", "content_block_start"]


def test_text_and_arguments_go_out_as_utf8_never_escaped():
    """Anthropic's API sends UTF-8 as it is: a client reading the raw stream sees the text."""
    parsed = an.parse_request(body(tools=[WEATHER]))
    sent = sse(parsed, events_of(START, round_of('{"response": "Zürich', 1), final_of("x")))
    assert '"text": "Zürich"' in sent[2]["data"]
    writer = ao.StreamedMessage(parsed)
    writer.of(START)
    call = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Zürich"}}]}'
    [_, (_, delta), _] = writer.of(round_of(call, 1))
    assert delta["delta"]["partial_json"] == '{"city": "Zürich"}'
