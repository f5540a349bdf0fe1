"""Ollama's API, both ways, as plain functions: ``/api/chat`` and ``/api/generate`` bodies
become the ensemble's messages and settings (or an ``ApiError`` naming the field), and the
engine's events become Ollama's NDJSON lines with their final statistics. The other routes'
payloads (``/api/tags``, ``/api/show``, ``/api/ps``, ``/api/version``) are here too.

The ensemble is one model, ``specem`` (``specem:latest`` to clients that add the tag); who
wrote each segment rides along in ``x_specem``, which Ollama's clients ignore.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from specem_local.engine import Ask, FormatAsk, ToolCall
from specem_local.server.errors import ApiError
from specem_local.server.openai_format import message_text, parse_messages, top_range
from specem_local.server.replies import (
    SPECEM_FIELDS,
    Piece,
    Whole,
    answer_facts,
    logprobs_content,
    prompt_tokens,
    round_facts,
    whole_reply,
)

MODEL_NAME = "specem"
TAGGED = f"{MODEL_NAME}:latest"
OLLAMA_VERSION = "0.9.0"  # the API these routes follow; clients check it before using /api/chat
# Options honoured, as [ensemble] settings.
OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed"}
# Options about loading or running a model, not the answer: the models are already loaded
# with their own; accepted and left alone, as Ollama does for a loaded model.
LOAD_OPTIONS = frozenset(
    {
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "num_thread",
        "num_keep",
        "use_mmap",
        "use_mlock",
        "numa",
        "low_vram",
        "vocab_only",
    }
)
SWITCHES = frozenset({"use_mmap", "use_mlock", "numa", "low_vram", "vocab_only"})  # the rest are integers
# Options that change the answer in a way the ensemble cannot: refused unless neutral.
NEUTRAL = {
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "mirostat": 0,
    "typical_p": 1.0,
    "tfs_z": 1.0,
    "penalize_newline": False,
}
IGNORED_WHEN_NEUTRAL = frozenset({"repeat_last_n", "mirostat_tau", "mirostat_eta"})
THINKS = ("low", "medium", "high")  # ``think`` as a level; true and false are the other values


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, str]]  # as the client sent them (the history keeps these); none for a load request
    ask: Ask  # the answer as asked (a load request's: its options, checked all the same)
    stream: bool  # Ollama streams unless told not to
    started: float  # time.monotonic() when it arrived, for total_duration
    load_only: bool = False  # /api/generate with no prompt: "load the model", answered at once
    logprobs: bool = False  # each token's log-probability on each line (Ollama's ``logprobs``)
    model: str = TAGGED  # as asked: the ensemble, or one member alone (``specem/NAME:latest``)
    tools: bool = False  # tools were offered: the answer is calls or a message
    fields: dict[str, str] = field(default_factory=dict)  # a setting -> the field it came from ("options.num_predict")


def _model(body: dict[str, Any], members: Sequence[str] = ()) -> str | None:
    """The member a request names to answer alone (``specem/NAME``, with or without
    ``:latest``), or None for the ensemble."""
    name = body.get("model", body.get("name"))
    if name is None:
        raise ApiError(400, "model is required: this server serves 'specem'", "model")
    if isinstance(name, str) and name.strip().lower() in (MODEL_NAME, TAGGED):
        return None
    member = name.strip().removesuffix(":latest") if isinstance(name, str) else ""
    if member.lower().startswith(f"{MODEL_NAME}/") and member[len(MODEL_NAME) + 1 :] in members:
        return member[len(MODEL_NAME) + 1 :]
    alone = " (and each member alone as 'specem/NAME')" if members else ""
    raise ApiError(404, f"model {str(name)[:80]!r} not found; this server serves 'specem'{alone}", "model")


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, what in (("images", "images"),):
        if body.get(name) not in (None, "", [], {}):
            raise ApiError(400, f"{what} is not supported by the specem ensemble; remove {name!r}", name)
    for name in SPECEM_FIELDS:  # where the other routes take them: said, not silently dropped
        if name in body:
            raise ApiError(400, f'{name} goes in "options" on Ollama\'s routes: "options": {{"{name}": ...}}', name)
    think = body.get("think")
    if think is not None and not isinstance(think, bool) and not (isinstance(think, str) and think in THINKS):
        raise ApiError(400, f'think must be true, false, "low", "medium" or "high"; got {repr(think)[:40]}', "think")


def _settings(body: dict[str, Any]) -> dict[str, Any]:
    """``options`` as [ensemble] settings; their values are checked where every setting is."""
    options = body.get("options")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ApiError(400, "options must be an object", "options")
    settings: dict[str, Any] = {}
    for name, value in options.items():
        if value is None or name in IGNORED_WHEN_NEUTRAL:
            continue
        if name in LOAD_OPTIONS:
            _check_load_option(name, value)
            continue
        if name == "seed" and value == -1:
            continue  # Ollama's default: a random seed
        if name in OPTIONS:
            settings[OPTIONS[name]] = value
        elif name == "num_predict":
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                continue  # -1 (no limit) and -2 (fill the context): the ensemble's own limit
            settings["max_tokens"] = value
        elif name == "stop":
            settings["stop"] = [value] if isinstance(value, str) else value
        elif name in SPECEM_FIELDS:
            settings[name] = value
        elif name in NEUTRAL:
            neutral = NEUTRAL[name]
            if value != neutral or isinstance(value, bool) != isinstance(neutral, bool):
                message = f"options.{name} is not supported by the specem ensemble; remove it"
                raise ApiError(400, message, f"options.{name}")
        else:
            name = name[:40]
            raise ApiError(400, f"options.{name} is not an option this server knows; remove it", f"options.{name}")
    if settings.get("temperature") is not None:  # as on every route: 0 is greedy, any other samples
        settings["greedy"] = settings["temperature"] == 0
    return settings


def _check_load_option(name: str, value: Any) -> None:
    """A load option is left alone (the models are loaded), but only one of the type Ollama
    takes: a switch is true or false, the rest are integers."""
    switch = name in SWITCHES
    if isinstance(value, bool) != switch or not isinstance(value, int):
        wanted = "true or false" if switch else "an integer"
        raise ApiError(400, f"options.{name} must be {wanted}, got {repr(value)[:60]}", f"options.{name}")


def _stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", True)
    if stream is None:
        return True
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", "stream")
    return stream


def parse_chat(body: Any, members: Sequence[str] = ()) -> Request:
    """An ``/api/chat`` body (``members``: those it may name to answer alone)."""
    body = _object(body)
    member = _model(body, members)
    _refuse_unsupported(body)
    roles = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
    if body.get("messages") in (None, []):  # how the ollama CLI and client load a model: it is loaded
        return Request([], Ask("", _settings(body), _format(body)), _stream(body), time.monotonic(), load_only=True)
    messages = parse_messages(body.get("messages"), roles=roles, refused=("images",), missing_content="")
    tools = body["tools"] if body.get("tools") not in (None, []) else None  # [] is no tools
    if tools is not None and body.get("format") not in (None, ""):
        raise ApiError(400, "give tools or format, not both", "format")
    output = FormatAsk(tools=tools) if tools is not None else _format(body)
    settings = _settings(body)
    logprobs = _logprobs(body, settings)
    ask = Ask(messages, settings, output, body.get("think"), (member,) if member else None)
    return Request(messages, ask, _stream(body), time.monotonic(), tools=tools is not None, fields=_named(body),
                   logprobs=logprobs, model=_tagged(member))  # fmt: skip


def _logprobs(body: dict[str, Any], settings: dict[str, Any]) -> bool:
    """Ollama's ``logprobs`` (true: each token's log-probability) and ``top_logprobs`` (how many
    of the most likely tokens in each place), as the ``logprobs`` setting."""
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise ApiError(400, "logprobs must be true or false", "logprobs")
    top_range(top)
    if wanted is False:  # asked not to: top_logprobs beside it changes nothing
        return False
    if wanted or top:
        settings["logprobs"] = top or 0
    return bool(wanted or top)


def _format(body: dict[str, Any]) -> FormatAsk | None:
    """Ollama's ``format``: "json" (any JSON object) or a JSON Schema object, as the answer's
    format; "" or absent: none."""
    value = body.get("format")
    if value in (None, ""):
        return None
    if value == "json":
        return FormatAsk(json=True)
    if isinstance(value, dict):
        return FormatAsk(schema=value)
    raise ApiError(400, 'format must be "json" or a JSON Schema object', "format")


def _tagged(member: str | None) -> str:
    return f"{MODEL_NAME}/{member}:latest" if member else TAGGED


def parse_generate(body: Any, members: Sequence[str] = ()) -> Request:
    """An ``/api/generate`` body: the prompt (and system) as a one-turn conversation, each
    model in its own template. ``raw`` prompts, ``suffix`` (fill-in-the-middle) and
    ``context`` are refused: the ensemble continues conversations, not token lists."""
    body = _object(body)
    member = _model(body, members)
    _refuse_unsupported(body)
    for name in ("raw", "suffix", "context", "template"):
        if not (body.get(name) is None or body[name] is False or body[name] in ("", [])):
            raise ApiError(400, f"{name} is not supported by the specem ensemble; remove {name!r}", name)
    prompt = message_text(body.get("prompt", ""), "prompt")
    system = message_text(body.get("system", ""), "system")
    stream = _stream(body)
    settings, output, think = _settings(body), _format(body), body.get("think")
    if not prompt:
        return Request([], Ask("", settings, output, think), stream, time.monotonic(), load_only=True)
    messages = [{"role": "system", "content": system}] if system else []
    asked = [*messages, {"role": "user", "content": prompt}]
    logprobs = _logprobs(body, settings)
    ask = Ask(asked, settings, output, think, (member,) if member else None)
    return Request(asked, ask, stream, time.monotonic(), fields=_named(body), logprobs=logprobs,
                   model=_tagged(member))  # fmt: skip


def _named(body: dict[str, Any]) -> dict[str, str]:
    """Each setting an option (or the format) became, and the field's name as sent: an error
    names what the client wrote (``options.num_predict``), not the ensemble's own name."""
    options: dict[str, Any] = body["options"] if isinstance(body.get("options"), dict) else {}
    named = {OPTIONS[name]: f"options.{name}" for name in options if name in OPTIONS}
    named.update(schema="format", json="format", logprobs="top_logprobs")
    if "num_predict" in options:
        named["max_tokens"] = "options.num_predict"
    if "stop" in options:
        named["stop"] = "options.stop"
    named.update({name: f"options.{name}" for name in SPECEM_FIELDS if name in options})
    return named


