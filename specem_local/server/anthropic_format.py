"""Anthropic's Messages API (``POST /v1/messages``: what Claude Code and the ``anthropic`` SDK
speak, and llama.cpp's server and Ollama serve), the request, as plain functions: a request body
becomes an ``Ask`` (or an ``ApiError`` whose message names the field: Anthropic's errors carry
no ``param``). The way back (a ``message``, the stream's named events) is ``anthropic_output.py``.

An assistant's ``tool_use`` blocks and a user's ``tool_result`` blocks become the engine's
OpenAI-shaped messages (the assistant's ``tool_calls`` with their ids, ``tool`` messages with a
``tool_call_id``), which each member renders in its own tool format. The ensemble's own facts
ride in ``x_specem``, which the SDK keeps as an extra field, never in a content block.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine import MIN_ANSWER, Ask, FormatAsk
from specem_local.server.errors import ApiError
from specem_local.server.openai_format import message_text
from specem_local.server.replies import member_named, specem_settings

MODEL_ID = "specem"
PATH = "/v1/messages"
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}  # "tool" names one function
THINKING = ("enabled", "disabled", "adaptive")
DROPPED_BLOCKS = ("thinking", "redacted_thinking")  # earlier thinking sent back: not read again, as Anthropic does


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, Any]]  # the conversation in the engine's OpenAI shape (the history keeps it)
    ask: Ask  # the answer as asked: the conversation, its settings, format and thinking
    stream: bool = False
    tools: bool = False  # tools were offered: the answer is tool uses or a message
    fields: dict[str, str] = field(default_factory=dict)  # a setting -> the request field it came from
    model: str = MODEL_ID  # as asked: the ensemble, or one member alone (``specem/NAME``)
    thinking_shown: bool = True  # thinking.display "omitted": the thinking block comes back empty
    id: str = field(default_factory=lambda: "msg_" + uuid.uuid4().hex[:24])


def parse_request(body: Any, members: Sequence[str] = ()) -> Request:
    """A Messages request as the ensemble's ask (``members``: those a request may name to answer
    alone, as ``specem/NAME``, as on the other routes): ``model``, ``max_tokens`` (required, as
    Anthropic's), ``system``, ``messages``, the sampling fields, ``stop_sequences``, ``tools`` and
    ``tool_choice``, ``thinking``, ``output_config.format``; fields it does not know are left
    alone, as Anthropic's API leaves them (``metadata``, ``cache_control``, ...)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if body.get("model") is None:
        raise ApiError(400, f"model: Field required; this server serves {MODEL_ID!r}", "model")
    if not isinstance(body["model"], str):
        raise ApiError(400, f"model must be a string such as {MODEL_ID!r}", "model")
    if body.get("mcp_servers") not in (None, []):
        raise ApiError(400, "mcp_servers: the specem ensemble connects to no MCP server a request names (its "
                       "Responses route offers those specem serve --mcp started)", "mcp_servers")  # fmt: skip
    member = member_named(body["model"], members)  # another name: a 404 naming what is served
    if body.get("max_tokens") is None:
        raise ApiError(400, "max_tokens: Field required (the most tokens the answer may take)", "max_tokens")
    # Values go to the settings as they came: checked there, like every setting, and a bad one
    # is a 400 naming the field.
    settings: dict[str, Any] = {"max_tokens": body["max_tokens"]}
    if body.get("temperature") is not None:
        settings["temperature"] = body["temperature"]
        settings["greedy"] = body["temperature"] == 0
    for name in ("top_p", "top_k"):
        if body.get(name) is not None:
            settings[name] = body[name]
    stops = _stops(body.get("stop_sequences"))
    if stops:
        settings["stop"] = list(stops)
    settings.update(specem_settings(body))
    stream = False if body.get("stream") is None else body["stream"]
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", "stream")
    messages = [*_system(body.get("system")), *parse_messages(body.get("messages"))]
    schema, schema_field = _output_schema(body)
    tools = _tools(body.get("tools"))
    choice, parallel = _tool_choice(body.get("tool_choice"), tools is not None)
    output = None
    if tools is not None and schema is not None:
        where = schema_field.removesuffix(".schema")
        raise ApiError(400, f"{where} and tools cannot be given together here: the ensemble writes one format "
                       "per answer; drop one", where)  # fmt: skip
    if tools is not None or schema is not None:
        choice = choice if tools is not None else None  # "auto" or "none" without tools: nothing to choose
        output = FormatAsk(schema=schema, tools=tools, tool_choice=choice, parallel_tool_calls=parallel)
    think = _fitted_budget(_thinking(body.get("thinking")), body["max_tokens"])
    _metadata(body.get("metadata"))
    fields = {"stop": "stop_sequences", "think": "thinking.budget_tokens", "schema": schema_field}
    ask = Ask(messages, settings, output, think, (member,) if member else None)
    model = f"{MODEL_ID}/{member}" if member else MODEL_ID
    shown = _thinking_shown(body.get("thinking"))
    return Request(messages, ask, stream, tools is not None, fields, model, thinking_shown=shown)


def _metadata(value: Any) -> None:
    """``metadata`` is left alone, but only as Anthropic's API takes it: an object whose
    ``user_id`` (if any) is a string."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ApiError(400, "metadata must be an object (with a user_id string)", "metadata")
    if value.get("user_id") is not None and not isinstance(value["user_id"], str):
        raise ApiError(400, "metadata.user_id must be a string", "metadata.user_id")


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(stop, str) for stop in value):
        raise ApiError(400, "stop_sequences must be an array of strings", "stop_sequences")
    return tuple(value)


def _system(value: Any) -> list[dict[str, Any]]:
    """``system``: text, or text blocks (joined by a line break): a system message first."""
    if value is None:
        return []
    text = _text_blocks(value, "system")
    return [{"role": "system", "content": text}] if text else []


def _text_blocks(value: Any, where: str) -> str:
    """Text, or an array of text blocks (``cache_control`` and ``citations`` left alone), as one
    text; any other block is a 400 naming it."""
    if isinstance(value, str):
        return message_text(value, where)
    if not isinstance(value, list):
        raise ApiError(400, f"{where} must be a string or an array of text blocks", where)
    texts = []
    for index, block in enumerate(value):
        place = f"{where}[{index}]"
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise ApiError(400, f"{place}: {_kind(block)} is not supported here; send text blocks", place)
        texts.append(message_text(block["text"], f"{place}.text"))
    return "\n".join(texts)


def _kind(block: Any) -> str:
    """A content block's kind as an error names it."""
    if isinstance(block, dict) and isinstance(block.get("type"), str):
        return f"a block of type {block['type'][:40]!r}"
    return f"a {type(block).__name__}" if not isinstance(block, dict) else 'a block without a "type"'


def parse_messages(value: Any) -> list[dict[str, Any]]:
    """``messages`` as the engine's: each user or assistant message's text, an assistant's
    ``tool_use`` blocks as its ``tool_calls``, a user's ``tool_result`` blocks as ``tool``
    messages (each answering a ``tool_use`` of the message before by its id, and every one
    answered), earlier thinking dropped;
    images, documents and the rest are a 400 naming the block. The last message must be the
    user's, or an assistant's text after it (the start of the answer, continued)."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty array", "messages")
    out: list[dict[str, Any]] = []
    called: set[str] = set()  # the tool_use ids of the message before, each answered in the next one
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"{where} must be an object", where)
        role = message.get("role")
        if role not in ("user", "assistant"):
            said = repr(role)[:40]
            raise ApiError(400, f"{where}.role must be user or assistant, got {said} (system goes in system)", where)
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"role": role, "content": message_text(content, f"{where}.content")}]
        elif isinstance(content, list):
            blocks = _assistant(content, where) if role == "assistant" else _user(content, where, called)
        else:
            raise ApiError(400, f"{where}.content must be a string or an array of content blocks", f"{where}.content")
        _all_answered(called, blocks, where)
        called = {call["id"] for block in blocks for call in block.get("tool_calls", ())}
        out += blocks
    last = out[-1]
    asked = out[:-1] if last["role"] == "assistant" and not last.get("tool_calls") else out
    if not asked or asked[-1]["role"] not in ("user", "tool"):
        said = "messages: the last message must be the user's (or the start of the assistant's answer after it)"
        raise ApiError(400, said, "messages")
    return out


def _all_answered(called: set[str], blocks: list[dict[str, Any]], where: str) -> None:
    """Anthropic's rule: every ``tool_use`` of a message is answered by a ``tool_result`` in
    the next one (a call left unanswered would read as if it had been)."""
    missing = called - {block["tool_call_id"] for block in blocks if block["role"] == "tool"}
    if missing:
        ids = ", ".join(sorted(missing))[:200]
        said = (f"{where}: tool_use ids were found without tool_result blocks immediately after: {ids}. Each "
                "tool_use block must have a corresponding tool_result block in the next message")  # fmt: skip
        raise ApiError(400, said, where)


def _assistant(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """An assistant's blocks as one message: its text and its tool uses as ``tool_calls``."""
    texts, calls = [], []
    for number, block in enumerate(blocks):
        place = f"{where}.content[{number}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_of(block, place))
        elif kind == "tool_use":
            calls.append(_tool_use(block, place))
        elif kind not in DROPPED_BLOCKS:
            raise ApiError(400, _refused(block, place, "text, tool_use and thinking"), place)
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    return [{**message, "tool_calls": calls}] if calls else [message]


def _user(blocks: list[Any], where: str, called: set[str]) -> list[dict[str, Any]]:
    """A user's blocks in order: each run of text as a user message, each ``tool_result`` as a
    ``tool`` message."""
    if not blocks:
        raise ApiError(400, f"{where}.content must not be empty", f"{where}.content")
    out: list[dict[str, Any]] = []
    for number, block in enumerate(blocks):
        place = f"{where}.content[{number}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text = _text_of(block, place)
            if out and out[-1]["role"] == "user":
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text})
        elif kind == "tool_result":
            out.append(_tool_result(block, place, called))
        else:
            raise ApiError(400, _refused(block, place, "text and tool_result"), place)
    return out


