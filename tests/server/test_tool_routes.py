"""Tool calls through both APIs in-process, over fake models (issue 38): OpenAI's tool_calls
whole and streamed (id, type and name once, then argument fragments), Ollama's (each call once,
whole), tool results sent back, and each bad request a 400 naming the field with the next
request answered. The official clients and an agent framework against a real ``specem serve``
are in tests/real_models/test_tools.py."""

from __future__ import annotations

import json

import httpx
import openai
import pydantic
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.test_routes import BASE

CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASKED = [{"role": "user", "content": "Weather in Paris?"}]
ASK = {"model": "specem", "messages": ASKED, "tools": [WEATHER], "max_tokens": 80}


@pytest.fixture
async def http():
    ensemble = fake_ensemble(
        fake_member("a", CALL, n_ctx=4096), fake_member("b", '{"response": "Sunny."}', n_ctx=4096), segment_tokens=5
    )
    server = EnsembleServer(ensemble, ServerOptions(queue=2, max_body_bytes=1 << 20, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        yield client
    ensemble.close()


def data_lines(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


async def test_openai_tool_calls_whole_and_streamed_then_the_result_sent_back(http):
    whole = (await http.post("/v1/chat/completions", json=ASK)).json()["choices"][0]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] is None
    [call] = whole["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    chunks = data_lines((await http.post("/v1/chat/completions", json={**ASK, "stream": True})).text)
    pieces = [p for c in chunks if c["choices"] for p in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [p.get("id") is not None for p in pieces].count(True) == 1 and pieces[0]["function"]["name"] == "get_weather"
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["x_specem"]["author"] in ("a", "b", "") for c in chunks[:-1])
    follow = [*ASKED, {**whole["message"]}, {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    answered = await http.post("/v1/chat/completions", json={**ASK, "messages": follow, "tool_choice": "none"})
    message = answered.json()["choices"][0]["message"]
    assert answered.status_code == 200 and isinstance(message["content"], str) and "tool_calls" not in message


async def test_ollama_tool_calls_whole_and_streamed(http):
    body = {"model": "specem", "messages": ASKED, "tools": [WEATHER], "options": {"num_predict": 80}}
    whole = (await http.post("/api/chat", json={**body, "stream": False})).json()
    assert whole["message"]["tool_calls"] == [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    lines = [json.loads(line) for line in (await http.post("/api/chat", json=body)).text.splitlines()]
    calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert calls == whole["message"]["tool_calls"] and lines[-1]["done"]  # each call once, whole
    follow = [*ASKED, whole["message"], {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    again = await http.post("/api/chat", json={**body, "messages": follow, "stream": False})
    assert again.status_code == 200, again.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools"),
        ({"tools": [WEATHER] * 2}, "tools"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"x": {"type": "nonsense"}}},
                        },
                    }
                ]
            },
            "tools",
        ),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "tools"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"messages": [*ASKED, {"role": "tool", "tool_call_id": "call_x", "content": "1"}]}, "messages"),
        (
            {
                "messages": [
                    *ASKED,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{nope"}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c", "content": "1"},
                ]
            },
            "messages",
        ),
    ],
)
async def test_a_bad_tool_request_is_a_400_naming_the_field_and_the_next_answers(http, body, param):
    response = await http.post("/v1/chat/completions", json={**ASK, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and "\n" not in error["message"]
    assert (await http.post("/v1/chat/completions", json=ASK)).json()["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_tool_from_a_nested_pydantic_model_is_called_through_the_openai_route():
    class Point(pydantic.BaseModel):
        x: int
        y: int

    class Move(pydantic.BaseModel):
        to: Point

    tool = openai.pydantic_function_tool(Move)  # its parameters refer to "#/$defs/Point"
    move = '{"tool_calls": [{"name": "Move", "arguments": {"to": {"x": 1, "y": 2}}}]}'
    ensemble = fake_ensemble(fake_member("a", move, n_ctx=4096), fake_member("b", move, n_ctx=4096))
    server = EnsembleServer(ensemble, ServerOptions(queue=2, max_body_bytes=1 << 20, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        reply = await client.post("/v1/chat/completions", json={**ASK, "tools": [tool]})
    ensemble.close()
    assert reply.status_code == 200, reply.text
    [call] = reply.json()["choices"][0]["message"]["tool_calls"]
    assert Move.model_validate_json(call["function"]["arguments"]) == Move(to=Point(x=1, y=2))
