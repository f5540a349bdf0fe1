"""The hostile cases of the earlier passes (test_routes.py, test_hostile_formats.py, test_line.py,
issue 24's repros) replayed at the two newer doors, OpenAI's Responses API (``POST /v1/responses``)
and Anthropic's Messages API (``POST /v1/messages``), over fake models: a body too large, too
deep, not JSON or not an object; each main field of the wrong type; unknown fields and nulls; a
foreign ``Host`` or ``Origin``; a body that is not declared JSON; wrong methods; clients that hang
up mid-stream and while they wait. Each refusal has its exact status and the door's own error
shape (OpenAI's ``{"error": {"message", "type", "param", "code"}}``, Anthropic's ``{"type":
"error", "error": {"type", "message"}}``), never a 500, and the next good request is answered."""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import hypothesis
import pytest

from specem_local.engine.answer_stream import AnswerStream
from specem_local.events import RoundEvent
from specem_local.server import EnsembleServer, ServerOptions
from specem_local.server.app import MAX_JSON_DEPTH
from specem_research import fuzz
from tests.conftest import poll_until
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import health, serving
from tests.server.test_routes import BASE

RESPONSES, MESSAGES = "/v1/responses", "/v1/messages"
DOORS = (RESPONSES, MESSAGES)
ANSWER = "Paris is the capital."
LIMIT = 4096  # --max-body-bytes of these servers
ASKED = [{"role": "user", "content": "Capital of France?"}]
GOOD = {
    RESPONSES: {"model": "specem", "input": "Capital of France?", "max_output_tokens": 40},
    MESSAGES: {"model": "specem", "max_tokens": 40, "messages": ASKED},
}
WEATHER = {  # a function tool as each door has it
    RESPONSES: {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
    MESSAGES: {"name": "get_weather", "input_schema": {"type": "object"}},
}


@dataclass(frozen=True)
class Refusal:
    message: str
    kind: str  # OpenAI's error type, or Anthropic's
    param: str | None  # OpenAI's field; Anthropic's errors have none (the message names it)


def refusal(response: httpx.Response, door: str, status: int) -> Refusal:
    """The refusal, once its status and the door's error shape (exactly those keys) are checked."""
    assert response.status_code == status, response.text
    body = response.json()
    if door == MESSAGES:
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"} and body["error"]["message"], body
        return Refusal(body["error"]["message"], body["error"]["type"], None)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return Refusal(body["error"]["message"], body["error"]["type"], body["error"]["param"])


def text_of(door: str, body: dict[str, Any]) -> str:
    """A whole answer's text as each door writes it."""
    if door == MESSAGES:
        assert body["type"] == "message", body
        return "".join(block["text"] for block in body["content"] if block["type"] == "text")
    assert body["object"] == "response", body
    return "".join(part["text"] for item in body["output"] if item["type"] == "message" for part in item["content"])


def post(http: httpx.AsyncClient, door: str, body: Any, **headers: str):
    """``body`` as JSON text (NaN and the rest as Python writes them), declared JSON unless told."""
    return http.post(door, content=json.dumps(body), headers={"content-type": "application/json", **headers})


async def answered(http: httpx.AsyncClient, door: str) -> None:
    """The good request after a bad one is answered in full."""
    response = await post(http, door, GOOD[door])
    assert response.status_code == 200, response.text
    assert text_of(door, response.json()) == ANSWER


@pytest.fixture
def server() -> Iterator[EnsembleServer]:
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=4096), fake_member("b", ANSWER, n_params=500, n_ctx=4096),
                             segment_tokens=4)  # fmt: skip
    served = EnsembleServer(ensemble, ServerOptions(queue=2, max_body_bytes=LIMIT, record=False))
    yield served
    ensemble.close()


