"""Issue 43 over the server, in-process on fake models: each case a hostile client or a new
user with a real schema sent, then a good request. No crash, no stall of the event loop, no 500;
each wrong answer of the outside pass is right, or refused by a documented rule."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from specem_local.engine import formats
from specem_local.engine.format_compiler import FormatCompiler
from specem_local.server import EnsembleServer, ServerOptions
from tests.conftest import poll_until
from tests.engine.conftest import fake_ensemble, fake_member
from tests.engine.test_formats import chain
from tests.server.test_routes import BASE
from tests.server.test_structured import ASK, REPLY, SCHEMA, json_schema

CALL = '{"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "text": "a long text to write"}}]}'
WRITE_FILE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"],
        },
    },
}
OLLAMA = {"model": "specem", "messages": ASK["messages"], "stream": False}


def serve(*members) -> tuple[EnsembleServer, httpx.AsyncClient]:
    server = EnsembleServer(fake_ensemble(*members), ServerOptions(queue=2, max_body_bytes=1 << 20, record=False))
    return server, httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE)


@pytest.fixture
async def http():
    server, client = serve(fake_member("a", REPLY), fake_member("b", "Paris, of course.", words=[" Paris"]))
    async with client:
        yield client
    server.ensemble.close()


async def answered(http: httpx.AsyncClient) -> None:
    """The good request after a bad one: a whole answer matching the schema."""
    response = await http.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(SCHEMA)})
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["choices"][0]["message"]["content"]) == json.loads(REPLY)


def error_of(response: httpx.Response) -> tuple[str, str | None]:
    error = response.json()["error"]
    return (error["message"], error["param"]) if isinstance(error, dict) else (error, None)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"response_format": json_schema(chain(900))}, "response_format.json_schema.schema"),
        ("/api/chat", {"format": chain(900)}, "format"),
        (
            "/v1/chat/completions",
            {"tools": [{**WRITE_FILE, "function": {**WRITE_FILE["function"], "parameters": chain(900)}}]},
            "tools",
        ),
    ],
)
async def test_a_chain_of_references_that_segfaulted_the_server_is_a_400_naming_the_field(http, path, body, param):
    base = ASK if path.startswith("/v1") else OLLAMA
    response = await http.post(path, json={**base, **body})
    assert response.status_code == 400, response.text
    message, named = error_of(response)
    assert "levels deep with its references followed" in message and "\n" not in message
    assert named in (param, None) and message.startswith(param)
    await answered(http)


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("schema", {"type": "integer", "maximum": 1 << 64}, "an integer of 65 bits is out of range"),
        ("schema", {"type": "string", "enum": ["\ud800"]}, "not valid Unicode"),
        ("schema", {"type": "number", "minimum": float("nan")}, "nan is not a JSON number"),
        ("tools", {"type": "object", "properties": {"n": {"type": "integer", "minimum": -(1 << 70)}}}, "71 bits"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
async def test_numbers_past_64_bits_surrogates_and_nan_are_400s_naming_the_field(http, path, where, value, says):
    if where == "tools":
        body = {"tools": [{**WRITE_FILE, "function": {**WRITE_FILE["function"], "parameters": value}}]}
        param = "tools"
    elif path == "/api/chat":
        body, param = {"format": value}, "format"
    else:
        body, param = {"response_format": json_schema(value)}, "response_format.json_schema.schema"
    text = json.dumps({**(ASK if path.startswith("/v1") else OLLAMA), **body})  # NaN and surrogates as JSON has them
    response = await http.post(path, content=text, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    message, named = error_of(response)
    assert says in message and message.startswith(param) and named in (param, None)
    await answered(http)


def nested(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range((levels - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


async def test_the_schema_depth_limit_over_http_is_the_documented_64_and_names_the_field():
    def depth(value: object) -> int:
        return 1 + max((depth(v) for v in value.values() if isinstance(v, dict)), default=0)  # type: ignore[union-attr]

    deep, deeper = nested(63), nested(65)
    assert depth(deep) <= 64 < depth(deeper)
    server, http = serve(fake_member("a", REPLY, n_ctx=4096), fake_member("b", REPLY, n_ctx=4096))
    async with http:
        short = {**ASK, "max_tokens": 4}
        accepted = await http.post("/v1/chat/completions", json={**short, "response_format": json_schema(deep)})
        refused = await http.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(deeper)})
    server.ensemble.close()
    assert accepted.status_code == 200, accepted.text
    message, param = error_of(refused)
    assert refused.status_code == 400 and param == "response_format.json_schema.schema" and "64 levels" in message


async def test_a_slow_compile_runs_off_the_event_loop(http, monkeypatch):
    stalling = FormatCompiler(seconds=1.5, command=["python3", "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(formats, "compiler", lambda: stalling)

    body = {**ASK, "response_format": json_schema(SCHEMA)}
    slow = asyncio.ensure_future(http.post("/v1/chat/completions", json=body))
    # the child is compiling the schema (waited for in a thread: the event loop goes on)
    await asyncio.to_thread(poll_until, lambda: stalling._process is not None, 10, "the compile never started")
    assert (await http.get("/health")).status_code == 200
    assert stalling._process is not None and not slow.done()  # answered while the compile still ran
    response = await slow
    assert response.status_code == 400 and "took longer than 1.5 s to compile" in response.text
    stalling.close()
    monkeypatch.undo()
    await answered(http)


async def test_stop_never_cuts_a_formatted_answer_and_says_so(http):
    body = {**ASK, "stop": ["Paris"], "response_format": json_schema(SCHEMA)}
    whole = (await http.post("/v1/chat/completions", json=body)).json()
    assert json.loads(whole["choices"][0]["message"]["content"]) == json.loads(REPLY)
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert any("stop strings are not applied" in note for note in whole["x_specem"]["notes"])
    ollama = await http.post("/api/chat", json={**OLLAMA, "format": SCHEMA, "options": {"stop": ["Paris"]}})
    assert json.loads(ollama.json()["message"]["content"]) == json.loads(REPLY)


async def test_a_null_schema_is_any_json_not_plain_text():
    server, client = serve(fake_member("a", "Paris is big."), fake_member("b", "It is Paris."))
    spec = {"type": "json_schema", "json_schema": {"name": "x", "schema": None}}
    async with client:
        response = await client.post("/v1/chat/completions", json={**ASK, "max_tokens": 30, "response_format": spec})
    server.ensemble.close()
    content = response.json()["choices"][0]["message"]["content"]
    assert not content.startswith("Paris") and not content.startswith("It")  # prose is not JSON: constrained


async def test_a_tool_reply_cut_by_max_tokens_hands_on_whole_calls_never_the_envelope():
    server, client = serve(fake_member("a", CALL, n_ctx=2048), fake_member("b", CALL, n_ctx=2048))
    body = {**ASK, "tools": [WRITE_FILE], "max_tokens": 20}
    async with client:
        whole = (await client.post("/v1/chat/completions", json=body)).json()
        streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
        ollama = await client.post(
            "/api/chat", json={**OLLAMA, "tools": [WRITE_FILE], "options": {"num_predict": 20}, "stream": True}
        )
    server.ensemble.close()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "length" and whole["x_specem"]["specem_finish_reason"] == "length"
    assert choice["message"]["content"] is None
    assert "tool_calls" not in choice["message"]  # the one call was cut: none is whole
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert not any(d.get("tool_calls") for d in deltas) and not any(
        "tool_calls" in (d.get("content") or "") for d in deltas
    )
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    lines = [json.loads(line) for line in ollama.text.splitlines()]
    assert lines[-1]["done"] and lines[-1]["done_reason"] == "length"
    assert all("tool_calls" not in line["message"]["content"] for line in lines)


async def test_a_streamed_call_comes_whole_with_its_own_index():
    two = '{"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "text": "b"}}, ' \
          '{"name": "write_file", "arguments": {"path": "c", "text": "d"}}]}'  # fmt: skip
    server, client = serve(fake_member("a", two, n_ctx=2048), fake_member("b", two, n_ctx=2048))
    async with client:
        body = {**ASK, "tools": [WRITE_FILE], "stream": True, "max_tokens": 400}
        streamed = await client.post("/v1/chat/completions", json=body)
    server.ensemble.close()
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    pieces = [p for c in chunks if c["choices"] for p in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [p["index"] for p in pieces] == [0, 1]
    assert [json.loads(p["function"]["arguments"]) for p in pieces] == [
        {"path": "a", "text": "b"},
        {"path": "c", "text": "d"},
    ]


async def test_an_assistant_prefix_under_a_schema_is_continued_not_restarted(http):
    prefix = '{"city": "Par'
    messages = [*ASK["messages"], {"role": "assistant", "content": prefix}]
    response = await http.post(
        "/v1/chat/completions", json={**ASK, "messages": messages, "response_format": json_schema(SCHEMA)}
    )
    assert response.status_code == 200, response.text
    rest = response.json()["choices"][0]["message"]["content"]
    assert json.loads(prefix + rest) == json.loads(REPLY)
    wrong = [*ASK["messages"], {"role": "assistant", "content": "Sure! {"}]
    refused = await http.post(
        "/v1/chat/completions", json={**ASK, "messages": wrong, "response_format": json_schema(SCHEMA)}
    )
    assert refused.status_code == 400 and "start of the answer does not match the format" in refused.text
    await answered(http)


async def test_ollamas_load_request_checks_its_format(http):
    response = await http.post("/api/chat", json={"model": "specem", "messages": [], "format": chain(900)})
    assert response.status_code == 400 and "references followed" in response.text
    loaded = await http.post("/api/chat", json={"model": "specem", "messages": [], "format": SCHEMA})
    assert loaded.status_code == 200 and loaded.json()["done_reason"] == "load"


async def test_a_schema_too_long_for_the_context_says_so_not_start_a_new_chat():
    server, client = serve(fake_member("a", REPLY, n_ctx=256), fake_member("b", REPLY, n_ctx=256))
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 40} for i in range(6)}}
    async with client:
        response = await client.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(schema)})
    server.ensemble.close()
    message, param = error_of(response)
    assert response.status_code == 400 and param == "messages"
    assert "with the format's instructions" in message and "a shorter schema or fewer tools" in message
    assert "new chat" not in message


async def test_each_route_applies_the_requests_own_schema_to_members_that_disagree():
    """The members want a key the schema forbids: only the schema itself, applied on the way
    from the request to the answer, keeps it out (any JSON object, or none, would let it in)."""
    extra = '{"city": "Paris", "people": 2100000, "river": "Seine"}'
    closed = {**SCHEMA, "additionalProperties": False}
    server, client = serve(*(fake_member(name, extra, runner_up="}") for name in "ab"))
    async with client:
        openai_whole = await client.post("/v1/chat/completions", json={**ASK, "response_format": json_schema(closed)})
        streamed = await client.post(
            "/v1/chat/completions", json={**ASK, "stream": True, "response_format": json_schema(closed)}
        )
        ollama = await client.post("/api/chat", json={**OLLAMA, "format": closed})
        generate = await client.post(
            "/api/generate", json={"model": "specem", "prompt": "Capital?", "format": closed, "stream": False}
        )
    server.ensemble.close()
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    texts = [
        openai_whole.json()["choices"][0]["message"]["content"],
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]),
        ollama.json()["message"]["content"],
        generate.json()["response"],
    ]
    assert [json.loads(text) for text in texts] == [json.loads(REPLY)] * 4


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
async def test_a_streamed_request_with_a_bad_schema_is_a_400_before_any_token(http, path):
    if path == "/api/chat":
        body = {**OLLAMA, "stream": True, "format": chain(900)}
    else:
        body = {**ASK, "stream": True, "response_format": json_schema(chain(900))}
    response = await http.post(path, json=body)
    assert response.status_code == 400 and "data:" not in response.text and "references followed" in response.text
    await answered(http)


async def test_ollamas_format_streamed_joins_to_the_schemas_json():
    extra = '{"city": "Paris", "people": 2100000, "river": "Seine"}'
    server, client = serve(*(fake_member(name, extra, runner_up="}") for name in "ab"))
    closed = {**SCHEMA, "additionalProperties": False}
    async with client:
        streamed = await client.post("/api/chat", json={**OLLAMA, "stream": True, "format": closed})
    server.ensemble.close()
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert lines[-1]["done"] and lines[-1]["done_reason"] == "stop"
    assert json.loads("".join(line["message"]["content"] for line in lines)) == json.loads(REPLY)
