"""The doors' defects of stop 65's hostile read, each now a 400 naming its field or read as the
official clients send it: half a surrogate pair in an earlier tool call, a Responses schema of
null, a reasoning object without an effort (and OpenAI's higher efforts), a temperature that
samples on every route, a tool's output as text parts (the Agents SDK's shape)."""

from __future__ import annotations

import json

import httpx
import pytest

from specem_local.server import EnsembleServer, ServerOptions, openai_format, responses_format
from specem_local.server.ollama_format import parse_chat
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.test_hostile_doors import (
    ANSWER,
    ASKED,
    GOOD,
    MESSAGES,
    RESPONSES,
    WEATHER,
    answered,
    http,
    post,
    server,
)
from tests.server.test_routes import BASE

__all__ = ["http", "server"]  # the fixtures

CHAT = "/v1/chat/completions"
HALF = "\ud800"  # half a surrogate pair: no UTF-8 for it


def earlier_call(door: str, arguments: dict, call_id: str = "t1") -> dict:
    """A request whose conversation holds an earlier call of get_weather and its result."""
    if door == MESSAGES:
        return {
            **GOOD[MESSAGES],
            "tools": [WEATHER[MESSAGES]],
            "messages": [
                *ASKED,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call_id, "name": "get_weather", "input": arguments}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "sunny"}]},
            ],
        }
    if door == RESPONSES:
        return {
            **GOOD[RESPONSES],
            "tools": [WEATHER[RESPONSES]],
            "input": [
                *ASKED,
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": "get_weather",
                    "arguments": json.dumps(arguments),
                },
                {"type": "function_call_output", "call_id": call_id, "output": "sunny"},
            ],
        }
    function = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    sent = {"name": "get_weather", "arguments": json.dumps(arguments)}
    called = {"id": call_id, "type": "function", "function": sent}
    return {"model": "specem", "max_tokens": 40, "tools": [function], "messages": [
        *ASKED, {"role": "assistant", "content": None, "tool_calls": [called]},
        {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]}  # fmt: skip


@pytest.mark.parametrize("door", [CHAT, RESPONSES, MESSAGES])
@pytest.mark.parametrize(("arguments", "call_id"), [({"city": HALF}, "t1"), ({"city": "Paris"}, "t" + HALF)])
async def test_half_a_surrogate_in_an_earlier_tool_call_is_a_400_and_the_next_is_answered(
    http, door, arguments, call_id
):
    response = await post(http, door, earlier_call(door, arguments, call_id))
    assert response.status_code == 400, response.text
    assert "is not valid Unicode text" in response.text and "Traceback" not in response.text
    await answered(http, MESSAGES if door == MESSAGES else RESPONSES)
    assert (await post(http, door, earlier_call(door, {"city": "Paris"}))).status_code == 200


def test_a_responses_schema_of_null_is_any_json_as_on_chat():
    text = {"format": {"type": "json_schema", "name": "x", "schema": None}}
    asked = responses_format.parse_request({"input": "hi", "text": text}).ask
    chat = openai_format.parse_request({"messages": ASKED, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": None}}}).ask  # fmt: skip
    assert asked.output is not None and asked.output.schema == {} == chat.output.schema


@pytest.mark.parametrize(
    ("reasoning", "think"),
    [({"summary": "auto"}, None), ({"effort": None}, None), ({"effort": "xhigh"}, "high"), ({"effort": "max"}, "high"),
     ({"effort": "minimal"}, "low"), ({"effort": "none"}, False)],
)  # fmt: skip
def test_reasoning_without_an_effort_is_the_default_and_the_higher_efforts_are_high(reasoning, think):
    assert responses_format.parse_request({"input": "hi", "reasoning": reasoning}).ask.think == think


def test_a_temperature_above_0_samples_on_every_route_and_0_is_greedy():
    responses = responses_format.parse_request({"input": "hi", "temperature": 0.9}).ask.settings
    ollama = parse_chat({"model": "specem", "messages": ASKED, "options": {"temperature": 0.9}}).ask.settings
    chat = openai_format.parse_request({"messages": ASKED, "temperature": 0.9}).ask.settings
    assert responses["greedy"] is ollama["greedy"] is chat["greedy"] is False  # a server's greedy = true is undone
    assert responses_format.parse_request({"input": "hi", "temperature": 0}).ask.settings["greedy"] is True
    assert parse_chat({"model": "specem", "messages": ASKED, "options": {"temperature": 0}}).ask.settings["greedy"]
    assert "greedy" not in responses_format.parse_request({"input": "hi"}).ask.settings


async def test_a_tools_output_as_text_parts_is_read_as_its_text(http: httpx.AsyncClient):
    parts = [{"type": "input_text", "text": "sun"}, {"type": "input_text", "text": "ny"}]
    body = earlier_call(RESPONSES, {"city": "Paris"})
    body["input"][-1]["output"] = parts
    asked = responses_format.parse_request(body).ask
    assert asked.prompt[-1] == {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
    assert (await post(http, RESPONSES, body)).status_code == 200


@pytest.mark.parametrize("previous", ["resp_" + HALF, "x" * 300, "resp_ü"])
async def test_a_previous_response_id_none_of_ours_is_a_400_that_names_no_file(tmp_path, monkeypatch, previous):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))  # a server that records: the history keeps responses
    recording = EnsembleServer(
        fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER)), ServerOptions(record=True)
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=recording.app), base_url=BASE) as client:
        response = await post(client, RESPONSES, {**GOOD[RESPONSES], "previous_response_id": previous})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "previous_response_id" and str(tmp_path) not in error["message"]
        assert error["code"] == "previous_response_not_found"
        said = error["message"]
        assert repr(previous[:60]) in said and (len(previous) <= 60 or previous[:61] not in said)
        await answered(client, RESPONSES)
    recording.ensemble.close()


