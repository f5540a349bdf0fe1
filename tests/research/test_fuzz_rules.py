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


# -- the Responses and Messages doors ----------------------------------------------------------------
RESPONSES, MESSAGES = "/v1/responses", "/v1/messages"


@pytest.mark.parametrize(
    ("path", "field", "value", "refused"),
    [
        (RESPONSES, "input", "Say hi.", False),
        (RESPONSES, "input", [{"role": "user", "content": "hi"}], False),
        (RESPONSES, "input", [], True),
        (RESPONSES, "input", None, True),  # required
        (RESPONSES, "input", ["hi"], True),
        (RESPONSES, "max_output_tokens", 2.5, True),
        (RESPONSES, "store", 0, True),
        (RESPONSES, "previous_response_id", 5, True),
        (RESPONSES, "previous_response_id", None, False),
        (RESPONSES, "messages", 5, False),  # not a field of the Responses API
        (MESSAGES, "max_tokens", None, True),  # required, as Anthropic's API has it
        (MESSAGES, "model", None, True),
        (MESSAGES, "messages", [], True),
        (MESSAGES, "system", "Be brief.", False),
        (MESSAGES, "system", [{"type": "text", "text": "Be brief."}], False),
        (MESSAGES, "system", 5, True),
        (MESSAGES, "stop_sequences", "\n", True),  # a list of strings, never one string
        (MESSAGES, "stop_sequences", ["\n"], False),
        (MESSAGES, "metadata", "user-1", True),
        (MESSAGES, "tool_choice", "auto", True),
        (MESSAGES, "temperature", None, False),
    ],
)
def test_the_doors_fields_as_their_apis_type_them(path, field, value, refused):
    assert rules.must_refuse(path, field, value) is refused


def test_an_anthropic_refusal_names_the_field_first_in_its_message():
    def error(message: str) -> dict:
        return {"type": "invalid_request_error", "message": message}

    assert rules.named(MESSAGES, error("max_tokens: Field required")) == "max_tokens"
    assert rules.named(MESSAGES, error("messages[0].content must be a string")) == "messages"
    assert rules.named(MESSAGES, error("thinking.budget_tokens: must be an integer")) == "thinking"
    assert rules.named(MESSAGES, error("the model 'x' does not exist; this server serves 'specem'")) == "model"
    assert rules.named(MESSAGES, error("the request body must be a JSON object")) == "request"
    assert rules.named(MESSAGES, {"type": "invalid_request_error"}) is None
    assert rules.named(RESPONSES, {"message": "x", "type": "t", "param": "input[0].role", "code": None}) == "input"


def test_an_error_at_the_messages_door_is_anthropics_shape():
    anthropic = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    openai = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}
    assert rules.error_shape(MESSAGES, anthropic) is None and rules.error_shape("/v1/messages/x", anthropic) is None
    assert rules.error_shape(MESSAGES, openai) is not None  # Anthropic's clients read error.type and message
    assert rules.error_shape(RESPONSES, anthropic) is not None and rules.error_shape(RESPONSES, openai) is None
    assert rules.error_shape(MESSAGES, {"type": "error", "error": {"type": "x", "message": ""}}) is not None
    assert rules.error_shape(MESSAGES, {**anthropic, "param": "x"}) is not None


def sse(*events: dict) -> str:
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events)


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
    "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


def test_a_2xx_at_the_doors_is_checked_in_their_shapes_whole_and_streamed():
    assert rules.success_shape("POST", RESPONSES, "application/json", json.dumps(RESPONSE)) is None
    assert rules.success_shape("POST", RESPONSES, "application/json", json.dumps({**RESPONSE, "status": "failed"}))
    assert rules.success_shape("POST", RESPONSES, "application/json", json.dumps(MESSAGE)) is not None
    begun = [{"type": "response.created", "response": {}}, {"type": "response.in_progress", "response": {}}]
    done = {"type": "response.completed", "response": RESPONSE}
    assert rules.success_shape("POST", RESPONSES, "text/event-stream", sse(*begun, done)) is None
    assert rules.success_shape("POST", RESPONSES, "text/event-stream", sse(*begun)) is not None
    failed = {"type": "error", "code": None, "message": "the answer failed", "param": None}
    assert rules.success_shape("POST", RESPONSES, "text/event-stream", sse(*begun, failed)) is not None
    named_wrong = sse(*begun, done).replace("event: response.completed", "event: response.failed")
    assert rules.success_shape("POST", RESPONSES, "text/event-stream", named_wrong) is not None
    assert rules.success_shape("POST", MESSAGES, "application/json", json.dumps(MESSAGE)) is None
    assert rules.success_shape("POST", MESSAGES, "application/json", json.dumps({**MESSAGE, "stop_reason": "eos"}))
    start = {"type": "message_start", "message": {**MESSAGE, "content": []}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}
    stream = sse(start, delta, {"type": "message_stop"})
    assert rules.success_shape("POST", MESSAGES, "text/event-stream", stream) is None
    assert rules.success_shape("POST", MESSAGES, "text/event-stream", sse(start, delta)) is not None
    broken = sse(start, {"type": "error", "error": {"type": "api_error", "message": "x"}}, {"type": "message_stop"})
    assert rules.success_shape("POST", MESSAGES, "text/event-stream", broken) is not None
