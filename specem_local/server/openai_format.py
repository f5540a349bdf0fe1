"""OpenAI's chat-completions format, both ways, as plain functions: a request body becomes the
ensemble's messages and settings (or an ``ApiError`` naming the field), and the engine's events
become ``chat.completion`` objects and ``chat.completion.chunk`` objects.

The ensemble's own facts (who wrote a segment, how many candidates, the weights) travel in an
``x_specem`` field that clients ignore, never in ``content``: clients send the assistant's text
back in later turns.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine import Ask, FormatAsk, ToolCall
from specem_local.events import FinalEvent, StartEvent, TokenLogprob
from specem_local.server.errors import ApiError
from specem_local.server.replies import (
    Piece,
    Whole,
    answer_facts,
    finish_name,
    logprobs_content,
    member_named,
    prompt_tokens,
    round_facts,
    specem_settings,
    whole_reply,
)

MODEL_ID = "specem"
# Fields the ensemble cannot honour: a 400 naming them, never a silent ignore.
UNSUPPORTED = {
    "functions": "functions (the legacy function calling; use tools)",
    "function_call": "functions (function calling)",
    "logit_bias": "logit_bias",
    "audio": "audio output",
}


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, str]]  # as the client sent them (the history keeps these)
    ask: Ask  # the answer as asked: the conversation, its settings, format and thinking
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False  # each token's log-probability, in ``choices[].logprobs.content``
    n: int = 1  # answers to give, each a choice of its own (several answers at once)
    tools: bool = False  # tools were offered: the answer is calls or a message
    fields: dict[str, str] = field(default_factory=dict)  # a setting -> the request field it came from
    model: str = MODEL_ID  # as asked: the ensemble, or one member alone (``specem/NAME``)
    id: str = field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def parse_request(body: Any, members: Sequence[str] = ()) -> Request:
    """A chat-completions request as the ensemble's ask (``members``: those a request may name
    to answer alone, as ``specem/NAME``)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    member = member_named(body.get("model"), members)
    for name, what in UNSUPPORTED.items():
        if not (body.get(name) is None or body[name] is False or body[name] in ([], {})):
            raise ApiError(400, f"{what} is not supported by the specem ensemble; remove {name!r}", name)
    if body.get("modalities") not in (None, ["text"]):
        raise ApiError(400, 'modalities must be ["text"]: the ensemble writes text only', "modalities")
    choices = _choices(body.get("n"))
    for name in ("presence_penalty", "frequency_penalty"):
        if body.get(name) is not None and not _same(body[name], 0):
            raise ApiError(400, f"{name} is not supported by the specem ensemble; remove it or set 0", name)
    if not isinstance(body.get("user", ""), (str, type(None))):
        raise ApiError(400, f"user must be a string, got {repr(body['user'])[:60]}", "user")
    # Values go to the settings as they came: checked there, like every setting, and a bad one
    # is a 400 naming the field.
    settings: dict[str, Any] = {}
    if body.get("temperature") is not None:
        settings["temperature"] = body["temperature"]
        settings["greedy"] = body["temperature"] == 0
    if body.get("top_p") is not None:
        settings["top_p"] = body["top_p"]
    sent: dict[str, str] = {}
    for name in ("max_completion_tokens", "max_tokens"):  # the newer name wins
        if body.get(name) is not None:
            settings["max_tokens"] = body[name]
            sent["max_tokens"] = name
            break
    if body.get("seed") is not None:
        settings["seed"] = body["seed"]
    if body.get("ignore_eos") is not None:  # llama.cpp's server takes it too, for fixed-length runs
        settings["ignore_eos"] = body["ignore_eos"]
    if body.get("stop") is not None:
        settings["stop"] = _stops(body["stop"])
    settings.update(specem_settings(body))
    wants_logprobs = _logprobs(body, settings)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", "stream_options")
    stream = False if body.get("stream") is None else body["stream"]  # null: the default, as OpenAI takes it
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", "stream")
    roles = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
    messages = parse_messages(body.get("messages"), roles=roles, refused=())
    output, param = response_format(body.get("response_format"))
    output = with_tools(output, body)
    think, think_field = reasoning(body)
    if think_field:
        sent["think"] = think_field
    formats = dict.fromkeys(("schema", "json"), param) if param else {}
    return Request(
        messages,
        Ask(messages, settings, output, think, (member,) if member else None, _prediction(body.get("prediction"))),
        stream,
        bool(options.get("include_usage")),
        wants_logprobs,
        choices,
        output is not None and output.tools is not None,
        fields={**sent, **formats, "logprobs": "top_logprobs"},
        model=f"{MODEL_ID}/{member}" if member else MODEL_ID,
    )


