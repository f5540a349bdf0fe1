"""OpenAI's Responses API (``POST /v1/responses``), its requests, as plain functions: a body
becomes an ``Ask`` (``input`` as text or items, ``instructions``, ``text.format``, function
``tools``, ``reasoning``, ``max_output_tokens``). The way back (the ``response`` object, its
items, the stream of events the ``openai`` client reads) is ``responses_output.py``.

An earlier response is continued by ``previous_response_id``: the server keeps each response's
conversation (``store``, the default) and this module only turns items into messages and back.
What the ensemble cannot do (built-in tools such as web search, images, background responses) is
a 400 naming the field.

MCP tools (``{"type": "mcp", "server_label": NAME}``) opt in to the tools of a server started
with ``specem serve --mcp``: ``responses_mcp.py`` checks them against the servers offered.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine import Ask, FormatAsk
from specem_local.mcp import Offered
from specem_local.server.errors import ApiError
from specem_local.server.openai_format import MODEL_ID, message_text, reasoning
from specem_local.server.replies import member_named, specem_settings
from specem_local.server.responses_mcp import McpServer, item_text, mcp_call_messages, mcp_choice, mcp_names, mcp_tool

REFUSED = {
    "background": "background responses",
    "conversation": "conversations (continue with previous_response_id)",
    "prompt": "prompt templates",
}
LOGPROBS = "message.output_text.logprobs"  # an ``include`` asking for token log-probabilities
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


@dataclass(frozen=True)
class Request:
    items: list[dict[str, Any]]  # the conversation as items, the earlier response's first (kept for the next)
    ask: Ask
    previous: str | None = None  # previous_response_id
    stream: bool = False
    store: bool = True
    tools: bool = False
    echo: dict[str, Any] = field(default_factory=dict)  # request fields a response repeats back
    fields: dict[str, str] = field(default_factory=dict)  # a setting -> the field it came from
    model: str = MODEL_ID  # as asked: the ensemble, or one member alone (``specem/NAME``)
    id: str = field(default_factory=lambda: "resp_" + uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))
    mcp: tuple[McpServer, ...] = ()  # the MCP servers opted in, with the tools allowed of each
    max_tool_calls: int | None = None  # MCP calls this server may run for the response (None: no limit)
    truncation: str = "disabled"  # "auto": the oldest turns are dropped until the conversation fits

    @property
    def mcp_tools(self) -> dict[str, Offered]:
        """The MCP tools offered to the models, by the name they call."""
        return {tool.name: tool for server in self.mcp for tool in server.tools}

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as the history keeps it (the earlier response's included)."""
        return [m for m in self.ask.prompt if isinstance(m, dict)] if isinstance(self.ask.prompt, list) else []


def parse_request(
    body: Any,
    earlier: list[dict[str, Any]] | None = None,
    members: Sequence[str] = (),
    servers: Sequence[McpServer] | None = None,
) -> Request:
    """A Responses request as the ensemble's ask; ``earlier``: the items of the response it
    continues (``previous_response_id``), already looked up; ``members``: those it may name to
    answer alone (``specem/NAME``); ``servers``: the MCP servers offered (None: the server was
    started without ``--mcp``)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    member = member_named(body.get("model"), members)
    for name, what in REFUSED.items():
        if body.get(name) not in (None, False):
            raise ApiError(400, f"{what} is not supported by the specem ensemble; remove {name!r}", name)
    include, top = body.get("include"), body.get("top_logprobs") not in (None, 0)
    if top or (isinstance(include, list) and LOGPROBS in include):
        field = "top_logprobs" if top else "include"
        raise ApiError(400, "token log-probabilities are served on /v1/chat/completions (logprobs: true), not on "
                            "/v1/responses", field)  # fmt: skip
    if body.get("n") not in (None, 1):  # not a Responses field: a client meant chat completions' n
        raise ApiError(400, "the Responses API answers once; ask /v1/chat/completions with n for several", "n")
    items = [*(earlier or []), *input_items(body.get("input"))]
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "instructions must be text", "instructions")
    messages = messages_of(items, mcp_names(servers or ()))
    if not messages:
        raise ApiError(400, "input has nothing to answer: reasoning and mcp_list_tools items are read as context "
                       "only; add a user message", "input")  # fmt: skip
    if instructions:  # instructions are this request's own: never carried to the next one
        messages = [{"role": "system", "content": message_text(instructions, "instructions")}, *messages]
    settings, sent = _settings(body)
    output, param = _format(body.get("text"))
    most = body.get("max_tool_calls")
    if most is not None and (not isinstance(most, int) or isinstance(most, bool) or most < 0):
        raise ApiError(400, "max_tool_calls must be a whole number, 0 or more", "max_tool_calls")
    output, tools, mcp = _tools(body, output, servers, offered=most != 0)
    think, think_field = reasoning(body)
    if think_field:
        sent["think"] = think_field
    stream, store = _switch(body, "stream", False), _switch(body, "store", True)
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise ApiError(400, "previous_response_id must be text", "previous_response_id")
    _metadata(body.get("metadata"))
    truncation = "disabled" if body.get("truncation") is None else body["truncation"]
    if truncation not in ("auto", "disabled"):
        raise ApiError(400, f'truncation must be "auto" or "disabled", got {repr(truncation)[:40]}', "truncation")
    echo = {
        key: body.get(key)
        for key in ("instructions", "temperature", "top_p", "max_output_tokens", "metadata", "max_tool_calls")
    }
    formats = dict.fromkeys(("schema", "json"), param) if param else {}
    echo.update(
        tool_choice=body.get("tool_choice") or "auto",
        parallel_tool_calls=_switch(body, "parallel_tool_calls", True),
        truncation=truncation,
    )
    return Request(
        items,
        Ask(messages, settings, output, think, (member,) if member else None),
        previous,
        stream,
        store,
        tools,
        {**echo, "tools": body.get("tools") or [], "text": body.get("text") or {"format": {"type": "text"}}},
        {**sent, **formats},
        model=f"{MODEL_ID}/{member}" if member else MODEL_ID,
        mcp=mcp,
        max_tool_calls=most,
        truncation=truncation,
    )


def truncated(ask: Ask) -> Ask | None:
    """``truncation: "auto"``: the conversation without its oldest exchange (up to the next
    user message: its answer, calls and results go with it; the instructions and system
    messages stay); None when the last user message is the first."""
    messages: list[dict[str, Any]] = list(ask.prompt)  # type: ignore[arg-type]  # this route's asks are dicts
    first = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    later = next((i for i in range(first + 1, len(messages)) if messages[i]["role"] == "user"), None)
    return None if later is None else dataclasses.replace(ask, prompt=[*messages[:first], *messages[later:]])


def _metadata(value: Any) -> None:
    """``metadata`` is echoed back: an object of at most 16 strings, as OpenAI's."""
    if value is None:
        return
    if not isinstance(value, dict) or len(value) > 16 or not all(isinstance(v, str) for v in value.values()):
        raise ApiError(400, "metadata must be an object of at most 16 keys with text values", "metadata")