# -- responses -----------------------------------------------------------------------------------
DONE_REASON = {"length": "length", "context": "length"}


def now() -> str:
    """Ollama's ``created_at``: RFC 3339 in UTC."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _text_field(chat: bool, text: str, calls: tuple[ToolCall, ...] = (), thinking: str = "") -> dict[str, Any]:
    """The answer's text (and calls, and what was thought before it), as Ollama writes them:
    ``message`` for /api/chat, ``response`` and ``thinking`` for /api/generate."""
    if not chat:
        return {"response": text, **({"thinking": thinking} if thinking else {})}
    message: dict[str, Any] = {"role": "assistant", "content": text, **({"thinking": thinking} if thinking else {})}
    if calls:  # Ollama's shape: each call whole, its arguments an object
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return {"message": message}


def piece_lines(chat: bool, piece: Piece, logprobs: bool = False, model: str = TAGGED) -> list[dict[str, Any]]:
    """A round's piece as lines: its thinking as ``thinking``, its text, and the calls it made
    whole in a line of their own, each once, complete (as Ollama streams calls)."""
    lines = []
    if piece.reasoning or piece.text:
        fields = _text_field(chat, piece.text, thinking=piece.reasoning)
        lines.append({"model": model, "created_at": now(), **fields, "done": False})
        if logprobs and piece.text and not piece.calls:
            lines[0]["logprobs"] = logprobs_content(piece.event.logprobs)
        lines[0]["x_specem"] = round_facts(piece.event, vote=False)
    if piece.calls:
        calls = tuple(call for _, call in piece.calls)
        lines.append({"model": model, "created_at": now(), **_text_field(True, "", calls), "done": False})
    return lines


def final_line(chat: bool, request: Request, whole: Whole, streamed: bool = False) -> dict[str, Any]:
    """The line that ends an answer (not ``streamed``: with the whole answer and its tokens'
    log-probabilities when asked), with Ollama's statistics: durations in nanoseconds; prompt
    reading is part of ``eval_duration``, since the ensemble reads prompts as part of its first
    round."""
    start, final = whole.start, whole.final
    assert final is not None
    reply = None if streamed else whole_reply(final, request.tools)
    text, calls = (reply.content or "", reply.calls) if reply is not None else ("", ())
    tokens = (
        {"logprobs": logprobs_content(whole.tokens)} if request.logprobs and not streamed and not request.tools else {}
    )
    return {
        "model": request.model,
        "created_at": now(),
        **_text_field(chat, text, calls, final.reasoning if text or calls else ""),
        **tokens,
        "done": True,
        "done_reason": DONE_REASON.get(final.finish_reason, "stop"),
        "total_duration": int((time.monotonic() - request.started) * 1e9),
        "load_duration": 0,
        "prompt_eval_count": prompt_tokens(start),
        "eval_count": final.tokens,
        "eval_duration": int(final.seconds * 1e9),
        "x_specem": answer_facts(start, final),
    }


def load_line(chat: bool) -> dict[str, Any]:
    """The answer to a request that only asks for the model to be loaded (it is)."""
    return {"model": TAGGED, "created_at": now(), **_text_field(chat, ""), "done": True, "done_reason": "load"}


def _details(members: list[str]) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": "specem",
        "families": ["specem"],
        "parameter_size": f"{len(members)} models",
        "quantization_level": "",
    }


def _digest(members: list[str]) -> str:
    return hashlib.sha256("\n".join(members).encode()).hexdigest()


def _entry(members: list[str], size: int) -> dict[str, Any]:
    return {"name": TAGGED, "model": TAGGED, "size": size, "digest": _digest(members), "details": _details(members)}


def tags(members: list[str], size: int, modified: str, sizes: dict[str, int] | None = None) -> dict[str, Any]:
    """The ensemble, then each member alone (``specem/NAME:latest``; ``sizes``: each one's)."""
    alone = [
        {"name": _tagged(m), "model": _tagged(m), "size": (sizes or {}).get(m, 0), "digest": _digest([m]),
         "details": {**_details([m]), "parameter_size": "1 model"}, "modified_at": modified}
        for m in members
    ]  # fmt: skip
    return {"models": [{**_entry(members, size), "modified_at": modified}, *alone]}


def running(members: list[str], size: int) -> dict[str, Any]:
    """``/api/ps``: the ensemble, loaded until the server stops."""
    return {"models": [{**_entry(members, size), "expires_at": "0001-01-01T00:00:00Z", "size_vram": 0}]}


def show(members: list[str], modified: str) -> dict[str, Any]:
    return {
        "modelfile": f"# specem ensemble of {', '.join(members)}\n",
        "parameters": "",
        "template": "",
        "details": _details(members),
        "model_info": {"general.architecture": "specem", "specem.members": members},
        "capabilities": ["completion"],
        "modified_at": modified,
    }


def show_request(body: Any) -> None:
    """An ``/api/show`` body names the served model (``model``, or ``name`` in older clients)."""
    _model(_object(body))