MAX_CHOICES = 8


def _prediction(value: Any) -> str:
    """``prediction`` (OpenAI's predicted outputs): ``{"type": "content", "content": TEXT}``, the
    content as text or text parts; what the answer is expected to repeat (``prediction.py``)."""
    if value is None:
        return ""
    if not isinstance(value, dict) or value.get("type") != "content":
        raise ApiError(400, 'prediction must be {"type": "content", "content": "..."}', "prediction")
    return message_text(value.get("content"), "prediction.content")


def _choices(value: Any) -> int:
    """``n``: how many answers, 1 to ``MAX_CHOICES`` (each runs as one of several answers at once)."""
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CHOICES:
        raise ApiError(400, f"n must be a whole number from 1 to {MAX_CHOICES}", "n")
    return value


def _logprobs(body: dict[str, Any], settings: dict[str, Any]) -> bool:
    """``logprobs`` (true: each token's log-probability) and ``top_logprobs`` (0 to 20 of the
    most likely tokens in each place), as the ``logprobs`` setting."""
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise ApiError(400, "logprobs must be true or false", "logprobs")
    if top is not None and not wanted:
        raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
    top_range(top)
    if wanted:
        settings["logprobs"] = 0 if top is None else top  # its range is checked with the settings
    return bool(wanted)


def top_range(top: Any) -> None:
    """``top_logprobs`` as OpenAI and Ollama take it: a whole number from 0 to 20."""
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20):
        raise ApiError(400, f"top_logprobs must be a whole number from 0 to 20; got {str(top)[:40]}", "top_logprobs")


EFFORTS = {
    "none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high",
}  # fmt: skip


def reasoning(body: dict[str, Any]) -> tuple[Any, str | None]:
    """How much to think before a format (``think=``), and the field it came from: OpenAI's
    ``reasoning_effort`` (or the Responses API's ``reasoning: {"effort"}``), or llama.cpp's
    ``reasoning_budget_tokens`` for an exact number of tokens. None: the default."""
    names = ("reasoning_effort", "reasoning", "reasoning_budget_tokens")
    given = [name for name in names if body.get(name) is not None]
    if len(given) > 1:
        raise ApiError(400, f"give one of {' or '.join(given)}, not both", given[1])
    if not given:
        return None, None
    name, value = given[0], body[given[0]]
    if name == "reasoning_budget_tokens":
        return value, name  # a number of tokens: checked where every think value is
    if name == "reasoning":
        if not isinstance(value, dict):
            raise ApiError(400, 'reasoning must be an object with an "effort"', name)
        name, value = "reasoning.effort", value.get("effort")
        if value is None:  # {"summary": "auto"} alone, or a null effort: the default
            return None, None
    if not isinstance(value, str) or value not in EFFORTS:  # a list or an object is no key either
        raise ApiError(400, f"{name} must be one of {', '.join(EFFORTS)}; got {str(value)[:40]!r}", name)
    return EFFORTS[value], name


def _same(value: Any, number: int) -> bool:
    """``value`` is the number itself, not a boolean equal to it (``true == 1`` in Python)."""
    return not isinstance(value, bool) and value == number