def _refused(block: Any, place: str, served: str) -> str:
    if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result", "thinking", "redacted_thinking"):
        return f"{place}: {block['type']} blocks belong in the other role's messages"
    return f"{place}: {_kind(block)} is not supported by the specem ensemble (it reads {served} blocks)"


def _text_of(block: dict[str, Any], place: str) -> str:
    if not isinstance(block.get("text"), str):
        raise ApiError(400, f"{place}.text must be a string", f"{place}.text")
    return message_text(block["text"], f"{place}.text")


def _tool_use(block: dict[str, Any], place: str) -> dict[str, Any]:
    """An assistant's earlier ``tool_use`` as an OpenAI-shaped call (its arguments as JSON text)."""
    for name in ("id", "name"):
        if not isinstance(block.get(name), str) or not block[name]:
            raise ApiError(400, f"{place}.{name} must be a non-empty string", f"{place}.{name}")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise ApiError(400, f"{place}.input must be an object", f"{place}.input")
    function = {"name": block["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": block["id"], "type": "function", "function": function}


def _tool_result(block: dict[str, Any], place: str, called: set[str]) -> dict[str, Any]:
    """A ``tool_result`` as a ``tool`` message: its text (an error's marked as one), answering
    the earlier ``tool_use`` with its ``tool_use_id``."""
    answered = block.get("tool_use_id")
    if not isinstance(answered, str) or answered not in called:
        said = repr(answered)[:60]
        message = f"{place}.tool_use_id {said} answers no tool_use block of the message before"
        raise ApiError(400, message, f"{place}.tool_use_id")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise ApiError(400, f"{place}.is_error must be true or false", f"{place}.is_error")
    content = block.get("content")
    text = "" if content is None else _text_blocks(content, f"{place}.content")
    return {"role": "tool", "tool_call_id": answered, "content": f"Error: {text}" if is_error else text}


def _tools(value: Any) -> list[dict[str, Any]] | None:
    """``tools``: custom tools (``name``, ``description``, ``input_schema``) as the engine's
    OpenAI-shaped functions; their names and schemas are checked where every tool is. A tool
    Anthropic runs or defines itself (``web_search_...``, ``bash_...``) is a 400 naming it."""
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise ApiError(400, "tools must be an array of tools", "tools")
    functions = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise ApiError(400, f"{where} must be an object", where)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            said = repr(kind)[:60]
            message = (
                f"{where}.type {said} is a tool Anthropic's servers run or define; the specem ensemble "
                "serves custom tools (name, description, input_schema)"
            )
            raise ApiError(400, message, f"{where}.type")
        if not isinstance(tool.get("input_schema"), dict):
            raise ApiError(400, f"{where}.input_schema must be a JSON Schema object", f"{where}.input_schema")
        spec = {"name": tool.get("name"), "description": tool.get("description"), "parameters": tool["input_schema"]}
        functions.append({"type": "function", "function": spec})
    return functions


def _tool_choice(value: Any, tools: bool) -> tuple[Any, bool]:
    """``tool_choice`` as the engine's (auto, any -> required, none, tool -> its name) and
    whether several calls may come at once (``disable_parallel_tool_use``)."""
    if value is None:
        return None, True
    if not isinstance(value, dict) or value.get("type") not in (*TOOL_CHOICES, "tool"):
        raise ApiError(400, 'tool_choice must be an object with a "type": auto, any, tool or none', "tool_choice")
    single = value.get("disable_parallel_tool_use")
    if single is not None and not isinstance(single, bool):
        message = "tool_choice.disable_parallel_tool_use must be true or false"
        raise ApiError(400, message, "tool_choice.disable_parallel_tool_use")
    kind = value["type"]
    if kind == "tool" and not isinstance(value.get("name"), str):
        raise ApiError(400, 'tool_choice.name must name a tool with "type": "tool"', "tool_choice.name")
    if not tools and kind in ("any", "tool"):
        raise ApiError(400, f'tool_choice "{kind}" needs tools to choose from', "tool_choice")
    return (value["name"] if kind == "tool" else TOOL_CHOICES[kind]), not single


def _thinking(value: Any) -> Any:
    """``thinking`` as ``think=``: ``enabled`` its ``budget_tokens``, ``disabled`` off,
    ``adaptive`` as much as fits; None: the ensemble's setting. The budget is checked where
    every think value is (it must leave the answer room in ``max_tokens``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in THINKING:
        raise ApiError(400, 'thinking must be an object with a "type": enabled, disabled or adaptive', "thinking")
    if value["type"] == "disabled":
        return False
    if value["type"] == "adaptive":
        return True
    budget = value.get("budget_tokens")
    if isinstance(budget, bool) or not isinstance(budget, int):
        said = "Field required" if budget is None else f"must be an integer, got {repr(budget)[:40]}"
        raise ApiError(400, f"thinking.budget_tokens: {said}", "thinking.budget_tokens")
    return budget


def _thinking_shown(value: Any) -> bool:
    """``thinking.display``: ``summarized`` (or none) gives the thinking, ``omitted`` its block
    without its text, as Anthropic's API redacts it."""
    display = value.get("display") if isinstance(value, dict) else None
    if display not in (None, "summarized", "omitted"):
        said = repr(display)[:40]
        raise ApiError(400, f'thinking.display must be "summarized" or "omitted", got {said}', "thinking.display")
    return display != "omitted"


def _fitted_budget(think: Any, max_tokens: Any) -> Any:
    """A budget below ``max_tokens``, as Anthropic's API takes it, that would leave the answer
    fewer than ``MIN_ANSWER`` tokens is fitted to leave it that many (Claude Code's "ultrathink"
    asks 31,999 of 32,000); one of ``max_tokens`` or more is left to be refused where every
    budget is checked."""
    if isinstance(think, bool) or not isinstance(think, int) or isinstance(max_tokens, bool):
        return think
    if isinstance(max_tokens, int) and 0 <= think < max_tokens and max_tokens > MIN_ANSWER:  # else refused as sent
        return min(think, max_tokens - MIN_ANSWER)
    return think


def _output_schema(body: dict[str, Any]) -> tuple[Any, str]:
    """``output_config.format`` (or the beta's ``output_format``): ``{"type": "json_schema",
    "schema": {...}}``, the answer's JSON Schema (checked with the format; None: plain text),
    and the field it came from."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise ApiError(400, "output_config must be an object", "output_config")
    where, value = "output_config.format", (config or {}).get("format")
    if value is None:
        where, value = "output_format", body.get("output_format")
    if value is None:
        return None, "output_config.format.schema"
    if not isinstance(value, dict) or value.get("type") != "json_schema" or not isinstance(value.get("schema"), dict):
        raise ApiError(400, f'{where} must be {{"type": "json_schema", "schema": {{...}}}}', where)
    return value["schema"], f"{where}.schema"
