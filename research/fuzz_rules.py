"""What the fuzz (``fuzz.py``) holds every response to, as plain functions over a path, a
status, headers and a body, so each rule is tested without a server.

- ``must_refuse``: a value the API's own documentation rules out (the wrong JSON type, a
  number that is not finite, a fraction where an integer goes, a list of the wrong things):
  the request must be refused with a 4xx naming that field, whatever else it holds.
- ``named``: the field a refusal names, exactly: OpenAI's ``param`` (``messages[0].role`` is
  ``messages``), or the first word of Ollama's message (``options.top_k must be ...``).
- ``error_shape``: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` everywhere
  but under ``/api/``, where it is Ollama's ``{"error": "..."}``.
- ``success_shape``: a 2xx in its route's shape, whole or streamed (SSE for OpenAI, NDJSON
  for Ollama).
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
FIELDS = {
    "/v1/chat/completions": OPENAI,
    "/api/chat": {**OLLAMA, "messages": LIST, "tools": LIST},
    "/api/generate": OLLAMA,
}
REQUIRED = {("/v1/chat/completions", "messages"), ("/api/chat", "model"), ("/api/generate", "model")}
FINISH = {"stop", "length", "tool_calls"}


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
    # a list of objects (messages, tools); OpenAI's messages may not be empty
    empty = path == "/v1/chat/completions" and field == "messages" and value == []
    return not isinstance(value, list) or empty or not all(isinstance(item, dict) for item in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def named(path: str, error: Any) -> str | None:
    """The field an error names: OpenAI's ``param``, or the first word of Ollama's message,
    without an index or a sub-field (``messages[0].role`` and ``messages`` both name
    ``messages``; ``options.top_k`` stays whole)."""
    if path.startswith("/api/"):
        said = str(error).split(" ", 1)[0].rstrip(":") if isinstance(error, str) else ""
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