@pytest.fixture
async def http(server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        yield client


# -- the body as a whole ---------------------------------------------------------------------------
@pytest.mark.parametrize("door", DOORS)
async def test_a_body_over_the_limit_is_a_413_declared_or_streamed_and_the_next_is_answered(http, door):
    said = f"the request body is larger than {LIMIT} bytes"
    kind = "request_too_large" if door == MESSAGES else "invalid_request_error"
    declared = await post(http, door, {**GOOD[door], "pad": "x" * LIMIT})
    assert refusal(declared, door, 413) == Refusal(said, kind, None)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        yield json.dumps(GOOD[door])[:-1].encode() + b', "pad": "'
        for _ in range(LIMIT // 1000 + 1):
            yield b"x" * 1000

    streamed = await http.post(door, content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in streamed.request.headers
    assert refusal(streamed, door, 413) == Refusal(said, kind, None)
    await answered(http, door)


def nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("door", DOORS)
async def test_a_body_nested_past_the_limit_is_a_400_before_it_is_parsed(http, door):
    at_limit = await post(http, door, {**GOOD[door], "pad": nested(MAX_JSON_DEPTH - 1)})  # the body's {} is one
    assert at_limit.status_code == 200 and text_of(door, at_limit.json()) == ANSWER  # an unknown field: ignored
    said = Refusal(f"the request body is nested more than {MAX_JSON_DEPTH} levels deep", "invalid_request_error", None)
    past = await post(http, door, {**GOOD[door], "pad": nested(MAX_JSON_DEPTH)})
    assert refusal(past, door, 400) == said
    deep = await http.post(door, content=b"[" * 4000, headers={"content-type": "application/json"})
    assert refusal(deep, door, 400) == said  # issue 24's repro (deep enough to exhaust json's stack): a 500 then
    await answered(http, door)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "the request body is not valid JSON"),
        (b"{nope", "the request body is not valid JSON"),
        (b"\xff", "the request body is not valid JSON"),
        (b'{"model": "specem",', "the request body is not valid JSON"),
        (b"[1, 2]", "the request body must be a JSON object"),
        (b'"Capital of France?"', "the request body must be a JSON object"),
        (b"null", "the request body must be a JSON object"),
        (b"42", "the request body must be a JSON object"),
    ],
)
async def test_a_body_that_is_not_json_or_not_an_object_is_a_400_and_the_next_is_answered(http, door, raw, says):
    refused = refusal(await http.post(door, content=raw, headers={"content-type": "application/json"}), door, 400)
    assert refused.message.startswith(says) and refused.kind == "invalid_request_error" and refused.param is None
    await answered(http, door)


@pytest.mark.parametrize("door", DOORS)
async def test_an_integer_of_thousands_of_digits_is_a_400_not_a_500(door):
    ensemble = fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER))
    server = EnsembleServer(ensemble, ServerOptions(queue=2, record=False))  # 1 MiB: room for the number
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as http:
        text = json.dumps({**GOOD[door], "temperature": 0}).replace('"temperature": 0', '"temperature": ' + "9" * 5000)
        response = await http.post(door, content=text, headers={"content-type": "application/json"})
        said = "the request body holds a number too long (over 4,300 digits)"
        assert refusal(response, door, 400) == Refusal(said, "invalid_request_error", None)
        await answered(http, door)
    ensemble.close()


