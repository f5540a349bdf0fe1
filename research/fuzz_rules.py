"""What the fuzz (``fuzz.py``) holds every response to, as plain functions over a path, a
status, headers and a body, so each rule is tested without a server.

- ``must_refuse``: a value the API's own documentation rules out (the wrong JSON type, a
  number that is not finite, a fraction where an integer goes, a list of the wrong things):
  the request must be refused with a 4xx naming that field, whatever else it holds.
- ``named``: the field a refusal names, exactly: OpenAI's ``param`` (``messages[0].role`` is
  ``messages``), or the first word of Ollama's or Anthropic's message (``options.top_k must be
  ...``, ``max_tokens: Field required``; Anthropic's errors have no ``param``).
- ``error_shape``: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` everywhere
  but under ``/api/``, where it is Ollama's ``{"error": "..."}``, and under ``/v1/messages``,
  where it is Anthropic's ``{"type": "error", "error": {"type", "message"}}``.
- ``success_shape``: a 2xx in its route's shape, whole or streamed (SSE for OpenAI's chat
  completions and Responses API and for Anthropic's Messages API, NDJSON for Ollama).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

NUMBER, INTEGER, TEXT, SWITCH, OBJECT, LIST = "number", "integer", "text", "switch", "object", "list"
OPENAI = {
    "model": TEXT,
    "messages": LIST,
    "temperature": NUMBER,
    "top_p": NUMBER,
    "max_tokens": INTEGER,
    "max_completion_tokens": INTEGER,
    "seed": INTEGER,
    "stop": "stop",
    "stream": SWITCH,
    "stream_options": OBJECT,
    "n": INTEGER,
    "tools": LIST,
    "logprobs": SWITCH,
    "presence_penalty": NUMBER,
    "user": TEXT,
}
OLLAMA_OPTIONS = {
    "temperature": NUMBER,
    "top_p": NUMBER,
    "top_k": INTEGER,
    "min_p": NUMBER,
    "seed": INTEGER,
    "num_predict": INTEGER,
    "stop": "stop",
    "num_ctx": INTEGER,
    "repeat_penalty": NUMBER,
}
OLLAMA = {"model": TEXT, "stream": SWITCH, **{f"options.{name}": kind for name, kind in OLLAMA_OPTIONS.items()}}
# The Responses API's fields (tool_choice, text or an object, and metadata, an object of strings,
# are checked by tests/server/test_hostile_doors.py: a type alone says too little of them).
RESPONSES = {
    "model": TEXT,
    "input": "input",
    "instructions": TEXT,
    "temperature": NUMBER,
    "top_p": NUMBER,
    "max_output_tokens": INTEGER,
    "stream": SWITCH,
    "store": SWITCH,
    "tools": LIST,
    "previous_response_id": TEXT,
    "text": OBJECT,
    "parallel_tool_calls": SWITCH,
}
MESSAGES = {  # Anthropic's Messages API
    "model": TEXT,
    "messages": LIST,
    "max_tokens": INTEGER,
    "system": "system",
    "temperature": NUMBER,
    "top_p": NUMBER,
    "top_k": INTEGER,
    "stop_sequences": "texts",
    "stream": SWITCH,
    "tools": LIST,
    "tool_choice": OBJECT,
    "thinking": OBJECT,
    "metadata": OBJECT,
    "output_config": OBJECT,
}
FIELDS = {
    "/v1/chat/completions": OPENAI,
    "/api/chat": {**OLLAMA, "messages": LIST, "tools": LIST},
    "/api/generate": OLLAMA,
    "/v1/responses": RESPONSES,
    "/v1/messages": MESSAGES,
}
REQUIRED = {("/v1/chat/completions", "messages"), ("/api/chat", "model"), ("/api/generate", "model")}
REQUIRED |= {("/v1/responses", "input"), ("/v1/messages", "model"), ("/v1/messages", "messages")}
REQUIRED |= {("/v1/messages", "max_tokens")}
NOT_EMPTY = {("/v1/chat/completions", "messages"), ("/v1/messages", "messages"), ("/v1/responses", "input")}
FINISH = {"stop", "length", "tool_calls"}
STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use"}


def must_refuse(path: str, field: str, value: Any) -> bool:
    """Whether ``value`` in ``field`` is ruled out on ``path`` by the API's documented type
    (null is "absent" except where the field is required; a field the route does not have is
    ignored, as both APIs do)."""
    kind = FIELDS.get(path, {}).get(field)
    if kind is None:
        return False
    if value is None:
        return (path, field) in REQUIRED
    if kind == NUMBER:
        return not _is_number(value)
    if kind == INTEGER:
        return not _is_number(value) or (isinstance(value, float) and not value.is_integer())
    if kind == TEXT:
        return not isinstance(value, str)
    if kind == SWITCH:
        return not isinstance(value, bool)
    if kind == OBJECT:
        return not isinstance(value, dict)
    if kind == "stop":
        texts = [value] if isinstance(value, str) else value if isinstance(value, list) else [None]
        return not all(isinstance(text, str) for text in texts)
    if kind == "texts":  # Anthropic's stop_sequences: a list of strings, never one string
        return not isinstance(value, list) or not all(isinstance(text, str) for text in value)
    if kind in ("input", "system") and isinstance(value, str):  # text, or a list of items (blocks)
        return False
    # a list of objects (messages, tools, input items, system blocks); some may not be empty
    empty = (path, field) in NOT_EMPTY and value == []
    return not isinstance(value, list) or empty or not all(isinstance(item, dict) for item in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def named(path: str, error: Any) -> str | None:
    """The field an error names: OpenAI's ``param``, or the first word of Ollama's or
    Anthropic's message (``the model 'x' does not exist`` names ``model``), without an index or
    a sub-field (``messages[0].role`` and ``messages`` both name ``messages``; ``options.top_k``
    stays whole)."""
    if path.startswith("/api/"):
        said = str(error).split(" ", 1)[0].rstrip(":") if isinstance(error, str) else ""
    elif _anthropic(path):
        message = error.get("message") if isinstance(error, dict) else None
        message = message.removeprefix("the ") if isinstance(message, str) else ""
        said = message.split(" ", 1)[0].rstrip(":")
    else:
        said = error.get("param") if isinstance(error, dict) and isinstance(error.get("param"), str) else ""
    if not said:
        return None
    said = re.split(r"\[", said, maxsplit=1)[0]
    return said if said.startswith("options.") else said.split(".", 1)[0]


def error_shape(path: str, body: Any) -> str | None:
    """What is wrong with an error body for ``path``, or None."""
    if not isinstance(body, dict) or "error" not in body:
        return "an error body must be an object with an error"
    error = body["error"]
    if _anthropic(path):
        if set(body) != {"type", "error"} or body["type"] != "error" or not isinstance(error, dict):
            return f"Anthropic's error is {{type: error, error: {{type, message}}}}, got {str(body)[:120]}"
        if set(error) != {"type", "message"} or not all(isinstance(v, str) and v.strip() for v in error.values()):
            return f"Anthropic's error has a type and a message, got {str(error)[:120]}"
        return None
    if path.startswith("/api/"):
        if not isinstance(error, str) or not error.strip():
            return f"Ollama's error is a non-empty string, got {str(error)[:80]}"
        return None
    if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
        return f"OpenAI's error has message, type, param and code, got {str(error)[:120]}"
    if not isinstance(error["message"], str) or not error["message"].strip() or not isinstance(error["type"], str):
        return f"OpenAI's error needs a message and a type, got {str(error)[:120]}"
    if not isinstance(error["param"], (str, type(None))):
        return f"OpenAI's param is a string or null, got {error['param']!r}"
    return None


def success_shape(method: str, path: str, content_type: str, text: str) -> str | None:
    """What is wrong with a 2xx response for ``method`` ``path``, or None."""
    try:
        if method == "OPTIONS":
            return None  # a CORS preflight: its headers are the answer, checked in the tests of the gate
        if (method, path) == ("POST", "/v1/chat/completions"):
            if content_type.startswith("text/event-stream"):
                return _sse(text)
            return _completion(json.loads(text))
        if (method, path) in (("POST", "/api/chat"), ("POST", "/api/generate")):
            return _ndjson(path, text)
        if (method, path) == ("POST", "/v1/responses"):
            streamed = content_type.startswith("text/event-stream")
            return _response_events(text) if streamed else _response(json.loads(text))
        if (method, path) == ("POST", "/v1/messages"):
            streamed = content_type.startswith("text/event-stream")
            return _message_events(text) if streamed else _message(json.loads(text))
        if (method, path) == ("POST", "/api/show"):
            return None if isinstance(json.loads(text).get("model_info"), dict) else "/api/show without model_info"
        if (method, path) == ("GET", "/v1/models"):
            listed = json.loads(text)
            ids = [entry.get("id") for entry in listed.get("data", [])]
            return None if listed.get("object") == "list" and ids and all(ids) else "/v1/models not a list of models"
        if (method, path) == ("GET", "/api/tags"):
            names = [entry.get("name") for entry in json.loads(text).get("models", [])]
            return None if names and all(names) else "/api/tags without models"
        if (method, path) == ("GET", "/health"):
            health = json.loads(text)
            return None if {"answering", "waiting"} <= set(health) else "/health without answering and waiting"
    except (ValueError, AttributeError, TypeError, KeyError) as error:
        return f"{method} {path}: the body is not the route's JSON ({error})"
    return f"{method} {path} answered {content_type or 'a body'} where it should have been refused"


def _completion(body: dict[str, Any]) -> str | None:
    [choice] = body["choices"]
    message = choice["message"]
    ok = body["object"] == "chat.completion" and body["id"] and message["role"] == "assistant"
    ok = ok and isinstance(message.get("content"), (str, type(None))) and choice["finish_reason"] in FINISH
    usage = body["usage"]
    ok = ok and all(isinstance(usage[key], int) for key in ("prompt_tokens", "completion_tokens", "total_tokens"))
    return None if ok else f"not a chat.completion: {str(body)[:200]}"


def _sse(text: str) -> str | None:
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "an OpenAI stream must end with data: [DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    if not chunks or any(chunk.get("object") != "chat.completion.chunk" for chunk in chunks):
        return f"an OpenAI stream of chat.completion.chunk objects, got {str(chunks)[:200]}"
    finishes = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c.get("finish_reason")]
    return None if finishes and finishes[-1] in FINISH else f"an OpenAI stream without a finish_reason: {finishes}"


def _ndjson(path: str, text: str) -> str | None:
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines or not lines[-1].get("done"):
        return f"an Ollama answer must end with done: true, got {text[-200:]!r}"
    if any(line.get("done") for line in lines[:-1]):
        return "an Ollama answer has done: true before its last line"
    for line in lines:
        said = line["message"]["content"] if path == "/api/chat" else line["response"]
        if not isinstance(said, str) or "error" in line:
            return f"an Ollama line in the wrong shape: {str(line)[:200]}"
    reason = lines[-1].get("done_reason")
    return None if reason in FINISH | {"load"} else f"an Ollama answer ended with done_reason {reason!r}"


def _anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def _events(text: str) -> list[dict[str, Any]]:
    """A stream's ``data:`` lines as JSON, each its event's ``type`` as its ``event:`` line says."""
    events, name = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            event = json.loads(line[len("data: ") :])
            if event.get("type") != name:
                raise ValueError(f"event {name!r} carries data of type {event.get('type')!r}")
            events.append(event)
    return events


def _response(body: dict[str, Any]) -> str | None:
    usage = body["usage"]
    ok = body["object"] == "response" and body["id"] and body["status"] in ("completed", "incomplete")
    ok = ok and isinstance(body["output"], list) and all(item["type"] for item in body["output"])
    ok = ok and all(isinstance(usage[key], int) for key in ("input_tokens", "output_tokens", "total_tokens"))
    return None if ok else f"not a response: {str(body)[:200]}"


def _response_events(text: str) -> str | None:
    kinds = [event["type"] for event in _events(text)]
    if kinds[:2] != ["response.created", "response.in_progress"]:
        return f"a Responses stream begins response.created, response.in_progress; got {kinds[:2]}"
    if kinds[-1] not in ("response.completed", "response.incomplete") or "error" in kinds:
        return f"a Responses stream ends response.completed (or incomplete); got {kinds[-3:]}"
    return _response(_events(text)[-1]["response"])


def _message(body: dict[str, Any]) -> str | None:
    usage = body["usage"]
    ok = body["type"] == "message" and body["id"] and body["role"] == "assistant"
    ok = ok and isinstance(body["content"], list) and body["stop_reason"] in STOP_REASONS
    ok = ok and all(isinstance(usage[key], int) for key in ("input_tokens", "output_tokens"))
    return None if ok else f"not a message: {str(body)[:200]}"


def _message_events(text: str) -> str | None:
    events = _events(text)
    kinds = [event["type"] for event in events]
    if not kinds or kinds[0] != "message_start" or kinds[-1] != "message_stop" or "error" in kinds:
        return f"a Messages stream runs message_start to message_stop; got {kinds[:1]} ... {kinds[-2:]}"
    [delta] = [event for event in events if event["type"] == "message_delta"]
    reason = delta["delta"]["stop_reason"]
    return None if reason in STOP_REASONS else f"a Messages stream ended with stop_reason {reason!r}"
