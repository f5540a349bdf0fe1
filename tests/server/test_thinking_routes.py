"""Think first, then the format, over both APIs (issue 46), on fake members: where each
ecosystem looks for the reasoning (OpenAI's ``reasoning_content`` and reasoning tokens, streamed
before the content; Ollama's ``thinking``), how much to think (``reasoning_effort``,
``reasoning``, ``reasoning_budget_tokens``, Ollama's ``think``), and each bad value a 400 naming
the request's own field, then a good request."""

from __future__ import annotations

import json

import httpx
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble
from tests.engine.test_thinking import REPLY, SCHEMA, WORKING, thinker
from tests.server.test_routes import BASE
from tests.server.test_structured import json_schema

ASK = {"model": "specem", "messages": [{"role": "user", "content": "Six times seven?"}], "max_tokens": 200}
OLLAMA = {"model": "specem", "messages": ASK["messages"], "stream": False, "options": {"num_predict": 200}}


@pytest.fixture
async def http():
    ensemble = fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=128)
    server = EnsembleServer(ensemble, ServerOptions(queue=2, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        yield client
    ensemble.close()


async def test_openai_whole_answer_has_the_reasoning_apart_and_its_tokens_counted(http):
    response = await http.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(SCHEMA)})
    body = response.json()
    message = body["choices"][0]["message"]
    assert message["content"] == REPLY and message["reasoning_content"] == WORKING
    details = body["usage"]["completion_tokens_details"]
    assert 0 < details["reasoning_tokens"] < body["usage"]["completion_tokens"]


async def test_openai_streams_the_reasoning_before_the_content(http):
    response = await http.post(
        "/v1/chat/completions", json={**ASK, "stream": True, "response_format": json_schema(SCHEMA)}
    )
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    kinds = [
        "reasoning" if "reasoning_content" in d else "content"
        for d in deltas
        if d.get("reasoning_content") or d.get("content")
    ]
    assert kinds == sorted(kinds, key=["reasoning", "content"].index) and set(kinds) == {"reasoning", "content"}
    assert "".join(d.get("reasoning_content", "") for d in deltas) == WORKING
    assert "".join(d.get("content") or "" for d in deltas) == REPLY


@pytest.mark.parametrize(
    "asked", [{"reasoning_effort": "none"}, {"reasoning": {"effort": "none"}}, {"reasoning_budget_tokens": 0}]
)
async def test_openai_thinking_off_writes_the_format_at_once(http, asked):
    response = await http.post("/v1/chat/completions", json={**ASK, **asked, "response_format": json_schema(SCHEMA)})
    message = response.json()["choices"][0]["message"]
    assert "reasoning_content" not in message and "completion_tokens_details" not in response.json()["usage"]


@pytest.mark.parametrize(
    ("asked", "param", "says"),
    [
        ({"reasoning_effort": "lots"}, "reasoning_effort", "must be one of none, minimal, low, medium, high"),
        ({"reasoning": "high"}, "reasoning", "must be an object"),
        ({"reasoning": {"effort": 3}}, "reasoning.effort", "must be one of"),
        ({"reasoning_effort": []}, "reasoning_effort", "must be one of none, minimal, low, medium, high"),
        ({"reasoning_effort": {}}, "reasoning_effort", "must be one of none, minimal, low, medium, high"),
        ({"reasoning": {"effort": ["high"]}}, "reasoning.effort", "must be one of"),
        ({"reasoning_budget_tokens": []}, "reasoning_budget_tokens", "must be true, false"),
        ({"reasoning_budget_tokens": {}}, "reasoning_budget_tokens", "must be true, false"),
        ({"reasoning_budget_tokens": -5}, "reasoning_budget_tokens", "must be 0 to 32,768 tokens"),
        ({"reasoning_budget_tokens": "x"}, "reasoning_budget_tokens", "must be true, false, one of"),
        ({"reasoning_budget_tokens": 180}, "reasoning_budget_tokens", "leaves the answer 20 of max_tokens = 200"),
        ({"reasoning_effort": "low", "reasoning_budget_tokens": 5}, "reasoning_budget_tokens", "not both"),
    ],
)
async def test_openai_bad_thinking_is_a_400_naming_the_field_and_the_next_request_answers(http, asked, param, says):
    response = await http.post("/v1/chat/completions", json={**ASK, **asked, "response_format": json_schema(SCHEMA)})
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == param and says in error["message"], error
    following = await http.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(SCHEMA)})
    assert following.json()["choices"][0]["message"]["content"] == REPLY


async def test_without_a_format_the_thinking_fields_are_taken_and_change_nothing(http):
    response = await http.post("/v1/chat/completions", json={**ASK, "reasoning_effort": "high", "max_tokens": 60})
    message = response.json()["choices"][0]["message"]
    assert response.status_code == 200 and "reasoning_content" not in message and message["content"].startswith("Six")


async def test_ollama_think_gives_message_thinking_and_generate_thinking(http):
    chat = (await http.post("/api/chat", json={**OLLAMA, "format": SCHEMA, "think": True})).json()
    assert chat["message"]["content"] == REPLY and chat["message"]["thinking"] == WORKING
    off = (await http.post("/api/chat", json={**OLLAMA, "format": SCHEMA, "think": False})).json()
    assert "thinking" not in off["message"] and off["message"]["content"] == REPLY
    generate = {"model": "specem", "prompt": "Six times seven?", "format": SCHEMA, "think": "low", "stream": False}
    generated = (await http.post("/api/generate", json={**generate, "options": {"num_predict": 200}})).json()
    assert generated["response"] == REPLY and generated["thinking"] == WORKING
    streamed = await http.post("/api/chat", json={**OLLAMA, "stream": True, "format": SCHEMA, "think": True})
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert "".join(line["message"].get("thinking", "") for line in lines) == WORKING
    assert "".join(line["message"]["content"] for line in lines) == REPLY


@pytest.mark.parametrize("think", ["max", 0, 1, ["high"], [], {}, {"level": "high"}])
async def test_ollama_bad_think_is_a_400_and_the_next_request_answers(http, think):
    response = await http.post("/api/chat", json={**OLLAMA, "format": SCHEMA, "think": think})
    assert response.status_code == 400 and "think must be" in response.json()["error"]
    assert (await http.post("/api/chat", json={**OLLAMA, "format": SCHEMA})).json()["message"]["content"] == REPLY