# -- each field ------------------------------------------------------------------------------------
TOOLS = {"tools": [WEATHER[RESPONSES]]}


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"input": 5}, 400, "input"),
        ({"input": {"role": "user", "content": "hi"}}, 400, "input"),
        ({"input": []}, 400, "input"),
        ({"input": None}, 400, "input"),  # required: null is absent, and absent is refused
        ({"input": [5]}, 400, "input[0]"),
        ({"input": [{"role": "user", "content": 5}]}, 400, "input[0].content"),
        ({"input": [{"role": 7, "content": "hi"}]}, 400, "input[0].role"),
        ({"input": [{"type": "function_call_output", "call_id": 5, "output": "x"}]}, 400, "input[0].call_id"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, 400, "input[0].type"),
        ({"instructions": 5}, 400, "instructions"),
        ({"instructions": ["Be brief."]}, 400, "instructions"),
        ({"tools": 5}, 400, "tools"),
        ({"tools": {"type": "function"}}, 400, "tools"),
        ({"tools": 0}, 400, "tools"),  # 0 == False in Python: never "no tools"
        ({"tools": [5]}, 400, "tools[0].type"),
        ({"tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
        ({"tools": [{**WEATHER[RESPONSES], "parameters": 5}]}, 400, "tools"),
        ({**TOOLS, "tool_choice": 5}, 400, "tool_choice"),
        ({**TOOLS, "tool_choice": "sometimes"}, 400, "tool_choice"),
        ({**TOOLS, "parallel_tool_calls": "yes"}, 400, "parallel_tool_calls"),
        ({"text": {"format": 5}}, 400, "text.format.type"),
        ({"text": {"format": {"type": "yaml"}}}, 400, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, 400, "text.format"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}}, 400, "text.format.schema"),
        ({"max_output_tokens": "many"}, 400, "max_output_tokens"),
        ({"max_output_tokens": True}, 400, "max_output_tokens"),  # true == 1 in Python: never a number
        ({"max_output_tokens": 2.5}, 400, "max_output_tokens"),
        ({"max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"max_output_tokens": [40]}, 400, "max_output_tokens"),
        ({"temperature": "hot"}, 400, "temperature"),
        ({"temperature": True}, 400, "temperature"),
        ({"temperature": math.nan}, 400, "temperature"),
        ({"temperature": -1}, 400, "temperature"),
        ({"top_p": "x"}, 400, "top_p"),
        ({"stream": "yes"}, 400, "stream"),
        ({"stream": 1}, 400, "stream"),
        ({"store": "no"}, 400, "store"),
        ({"store": 0}, 400, "store"),
        ({"previous_response_id": 5}, 400, "previous_response_id"),
        ({"previous_response_id": ["resp_1"]}, 400, "previous_response_id"),
        ({"previous_response_id": "resp_never_made"}, 400, "previous_response_id"),
        ({"reasoning": 5}, 400, "reasoning"),
        ({"reasoning": {"effort": "extreme"}}, 400, "reasoning.effort"),
        ({"tools": [{**WEATHER[RESPONSES], "name": ["f"]}]}, 400, "tools[0].name"),
        ({"max_tool_calls": -1}, 400, "max_tool_calls"),
        ({"max_tool_calls": "2"}, 400, "max_tool_calls"),
        ({"max_tool_calls": True}, 400, "max_tool_calls"),
        (
            {
                "input": [
                    *ASKED,
                    {
                        "type": "function_call_output",
                        "call_id": "c1",
                        "output": [{"type": "input_image", "image_url": "data:,"}],
                    },
                ]
            },
            400,
            "input[1].output[0]",
        ),
        ({"model": 5}, 404, "model"),
        ({"model": "gpt-4o"}, 404, "model"),
        ({"background": True}, 400, "background"),
        ({"n": 2}, 400, "n"),
    ],
)
async def test_a_responses_field_of_the_wrong_type_is_a_400_naming_it_and_the_next_is_answered(
    http, change, status, param
):
    refused = refusal(await post(http, RESPONSES, {**GOOD[RESPONSES], **change}), RESPONSES, status)
    assert refused.param == param, refused
    assert refused.kind == ("not_found_error" if status == 404 else "invalid_request_error")
    await answered(http, RESPONSES)


