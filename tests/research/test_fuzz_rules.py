"""The fuzz's invariants (research/fuzz_rules.py) on hand-made responses: each rule catches
what it names, so a fuzz run with no violations means something."""

from __future__ import annotations

import json
import math

import pytest

from specem_research import fuzz_rules as rules

CHAT = "/v1/chat/completions"


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        (CHAT, "temperature", "hot"),
        (CHAT, "temperature", True),
        (CHAT, "temperature", math.nan),
        (CHAT, "max_tokens", 2.5),
        (CHAT, "n", True),
        (CHAT, "user", 7),
        (CHAT, "stream", 0),
        (CHAT, "stop", [1]),
        (CHAT, "messages", []),
        (CHAT, "messages", None),
        (CHAT, "tools", [1]),
        (CHAT, "stream_options", []),
        ("/api/chat", "options.num_ctx", "big"),
        ("/api/chat", "options.top_k", 0.5),
        ("/api/chat", "model", None),
        ("/api/generate", "options.repeat_penalty", True),
        ("/api/chat", "messages", "hello"),
    ],
)
def test_values_the_api_rules_out(path, field, value):
    assert rules.must_refuse(path, field, value)


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        (CHAT, "temperature", None),  # null is absent
        (CHAT, "stream", None),
        (CHAT, "max_tokens", 2.0),  # a whole number written as a float: not ruled out by type
        (CHAT, "stop", "\n"),
        (CHAT, "options.temperature", "hot"),  # not an OpenAI field: ignored
        ("/api/generate", "messages", 5),  # not a field of /api/generate
        ("/api/chat", "messages", None),  # Ollama loads the model
        ("/api/chat", "options.seed", -1),
    ],
)
def test_values_the_api_allows_or_ignores(path, field, value):
    assert not rules.must_refuse(path, field, value)


def test_a_refusal_names_the_field_exactly():
    """The old check was a substring test: vacuous for ``n`` (in nearly every message) and
    fooled for ``user`` (in "the last message must be from the user")."""
    openai_error = {"message": "n must be 1", "type": "invalid_request_error", "param": "n", "code": None}
    assert rules.named(CHAT, openai_error) == "n"
    assert rules.named(CHAT, {**openai_error, "param": "messages[0].role"}) == "messages"
    assert rules.named(CHAT, {**openai_error, "param": None}) is None
    assert rules.named("/api/chat", "options.top_k must be an integer, got 'x'") == "options.top_k"
    assert rules.named("/api/chat", "messages[1].content must be a string") == "messages"
    assert rules.named("/api/chat", "the last message must be from the user") == "the"
    assert rules.named("/api/chat", "model 'x' not found") == "model"


def test_an_error_in_the_wrong_shape_for_its_path_is_caught():
    openai_error = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}
    assert rules.error_shape(CHAT, openai_error) is None and rules.error_shape("/nope", openai_error) is None
    assert rules.error_shape("/api/chat", openai_error) is not None  # Ollama's clients read a string
    assert rules.error_shape("/api/chat", {"error": "bad"}) is None
    assert rules.error_shape(CHAT, {"error": "bad"}) is not None
    assert rules.error_shape(CHAT, {"error": {"message": "", "type": "x", "param": None, "code": None}}) is not None
    assert rules.error_shape("/api/pull", {"error": ""}) is not None and rules.error_shape(CHAT, []) is not None


def _completion(**change):
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    return json.dumps({**body, **change})


def test_a_2xx_is_checked_in_its_routes_shape():
    assert rules.success_shape("POST", CHAT, "application/json", _completion()) is None
    assert rules.success_shape("POST", CHAT, "application/json", _completion(object="list")) is not None
    assert rules.success_shape("POST", CHAT, "application/json", _completion(choices=[])) is not None
    assert rules.success_shape("POST", CHAT, "application/json", "not json") is not None
    chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {}, "finish_reason": "length"}]}
    stream = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
    assert rules.success_shape("POST", CHAT, "text/event-stream", stream) is None
    assert rules.success_shape("POST", CHAT, "text/event-stream", stream.replace("[DONE]", "{}")) is not None
    line = {"message": {"role": "assistant", "content": "hi"}, "done": False}
    last = {**line, "done": True, "done_reason": "stop"}
    ndjson = f"{json.dumps(line)}\n{json.dumps(last)}\n"
    assert rules.success_shape("POST", "/api/chat", "application/x-ndjson", ndjson) is None
    assert rules.success_shape("POST", "/api/chat", "application/x-ndjson", json.dumps(line)) is not None
    broken = f"{json.dumps(line)}\n{json.dumps({'error': 'the answer failed'})}\n"
    assert rules.success_shape("POST", "/api/chat", "application/x-ndjson", broken) is not None
    assert rules.success_shape("POST", "/api/generate", "application/json", json.dumps(last)) is not None
    assert rules.success_shape("GET", "/health", "application/json", '{"answering": 0, "waiting": 0}') is None
    assert rules.success_shape("GET", "/v1/models", "application/json", '{"object": "list", "data": []}')
    assert rules.success_shape("GET", "/nope", "text/html", "<html>") is not None  # no route answers 2xx
