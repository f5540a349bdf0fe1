"""Structured output through both APIs in-process, over fake models (issue 37): OpenAI's
``response_format`` and Ollama's ``format``, streamed and not, each refusal a 400 naming the
request's own field, and the next request answered. The real clients (openai, ollama,
instructor) against a real ``specem serve`` are in tests/real_models/test_structured_clients.py."""

from __future__ import annotations

import json

import httpx
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.test_routes import BASE

REPLY = '{"city": "Paris", "people": 2100000}'
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["city", "people"],
}
ASK = {"model": "specem", "messages": [{"role": "user", "content": "Capital of France?"}], "max_tokens": 80}


@pytest.fixture
async def http():
    ensemble = fake_ensemble(fake_member("a", REPLY), fake_member("b", "Paris, of course.", words=[" Paris"]))
    server = EnsembleServer(ensemble, ServerOptions(queue=2, max_body_bytes=1 << 20, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        yield client
    ensemble.close()


def json_schema(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}


async def test_openai_json_schema_whole_and_streamed(http):
    response = await http.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(SCHEMA)})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert json.loads(choice["message"]["content"]) == {"city": "Paris", "people": 2100000}
    assert choice["finish_reason"] == "stop"
    streaming = {**ASK, "stream": True, "response_format": json_schema(SCHEMA)}
    streamed = await http.post("/v1/chat/completions", json=streaming)
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert json.loads(text)["city"] == "Paris"
    authors = [c["x_specem"]["author"] for c in chunks if c.get("x_specem", {}).get("author") is not None]
    assert "" in authors  # the forced keys: written by no model


async def test_json_object_instructors_schema_form_and_ollamas_format(http):
    whole = await http.post("/v1/chat/completions", json={**ASK, "response_format": {"type": "json_object"}})
    assert isinstance(json.loads(whole.json()["choices"][0]["message"]["content"]), dict)
    instructor = {"type": "json_object", "schema": SCHEMA}
    shaped = await http.post("/v1/chat/completions", json={**ASK, "response_format": instructor})
    assert set(json.loads(shaped.json()["choices"][0]["message"]["content"])) == {"city", "people"}
    ollama = {"model": "specem", "messages": ASK["messages"], "stream": False, "options": {"num_predict": 80}}
    for value in ("json", SCHEMA):
        response = await http.post("/api/chat", json={**ollama, "format": value})
        assert response.status_code == 200, response.text
        assert isinstance(json.loads(response.json()["message"]["content"]), dict)
    generate = {"model": "specem", "prompt": "Capital?", "format": SCHEMA, "stream": False}
    generated = await http.post("/api/generate", json=generate)
    assert json.loads(generated.json()["response"])["city"] == "Paris"
    empty_tools = await http.post("/api/chat", json={**ollama, "format": SCHEMA, "tools": []})
    assert empty_tools.status_code == 200  # the ollama client sends "tools": [] on every call


async def test_a_cut_answer_says_length(http):
    response = await http.post(
        "/v1/chat/completions", json={**ASK, "max_tokens": 5, "response_format": json_schema(SCHEMA)}
    )
    assert response.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        ("/v1/chat/completions", {"response_format": {"type": "xml"}}, "response_format.type", "not one of"),
        (
            "/v1/chat/completions",
            {"response_format": json_schema({"type": "string", "pattern": "(?<=a)b"})},
            "response_format.json_schema.schema",
            "look-around",
        ),
        (
            "/v1/chat/completions",
            {"response_format": {"type": "json_object", "schema": "{"}},
            "response_format.schema",
            "not JSON",
        ),
        (
            "/v1/chat/completions",
            {"response_format": json_schema({"properties": {"a": {"$ref": "#/properties/a"}}, "minimum": 1 << 64})},
            "response_format.json_schema.schema",
            "64-bit integers only",
        ),
        ("/api/chat", {"format": 5}, "format", "JSON Schema object"),
        (
            "/api/chat",
            {"format": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1 << 64}}}},
            "format",
            "64-bit integers only",
        ),
    ],
)
async def test_a_bad_format_is_a_400_naming_the_field_and_the_next_request_answers(http, path, body, param, says):
    base = ASK if path.startswith("/v1") else {"model": "specem", "messages": ASK["messages"], "stream": False}
    response = await http.post(path, json={**base, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert says in message and "\n" not in message
    if isinstance(error, dict):
        assert error["param"] == param and message.startswith(param)
    follow = await http.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(SCHEMA)})
    assert follow.status_code == 200 and json.loads(follow.json()["choices"][0]["message"]["content"])