@pytest.mark.parametrize(
    ("change", "status", "said"),
    [
        ({"messages": 5}, 400, "messages must be a non-empty array"),
        ({"messages": {"role": "user", "content": "hi"}}, 400, "messages must be a non-empty array"),
        ({"messages": []}, 400, "messages must be a non-empty array"),
        ({"messages": None}, 400, "messages must be a non-empty array"),
        ({"messages": [5]}, 400, "messages[0] must be an object"),
        ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content must be"),
        ({"messages": [{"role": "system", "content": "hi"}]}, 400, "messages[0].role must be user or assistant"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, 400, "messages[0].content[0]"),
        ({"system": 5}, 400, "system must be a string or an array of text blocks"),
        ({"system": {"type": "text", "text": "x"}}, 400, "system must be a string or an array of text blocks"),
        ({"system": [5]}, 400, "system[0]: a int is not supported here"),
        ({"system": [{"type": "text", "text": 5}]}, 400, "system[0]: a block of type 'text'"),
        ({"tools": 5}, 400, "tools must be an array of tools"),
        ({"tools": {"name": "get_weather"}}, 400, "tools must be an array of tools"),
        ({"tools": 0}, 400, "tools must be an array of tools"),  # 0 == False in Python: never "no tools"
        ({"tools": [5]}, 400, "tools[0] must be an object"),
        ({"tools": [{"name": "get_weather"}]}, 400, "tools[0].input_schema must be a JSON Schema object"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400, "tools[0].type 'web_search_"),
        ({"tool_choice": 5}, 400, "tool_choice must be an object"),
        ({"tool_choice": "auto"}, 400, "tool_choice must be an object"),
        ({"tool_choice": {"type": "sometimes"}}, 400, "tool_choice must be an object"),
        ({"tool_choice": {"type": "any"}}, 400, 'tool_choice "any" needs tools'),
        ({"tools": [WEATHER[MESSAGES]], "tool_choice": {"type": "tool"}}, 400, "tool_choice.name must name a tool"),
        ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}}, 400,
         "tool_choice.disable_parallel_tool_use must be true or false"),
        ({"output_config": 5}, 400, "output_config must be an object"),
        ({"output_config": {"format": 5}}, 400, "output_config.format must be"),
        ({"output_config": {"format": {"type": "json_schema", "schema": 5}}}, 400, "output_config.format must be"),
        ({"output_config": {"format": {"type": "json_object"}}}, 400, "output_config.format must be"),
        ({"output_format": 5}, 400, "output_format must be"),
        ({"max_tokens": None}, 400, "max_tokens: Field required"),
        ({"max_tokens": "many"}, 400, "max_tokens must be an integer"),
        ({"max_tokens": True}, 400, "max_tokens must be an integer"),  # true == 1 in Python: never a number
        ({"max_tokens": 2.5}, 400, "max_tokens must be an integer"),
        ({"max_tokens": 0}, 400, "max_tokens must be in"),
        ({"max_tokens": [40]}, 400, "max_tokens must be an integer"),
        ({"temperature": "hot"}, 400, "temperature must be a number"),
        ({"temperature": True}, 400, "temperature must be a number"),
        ({"temperature": math.nan}, 400, "temperature must be a finite number"),
        ({"temperature": -1}, 400, "temperature must be"),
        ({"top_p": "x"}, 400, "top_p must be a number"),
        ({"top_k": 2.5}, 400, "top_k must be an integer"),
        ({"stop_sequences": "x"}, 400, "stop_sequences must be an array of strings"),
        ({"stop_sequences": [1]}, 400, "stop_sequences must be an array of strings"),
        ({"stream": "yes"}, 400, "stream must be true or false"),
        ({"stream": 1}, 400, "stream must be true or false"),
        ({"thinking": 5}, 400, "thinking must be an object"),
        ({"thinking": {"type": "enabled"}}, 400, "thinking.budget_tokens: Field required"),
        ({"metadata": 5}, 400, "metadata must be an object"),
        ({"metadata": ["user-1"]}, 400, "metadata must be an object"),
        ({"metadata": {"user_id": 5}}, 400, "metadata.user_id must be a string"),
        ({"model": None}, 400, "model: Field required"),
        ({"model": 5}, 400, "model must be a string such as 'specem'"),
        ({"model": "claude-sonnet-4-5"}, 404, "the model 'claude-sonnet-4-5' does not exist"),
    ],
)  # fmt: skip
async def test_a_messages_field_of_the_wrong_type_is_a_400_naming_it_first_and_the_next_is_answered(
    http, change, status, said
):
    refused = refusal(await post(http, MESSAGES, {**GOOD[MESSAGES], **change}), MESSAGES, status)
    assert refused.message.startswith(said), refused  # the message names the field first: the shape has no param
    assert refused.kind == ("not_found_error" if status == 404 else "invalid_request_error")
    await answered(http, MESSAGES)


UNKNOWN = {"x_client": {"deep": [1, {"a": None}]}, "service_tier": "auto", "prompt_cache_key": "k", "user": "u-1"}
NULLS = {
    RESPONSES: ("instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "temperature", "top_p",
                "stream", "store", "previous_response_id", "metadata", "reasoning", "background", "n"),
    MESSAGES: ("system", "tools", "tool_choice", "output_config", "output_format", "temperature", "top_p", "top_k",
               "stop_sequences", "stream", "thinking", "metadata"),
}  # fmt: skip


@pytest.mark.parametrize("door", DOORS)
async def test_unknown_fields_are_ignored_and_null_means_absent(http, door):
    given = {**GOOD[door], **UNKNOWN, **dict.fromkeys(NULLS[door])}
    response = await post(http, door, given)
    assert response.status_code == 200, response.text
    body = response.json()
    assert text_of(door, body) == ANSWER  # whole, not streamed: stream null is false
    if door == RESPONSES:
        assert body["store"] is True and body["status"] == "completed"  # store null: the default, kept
        again = await post(http, door, {**GOOD[door], "input": "And of Spain?", "previous_response_id": body["id"]})
        assert again.status_code == 200 and again.json()["previous_response_id"] == body["id"]
    else:
        assert body["stop_reason"] == "end_turn"


# -- the gate --------------------------------------------------------------------------------------
@pytest.mark.parametrize("door", DOORS)
async def test_a_foreign_host_is_refused_in_the_doors_shape_and_nothing_runs(http, server, door):
    refused = refusal(await post(http, door, GOOD[door], host="evil.example.com:8080"), door, 403)
    said = "the Host header 'evil.example.com:8080' is not this server's; add it with --allowed-host"
    assert refused == Refusal(said, "permission_error" if door == MESSAGES else "invalid_request_error", None)
    assert server.answers.answered == 0
    local = await post(http, door, GOOD[door], host="localhost:8080")
    assert local.status_code == 200 and text_of(door, local.json()) == ANSWER