def with_tools(output: FormatAsk | None, body: dict[str, Any]) -> FormatAsk | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` added to the format as asked
    (their contents are checked where every format is: a 400 naming the field)."""
    tools = body["tools"] if body.get("tools") not in (None, []) else None
    choice = body.get("tool_choice")
    if choice is not None and tools is None and choice in ("none", "auto"):
        choice = None  # "none" without tools: nothing to choose from
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise ApiError(400, "parallel_tool_calls must be true or false", "parallel_tool_calls")
    if tools is None and choice is None and parallel is None:
        return output
    parallel = True if parallel is None else parallel
    if output is None:
        return FormatAsk(tools=tools, tool_choice=choice, parallel_tool_calls=parallel)
    return dataclasses.replace(output, tools=tools, tool_choice=choice, parallel_tool_calls=parallel)


def response_format(value: Any) -> tuple[FormatAsk | None, str | None]:
    """``response_format`` as the answer's format and the field it came from: ``text`` (none),
    ``json_object`` (any JSON object; with a ``schema``, as instructor's JSON-schema mode sends
    it, that schema) or ``json_schema`` (``{"name", "schema", "strict"}``). The schema itself is
    checked with the format."""
    if value is None:
        return None, None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ApiError(400, 'response_format must be an object with a "type"', "response_format")
    kind = value["type"]
    if kind == "text":
        return None, None
    if kind == "json_object":
        if value.get("schema") is not None:
            return FormatAsk(schema=value["schema"]), "response_format.schema"
        return FormatAsk(json=True), "response_format"
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
            raise ApiError(
                400, 'response_format.json_schema must be an object with a "name" and a "schema"', "response_format"
            )
        if spec.get("strict") not in (None, True, False):
            raise ApiError(400, "response_format.json_schema.strict must be true or false", "response_format")
        schema = spec.get("schema")
        schema = {} if schema is None else schema  # OpenAI: no schema (absent or null) is any JSON
        return FormatAsk(schema=schema), "response_format.json_schema.schema"
    raise ApiError(
        400,
        f"response_format.type {str(kind)[:40]!r} is not one of text, json_object, json_schema",
        "response_format.type",
    )


def _stops(value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise ApiError(400, "stop must be a string or up to 4 non-empty strings", "stop")
    return stops


def parse_messages(
    value: Any, *, roles: dict[str, str], refused: tuple[str, ...], missing_content: Any = None
) -> list[dict[str, str]]:
    """A request's ``messages`` as the ensemble's: ``roles`` maps each role the API takes to
    ours, a message carrying any of ``refused`` (tool calls, images) is a 400 naming it, and
    the last message must be the user's, or an assistant message after it (the start of an
    answer, continued as llama.cpp's server does). Shared by OpenAI's and Ollama's routes."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty array", "messages")
    messages = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"{where} must be an object", where)
        role = message.get("role")
        role = roles.get(role) if isinstance(role, str) else None
        if role is None:
            raise ApiError(400, f"{where}.role must be {', '.join(roles)}", f"{where}.role")
        for name in refused:
            if message.get(name):
                raise ApiError(400, f"{where}.{name} is not supported by the specem ensemble", f"{where}.{name}")
        calls = message.get("tool_calls")
        default = "" if calls or role == "tool" else missing_content
        content = message_text(_or(message.get("content"), default), f"{where}.content")
        kept = {key: message[key] for key in ("tool_calls", "tool_call_id", "tool_name", "name") if message.get(key)}
        messages.append({"role": role, "content": content, **kept})
    asked = messages[:-1] if messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls") else messages
    if not asked or asked[-1]["role"] not in ("user", "tool"):
        raise ApiError(
            400, "the last message must be the user's (or the start of an answer to continue after it)", "messages"
        )
    return messages


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def message_text(content: Any, where: str) -> str:
    """A message's text: a string, or text parts (an image or audio part is a 400)."""
    if isinstance(content, str):
        return _unicode(content, where)
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(400, f"{where}: only text parts are supported, not {kind!r}", where)
            texts.append(part["text"])
        return _unicode("".join(texts), where)
    raise ApiError(400, f"{where} must be a string or an array of text parts", where)


def _unicode(text: str, where: str) -> str:
    """JSON can carry half of a surrogate pair (a client that cut an emoji in two); no model can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, f"{where} is not valid Unicode (a lone surrogate, such as half an emoji)", where) from None
    return text


# -- responses -----------------------------------------------------------------------------------
FINISH = {"eos": "stop", "stop": "stop", "empty": "stop", "length": "length", "context": "length", "cancelled": "stop"}


def _base(request: Request, kind: str) -> dict[str, Any]:
    return {
        "id": request.id,
        "object": kind,
        "created": request.created,
        "model": request.model,
        "system_fingerprint": None,
    }


def usage(start: StartEvent | None, final: FinalEvent) -> dict[str, Any]:
    """Token counts: the prompt as the largest tokenizer counted it, the answer in its authors'
    tokens (its thinking included, and counted apart, as OpenAI's reasoning models count it)."""
    prompt = prompt_tokens(start)
    counts: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": final.tokens}
    counts["total_tokens"] = prompt + final.tokens
    details = {"reasoning_tokens": final.reasoning_tokens} if final.reasoning_tokens else {}
    if final.predicted_tokens or final.unpredicted_tokens:  # a prediction was read ahead
        details.update(accepted_prediction_tokens=final.predicted_tokens,
                       rejected_prediction_tokens=final.unpredicted_tokens)  # fmt: skip
    if details:
        counts["completion_tokens_details"] = details
    return counts


def piece_chunk(request: Request, piece: Piece, first: bool, index: int = 0) -> dict[str, Any]:
    """A round's piece as a chunk: its thinking as ``reasoning_content`` (as llama.cpp's server
    sends it), its text as ``content``, each call made whole as OpenAI streams calls (its
    index, id, type, name and arguments in one piece)."""
    delta: dict[str, Any] = {"role": "assistant"} if first else {}
    if piece.reasoning:
        delta["reasoning_content"] = piece.reasoning
    if piece.text:
        delta["content"] = piece.text
    if piece.calls:
        delta["tool_calls"] = [{"index": i, **_call(c)} for i, c in piece.calls]
    logprobs = _logprobs_of(request, piece.event.logprobs) if piece.text else None
    return {
        **_base(request, "chat.completion.chunk"),
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}],
        "x_specem": round_facts(piece.event),
    }


def _logprobs_of(request: Request, tokens: Sequence[TokenLogprob]) -> dict[str, Any] | None:
    """``choices[].logprobs`` when asked (a tool reply's envelope is no content: none)."""
    if not request.logprobs or request.tools:
        return None
    return {"content": logprobs_content(tokens), "refusal": None}


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


def _finish_reason(final: FinalEvent) -> str:
    return finish_name(final, FINISH, "stop", "tool_calls")


def final_chunks(
    request: Request, start: StartEvent | None, final: FinalEvent, first: bool, index: int = 0
) -> list[dict[str, Any]]:
    """The chunk that ends a choice (its finish reason)."""
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
    return [
        {
            **_base(request, "chat.completion.chunk"),
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": _finish_reason(final)}],
            "x_specem": answer_facts(start, final),
        }
    ]


def usage_chunk(request: Request, wholes: list[Whole]) -> dict[str, Any]:
    """The usage chunk that ends a stream when ``include_usage`` asked for it."""
    return {**_base(request, "chat.completion.chunk"), "choices": [], "usage": usage_of(wholes)}


def usage_of(wholes: list[Whole]) -> dict[str, Any]:
    """Token counts of one request's choices: the prompt once, every choice's answer."""
    counts = [usage(whole.start, whole.final) for whole in wholes if whole.final is not None]
    total = dict(counts[0])
    for more in counts[1:]:
        total["completion_tokens"] += more["completion_tokens"]
        total["total_tokens"] += more["completion_tokens"]
    return total


def completion(request: Request, wholes: list[Whole]) -> dict[str, Any]:
    """The whole completion, one choice per answer (``n``)."""
    choices = [_choice(request, index, whole) for index, whole in enumerate(wholes)]
    first = wholes[0]
    assert first.final is not None
    facts = answer_facts(first.start, first.final)
    if len(wholes) > 1:  # each choice's own facts beside the first's
        facts["choices"] = [answer_facts(w.start, w.final) for w in wholes if w.final is not None]
    return {**_base(request, "chat.completion"), "choices": choices, "usage": usage_of(wholes), "x_specem": facts}


def _choice(request: Request, index: int, whole: Whole) -> dict[str, Any]:
    final = whole.final
    assert final is not None
    message: dict[str, Any] = {"role": "assistant", "content": final.text, "refusal": None}
    if final.reasoning:  # thought before the format: llama.cpp's and DeepSeek's field
        message["reasoning_content"] = final.reasoning
    if request.tools:
        reply = whole_reply(final, tools=True)
        message["content"] = reply.content
        if reply.calls:
            message["tool_calls"] = [_call(c) for c in reply.calls]
    return {
        "index": index,
        "message": message,
        "logprobs": _logprobs_of(request, whole.tokens),
        "finish_reason": _finish_reason(final),
    }


def models_list(members: list[str], created: int, runs_on: dict[str, str] | None = None) -> dict[str, Any]:
    """The ensemble, then each member alone (``specem/NAME``); ``runs_on``: where each member runs
    ("CPU", "GPU 25/25 layers", "RPC 192.168.1.20:50052")."""
    entry = {"id": MODEL_ID, "object": "model", "created": created, "owned_by": "specem-local", "members": members}
    alone = [
        {"id": f"{MODEL_ID}/{name}", "object": "model", "created": created, "owned_by": "specem-local",
         "member_of": MODEL_ID, "runs_on": (runs_on or {}).get(name)}
        for name in members
    ]  # fmt: skip
    return {"object": "list", "data": [{**entry, "runs_on": runs_on or {}}, *alone]}