def _switch(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false", name)
    return value


def _settings(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The sampling fields as settings (checked where every setting is) and their names as sent."""
    settings: dict[str, Any] = {}
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            settings[name] = body[name]
    if body.get("temperature") is not None:  # as on every route: 0 is greedy, any other samples
        settings["greedy"] = body["temperature"] == 0
    if body.get("max_output_tokens") is not None:
        settings["max_tokens"] = body["max_output_tokens"]
    return {**settings, **specem_settings(body)}, {"max_tokens": "max_output_tokens"}


def input_items(value: Any) -> list[dict[str, Any]]:
    """``input``: text (one user message) or a list of items, checked."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise ApiError(400, "input must be text or a non-empty list of items", "input")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise ApiError(400, f"input[{index}] must be an object", f"input[{index}]")
    return [dict(item) for item in value]


def messages_of(items: list[dict[str, Any]], names: dict[tuple[str, str], str] | None = None) -> list[dict[str, Any]]:
    """Items as the ensemble's messages: messages by role, ``function_call`` items as an
    assistant's tool calls, ``function_call_output`` items as tool results, an ``mcp_call`` item
    as both (its tool named as the models call it, ``names``); a reasoning item and an
    ``mcp_list_tools`` item are left out (the members never read their own thinking back, and
    the tools are offered anew)."""
    messages: list[dict[str, Any]] = []
    mcp_turn: dict[str, Any] | None = None  # the assistant message of the mcp_call items in a row
    for index, item in enumerate(items):
        where, kind = f"input[{index}]", item.get("type", "message")
        if kind != "mcp_call":
            mcp_turn = None
        if kind == "mcp_call":
            mcp_turn = mcp_call_messages(item, where, names or {}, messages, mcp_turn)
        elif kind == "message":
            given = item.get("role")
            role = ROLES.get(given) if isinstance(given, str) else None
            if role is None:
                raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
            messages.append({"role": role, "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {
                "id": item_text(item, "call_id", where),
                "type": "function",
                "function": {"name": item_text(item, "name", where), "arguments": item_text(item, "arguments", where)},
            }
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            text = _output_text(item.get("output"), f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": item_text(item, "call_id", where), "content": text})
        elif kind not in ("reasoning", "mcp_list_tools"):
            raise ApiError(
                400, f"{where}.type {str(kind)[:40]!r} is not supported by the specem ensemble", f"{where}.type"
            )
    return messages


def _content(content: Any, where: str) -> str:
    """A message's content: text, or parts (``input_text``, ``output_text``, ``text``)."""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(400, f"{where}: only text parts are supported, not {kind!r}", where)
            parts.append({"type": "text", "text": part.get("text")})
        content = parts
    return message_text(content, where)


def _format(value: Any) -> tuple[FormatAsk | None, str | None]:
    """``text.format``: ``text`` (none), ``json_object`` or ``json_schema`` (its ``schema`` flat
    in the format, as the Responses API has it)."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise ApiError(400, 'text must be an object, such as {"format": {"type": "json_object"}}', "text")
    chosen = value.get("format")
    if chosen is None:
        return None, None
    kind = chosen.get("type") if isinstance(chosen, dict) else None
    if kind == "text":
        return None, None
    if kind == "json_object":
        return FormatAsk(json=True), "text.format"
    if kind == "json_schema":
        assert isinstance(chosen, dict)
        if not isinstance(chosen.get("name"), str) or "schema" not in chosen:
            raise ApiError(400, 'text.format must have a "name" and a "schema"', "text.format")
        schema = {} if chosen["schema"] is None else chosen["schema"]  # as the chat route: any JSON
        return FormatAsk(schema=schema), "text.format.schema"
    raise ApiError(400, "text.format.type must be text, json_object or json_schema", "text.format.type")


def _output_text(output: Any, where: str) -> str:
    """A function call's output: its text, or its text parts joined (as the Agents SDK sends a
    tool's text); any other part (an image, a file) is a 400 naming it."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        return json.dumps(output, ensure_ascii=False)
    texts = []
    for index, part in enumerate(output):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise ApiError(400, f"{where}[{index}] must be a text part: the specem ensemble reads text only",
                           f"{where}[{index}]")  # fmt: skip
        texts.append(part["text"])
    return "".join(texts)


def _tools(
    body: dict[str, Any], output: FormatAsk | None, servers: Sequence[McpServer] | None = None, offered: bool = True
) -> tuple[FormatAsk | None, bool, tuple[McpServer, ...]]:
    """``tools`` (function tools, their fields flat as the Responses API has them, and MCP
    tools naming servers of ``--mcp``), ``tool_choice`` and ``parallel_tool_calls`` added to
    the format; the MCP servers opted in; a built-in tool is a 400 naming it. ``offered``
    false (``max_tool_calls: 0``): the servers are listed, their tools not offered to the answer."""
    tools = body.get("tools")
    parallel = _switch(body, "parallel_tool_calls", True)
    if tools in (None, []):
        if body.get("tool_choice") not in (None, "none", "auto"):
            raise ApiError(400, 'tool_choice must be "none" or "auto" when no tools are given', "tool_choice")
        return output, False, ()
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list", "tools")
    specs: list[dict[str, Any]] = []
    mcp: list[McpServer] = []
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind not in ("function", "mcp"):
            said = f"{str(kind)[:40]!r} tools are" if kind else "a tool without a type is"
            raise ApiError(
                400,
                f"{said} not supported by the specem ensemble (function tools are, and mcp tools naming a "
                "server of specem serve --mcp)",
                f"tools[{index}].type",
            )
        assert isinstance(tool, dict)
        if kind == "mcp":
            mcp.append(mcp_tool(tool, f"tools[{index}]", servers, mcp))
            continue
        if not isinstance(tool.get("name"), str):
            raise ApiError(400, f"tools[{index}].name must be the function's name, a string", f"tools[{index}].name")
        function = {key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None}
        specs.append({"type": "function", "function": function})
    functions = {spec["function"].get("name") for spec in specs}
    for server in mcp if offered else ():
        specs += [tool.spec for tool in server.tools]
        clash = next((tool for tool in server.tools if tool.name in functions), None)
        if clash is not None:
            index = next(i for i, t in enumerate(tools) if t.get("name") == clash.name)
            raise ApiError(400, f"a function tool is named {clash.name!r}, as a tool of the MCP server "
                                f"{server.label!r} is; rename the function", f"tools[{index}].name")  # fmt: skip
    choice = _tool_choice(body.get("tool_choice"), mcp)
    if output is not None:
        raise ApiError(400, "give tools or text.format, not both", "text.format")
    if not specs:  # only MCP servers, none of whose tools is allowed
        return None, False, tuple(mcp)
    return FormatAsk(tools=specs, tool_choice=choice, parallel_tool_calls=parallel), True, tuple(mcp)


def _tool_choice(choice: Any, mcp: list[McpServer]) -> Any:
    """``tool_choice`` as the engine takes it: a function named, or an MCP server's tool
    (``{"type": "mcp", "server_label", "name"}``, ``mcp_choice``)."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") == "mcp":
        return mcp_choice(choice, mcp)
    if choice.get("type") == "allowed_tools":
        raise ApiError(400, "tool_choice of type 'allowed_tools' is not served: offer only those tools in tools, "
                       'and give its mode ("auto" or "required") as tool_choice', "tool_choice")  # fmt: skip
    if choice.get("type") not in (None, "function"):
        said = repr(choice.get("type"))[:40]
        raise ApiError(400, f'tool_choice of type {said} is not served: give "auto", "required", "none", a function '
                       '({"type": "function", "name": ...}) or an MCP server\'s tool', "tool_choice")  # fmt: skip
    return {"type": "function", "function": {"name": choice.get("name")}}