NAMED = {"type": "function", "name": "get_weather"}


@pytest.mark.parametrize(
    ("sent", "shown"),
    [({}, ("auto", True)), ({"tool_choice": "required", "parallel_tool_calls": False}, ("required", False)),
     ({"tool_choice": NAMED}, (NAMED, True)),
     ({"tool_choice": "none"}, ("none", True))],
)  # fmt: skip
async def test_a_response_echoes_the_tool_choice_and_parallel_calls_it_was_sent(http: httpx.AsyncClient, sent, shown):
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    reply = await post(http, RESPONSES, {"model": "specem", "input": "Weather?", "tools": tools, **sent})
    assert reply.status_code == 200
    assert (reply.json()["tool_choice"], reply.json()["parallel_tool_calls"]) == shown


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"include": ["message.output_text.logprobs"]}, "include"), ({"top_logprobs": 3}, "top_logprobs")],
)
async def test_token_logprobs_asked_of_the_responses_route_are_a_400_that_says_where_they_are(http, extra, field):
    refused = await post(http, RESPONSES, {"model": "specem", "input": "hi", **extra})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == field
    assert "/v1/chat/completions" in refused.json()["error"]["message"]
    kept = await post(http, RESPONSES, {"model": "specem", "input": "hi", "include": ["reasoning.encrypted_content"]})
    assert kept.status_code == 200  # what Codex and the Agents SDK send is no request for logprobs


async def test_a_reasoning_effort_that_leaves_no_room_is_a_400_naming_the_field_it_came_in(http):
    body = {"model": "specem", "input": "hi", "reasoning": {"effort": "high"}, "max_output_tokens": 40,
            "text": {"format": {"type": "json_object"}}}  # fmt: skip
    refused = await post(http, RESPONSES, body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "reasoning.effort"
    assert refused.json()["error"]["message"].startswith("reasoning.effort: a reasoning budget of 512 tokens")