@pytest.mark.parametrize("door", DOORS)
async def test_a_page_on_another_site_is_refused_and_a_local_page_gets_cors(http, server, door):
    said = (
        "requests from the web page at 'http://evil.example.com' are not allowed; allow its origin with "
        "--allow-origin (or SPECEM_ORIGINS)"
    )
    kind = "permission_error" if door == MESSAGES else "invalid_request_error"
    for content_type in ("application/json", "text/plain"):  # a page may send text/plain without asking
        headers = {"origin": "http://evil.example.com", "content-type": content_type}
        response = await post(http, door, GOOD[door], **headers)
        assert refusal(response, door, 403) == Refusal(said, kind, None)
        assert "access-control-allow-origin" not in response.headers
    preflight = await http.options(door, headers={"Origin": "http://evil.example.com",
                                                  "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    assert server.answers.answered == 0  # nothing ran
    local = await post(http, door, GOOD[door], origin="http://localhost:5173")
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert text_of(door, local.json()) == ANSWER


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None, "application/jsonx"])
async def test_a_post_not_declared_json_is_a_415_and_the_next_is_answered(http, server, door, content_type):
    headers = {} if content_type is None else {"content-type": content_type}
    response = await http.post(door, content=json.dumps(GOOD[door]), headers=headers)
    said = Refusal("send the body as JSON with Content-Type: application/json", "invalid_request_error", None)
    assert refusal(response, door, 415) == said
    assert server.answers.answered == 0
    await answered(http, door)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_a_wrong_method_is_a_405_in_the_doors_shape(http, door, method):
    response = await http.request(method, door)
    said = f"{method} is not allowed on {door}"
    assert refusal(response, door, 405) == Refusal(said, "invalid_request_error", None)
    await answered(http, door)


# -- clients that hang up (a real uvicorn: an in-process transport never hangs up) -------------------
def is_delta(door: str, line: str) -> bool:
    """A streamed line that carries some of the answer's text."""
    if door == MESSAGES:
        return line.startswith("data: ") and '"text_delta"' in line
    return line.startswith("data: ") and '"response.output_text.delta"' in line


@pytest.mark.parametrize("door", DOORS)
def test_a_client_that_hangs_up_mid_stream_cancels_its_answer_and_the_next_is_answered(door, monkeypatch):
    """Once its first round is out, the answer holds every decode until it is cancelled (the
    models' ``interrupt``): it cannot end by itself, so only the hang-up can end it."""
    round_out, interrupted = threading.Event(), threading.Event()
    step = AnswerStream.__next__

    def watched(stream: AnswerStream):
        event = step(stream)
        if isinstance(event, RoundEvent) and event.text:
            round_out.set()
        return event

    def held(_model, _rows) -> None:
        if round_out.is_set():
            interrupted.wait(60)

    monkeypatch.setattr(AnswerStream, "__next__", watched)
    members = [fake_member(name, ANSWER, on_decode=held) for name in "ab"]
    for member in members:
        member.model.interrupt = interrupted.set  # type: ignore[method-assign]
    ensemble = fake_ensemble(*members, segment_tokens=4)  # one place
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as base:
        with httpx.stream("POST", base + door, json={**GOOD[door], "stream": True}, timeout=60) as response:
            assert response.status_code == 200
            assert any(is_delta(door, line) for line in response.iter_lines())  # the first delta, then hang up
        poll_until(lambda: health(base)["cancelled"] == 1, 30, "the answer was not cancelled")
        poll_until(lambda: not health(base)["answering"], 30, "the cancelled answer kept its place")
        assert interrupted.is_set() and health(base)["answered"] == 1
        after = httpx.post(base + door, json=GOOD[door], timeout=60)
        assert after.status_code == 200 and text_of(door, after.json()) == ANSWER
    ensemble.close()


@pytest.mark.parametrize("door", DOORS)
def test_clients_that_hang_up_while_they_wait_give_their_place_back(door):
    """One answer holds the only place until released; a whole request (its client gives up
    after a second) and a streamed one (its client hangs up once it is seen waiting) leave the
    line at once and never start an answer: after the release, the next request is the second
    answer."""
    release = threading.Event()

    def held(_model, _rows) -> None:
        release.wait(60)

    ensemble = fake_ensemble(fake_member("a", ANSWER, on_decode=held), fake_member("b", ANSWER))  # one place
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as base:
        holding = threading.Thread(target=lambda: httpx.post(base + door, json=GOOD[door], timeout=120), daemon=True)
        holding.start()
        poll_until(lambda: health(base)["answering"], 30, "the holding answer did not start")
        with pytest.raises(httpx.TimeoutException):  # whole: it waits, and its client gives up
            httpx.post(base + door, json=GOOD[door], timeout=1)
        poll_until(lambda: health(base)["waiting"] == 0, 10, "the whole request kept its place")
        with httpx.stream("POST", base + door, json={**GOOD[door], "stream": True}, timeout=60) as response:
            assert response.status_code == 200
            poll_until(lambda: health(base)["waiting"] == 1, 10, "the streamed request never waited")
        poll_until(lambda: health(base)["waiting"] == 0, 10, "the streamed request kept its place")
        assert health(base)["answering"] == 1 and health(base)["answered"] == 0
        release.set()
        holding.join(60)
        assert not holding.is_alive()
        after = httpx.post(base + door, json=GOOD[door], timeout=60)
        assert after.status_code == 200 and text_of(door, after.json()) == ANSWER
        assert health(base)["answered"] == 2  # the holding answer and this one: no ghost between
    ensemble.close()


# -- the fuzz (research/fuzz.py) over fake models -----------------------------------------------------
def test_the_fuzzs_requests_keep_every_invariant_over_fake_models():
    """The fuzz's own requests and checks (every route, both doors among them, with bodies valid
    but for one field) against a live server over fake models: what the real run
    (tests/real_models/test_server_hostile.py) checks, here in seconds."""
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=4096), fake_member("b", ANSWER, n_ctx=4096), max_tokens=8)
    tally, rng = fuzz.Tally(), random.Random(0)
    with (
        serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as base,
        httpx.Client(base_url=base, timeout=60) as client,
    ):

        @hypothesis.seed(0)
        @hypothesis.settings(max_examples=200, deadline=None, database=None, phases=[hypothesis.Phase.generate],
                             suppress_health_check=list(hypothesis.HealthCheck))  # fmt: skip
        @hypothesis.given(fuzz.request_strategy())
        def one(case: dict[str, Any]) -> None:
            method, path, body, headers, mutated = fuzz.build(case, rng)
            tally.sent += 1
            fuzz.check(tally, method, path, client.request(method, path, content=body, headers=headers), mutated)

        one()
        closing = client.post("/v1/chat/completions", json={"model": "specem", "messages": ASKED})
        settled = fuzz.settled_health(client)
    ensemble.close()
    assert tally.violations == [] and closing.status_code == 200
    assert not settled["answering"] and not settled["waiting"]
    assert tally.named >= 5 and tally.by_code[200] >= 5, tally  # refusals naming their field, and answers


# -- what the Responses door once let through --------------------------------------------------------
@pytest.mark.parametrize("text", [5, "json_object", [], True])
async def test_responses_text_that_is_not_an_object_is_a_400_naming_it(http, text):
    refused = refusal(await post(http, RESPONSES, {**GOOD[RESPONSES], "text": text}), RESPONSES, 400)
    assert refused.param == "text"
    await answered(http, RESPONSES)


@pytest.mark.parametrize(
    ("change", "param"),
    [({"tool_choice": 5}, "tool_choice"), ({"tool_choice": "sometimes"}, "tool_choice"),
     ({"tool_choice": {"type": "function"}}, "tool_choice"), ({"parallel_tool_calls": "yes"}, "parallel_tool_calls")],
)  # fmt: skip
async def test_responses_tool_choice_and_parallel_tool_calls_are_checked_without_tools(http, change, param):
    refused = refusal(await post(http, RESPONSES, {**GOOD[RESPONSES], **change}), RESPONSES, 400)
    assert refused.param == param
    await answered(http, RESPONSES)


@pytest.mark.parametrize("metadata", [5, "user-1", ["user-1"], {"user": 5}])
async def test_responses_metadata_that_is_not_an_object_of_strings_is_a_400_naming_it(http, metadata):
    refused = refusal(await post(http, RESPONSES, {**GOOD[RESPONSES], "metadata": metadata}), RESPONSES, 400)
    assert refused.param == "metadata"
    await answered(http, RESPONSES)
