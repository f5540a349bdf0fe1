"""OpenAI's Responses API (``POST /v1/responses``), both ways, as plain functions: a request body
becomes an ``Ask`` (``input`` as text or items, ``instructions``, ``text.format``, function
``tools``, ``reasoning``, ``max_output_tokens``), and the answer becomes a ``response`` object, or
the stream of events the ``openai`` client reads (``response.created`` ... ``response.completed``),
from the same pieces every API writes (``replies.py``).

An earlier response is continued by ``previous_response_id``: the server keeps each response's
conversation (``store``, the default) and this module only turns items into messages and back.
What the ensemble cannot do (built-in tools such as web search, images, background responses) is
a 400 naming the field.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine import Ask, FormatAsk, ToolCall
from specem_local.events import FinalEvent, StartEvent
from specem_local.server.errors import ApiError
from specem_local.server.openai_format import MODEL_ID, message_text, reasoning
from specem_local.server.replies import Piece, Whole, answer_facts, member_named, prompt_tokens, whole_reply

REFUSED = {
    "background": "background responses",
    "conversation": "conversations (continue with previous_response_id)",
    "prompt": "prompt templates",
}
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

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as the history keeps it (the earlier response's included)."""
        return [m for m in self.ask.prompt if isinstance(m, dict)] if isinstance(self.ask.prompt, list) else []


def parse_request(body: Any, earlier: list[dict[str, Any]] | None = None, members: Sequence[str] = ()) -> Request:
    """A Responses request as the ensemble's ask; ``earlier``: the items of the response it
    continues (``previous_response_id``), already looked up; ``members``: those it may name to
    answer alone (``specem/NAME``)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    member = member_named(body.get("model"), members)
    for name, what in REFUSED.items():
        if body.get(name) not in (None, False):
            raise ApiError(400, f"{what} is not supported by the specem ensemble; remove {name!r}", name)
    if body.get("n") not in (None, 1):  # not a Responses field: a client meant chat completions' n
        raise ApiError(400, "the Responses API answers once; ask /v1/chat/completions with n for several", "n")
    items = [*(earlier or []), *input_items(body.get("input"))]
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "instructions must be text", "instructions")
    messages = messages_of(items)
    if instructions:  # instructions are this request's own: never carried to the next one
        messages = [{"role": "system", "content": message_text(instructions, "instructions")}, *messages]
    settings, sent = _settings(body)
    output, param = _format(body.get("text"))
    output, tools = _tools(body, output)
    think, think_field = reasoning(body)
    if think_field:
        sent["think"] = think_field
    stream, store = _switch(body, "stream", False), _switch(body, "store", True)
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise ApiError(400, "previous_response_id must be text", "previous_response_id")
    echo = {key: body.get(key) for key in ("instructions", "temperature", "top_p", "max_output_tokens", "metadata")}
    formats = dict.fromkeys(("schema", "json"), param) if param else {}
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
    )


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
    if body.get("temperature") == 0:
        settings["greedy"] = True
    if body.get("max_output_tokens") is not None:
        settings["max_tokens"] = body["max_output_tokens"]
    return settings, {"max_tokens": "max_output_tokens"}


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


def messages_of(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as the ensemble's messages: messages by role, ``function_call`` items as an
    assistant's tool calls, ``function_call_output`` items as tool results; a reasoning item is
    left out (the members never read their own thinking back)."""
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where, kind = f"input[{index}]", item.get("type", "message")
        if kind == "message":
            given = item.get("role")
            role = ROLES.get(given) if isinstance(given, str) else None
            if role is None:
                raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
            messages.append({"role": role, "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {
                "id": _text(item, "call_id", where),
                "type": "function",
                "function": {"name": _text(item, "name", where), "arguments": _text(item, "arguments", where)},
            }
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            messages.append({"role": "tool", "tool_call_id": _text(item, "call_id", where), "content": text})
        elif kind != "reasoning":
            raise ApiError(
                400, f"{where}.type {str(kind)[:40]!r} is not supported by the specem ensemble", f"{where}.type"
            )
    return messages


def _text(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise ApiError(400, f"{where}.{name} must be text", f"{where}.{name}")
    return value


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
    chosen = value.get("format") if isinstance(value, dict) else None
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
        return FormatAsk(schema=chosen["schema"]), "text.format.schema"
    raise ApiError(400, "text.format.type must be text, json_object or json_schema", "text.format.type")


def _tools(body: dict[str, Any], output: FormatAsk | None) -> tuple[FormatAsk | None, bool]:
    """``tools`` (function tools, their fields flat as the Responses API has them), ``tool_choice``
    and ``parallel_tool_calls`` added to the format; a built-in tool is a 400 naming it."""
    tools = body.get("tools")
    if tools in (None, []):
        return output, False
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list", "tools")
    specs = []
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            said = f"{str(kind)[:40]!r} tools are" if kind else "a tool without a type is"
            raise ApiError(
                400, f"{said} not supported by the specem ensemble (function tools are)", f"tools[{index}].type"
            )
        assert isinstance(tool, dict)
        function = {key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None}
        specs.append({"type": "function", "function": function})
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    parallel = _switch(body, "parallel_tool_calls", True)
    if output is not None:
        raise ApiError(400, "give tools or text.format, not both", "text.format")
    return FormatAsk(tools=specs, tool_choice=choice, parallel_tool_calls=parallel), True


# -- the way back ----------------------------------------------------------------------------------
def _call_item(call: ToolCall, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_" + call.id.removeprefix("call_"),
        "call_id": call.id,
        "name": call.name,
        "arguments": json.dumps(call.arguments, ensure_ascii=False),
        "status": status,
    }


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" or text else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": text}],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def output_items(whole: Whole, tools: bool) -> list[dict[str, Any]]:
    """A whole answer's output items: its reasoning (when it thought first), then its calls, or
    its message."""
    final = whole.final
    assert final is not None
    items = [_reasoning_item("rs_" + uuid.uuid4().hex, final.reasoning)] if final.reasoning else []
    reply = whole_reply(final, tools)
    if reply.calls:
        return items + [_call_item(call) for call in reply.calls]
    return [*items, _message_item("msg_" + uuid.uuid4().hex, reply.content or "")]


def response(
    request: Request, start: StartEvent | None, final: FinalEvent | None, output: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``response`` object: in progress (no final yet), completed, or incomplete (a limit
    cut the answer)."""
    incomplete = final is not None and final.finish_reason in ("length", "context")
    status = "in_progress" if final is None else "incomplete" if incomplete else "completed"
    body: dict[str, Any] = {
        "id": request.id,
        "object": "response",
        "created_at": request.created,
        "status": status,
        "model": request.model,
        "output": output,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "previous_response_id": request.previous,
        "store": request.store,
        **request.echo,
    }
    if final is not None:
        prompt = prompt_tokens(start)
        body["usage"] = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": final.tokens,
            "output_tokens_details": {"reasoning_tokens": final.reasoning_tokens},
            "total_tokens": prompt + final.tokens,
        }
        body["x_specem"] = answer_facts(start, final)
    return body


class Events:
    """A streamed answer as the Responses API's events, each with its ``sequence_number``: the
    response created, each output item added, its deltas, each item done, the response completed."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.number = 0
        self.output: list[dict[str, Any]] = []  # the items done so far
        self.open: dict[str, Any] | None = None  # the item being written (message or reasoning)
        self.text = ""

    def _event(self, kind: str, **data: Any) -> dict[str, Any]:
        self.number += 1
        return {"type": kind, "sequence_number": self.number, **data}

    def started(self) -> Iterator[dict[str, Any]]:
        shown = response(self.request, None, None, [])
        yield self._event("response.created", response=shown)
        yield self._event("response.in_progress", response=shown)

    def piece(self, piece: Piece) -> Iterator[dict[str, Any]]:
        if piece.reasoning:
            yield from self._write("reasoning", piece.reasoning)
        if piece.text:
            yield from self._write("message", piece.text)
        for _, call in piece.calls:
            yield from self._close()
            index, item = len(self.output), _call_item(call)
            yield self._event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            yield self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=item["arguments"],
            )
            yield self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
            yield self._event("response.output_item.done", output_index=index, item=item)
            self.output.append(item)

    def _write(self, kind: str, text: str) -> Iterator[dict[str, Any]]:
        """Open the item of ``kind`` if another is open (closing that one), then its delta."""
        if self.open is None or self.open["type"] != kind:
            yield from self._close()
            prefix = "rs_" if kind == "reasoning" else "msg_"
            self.open = {"type": kind, "id": prefix + uuid.uuid4().hex}
            self.text = ""
            index = len(self.output)
            if kind == "message":
                yield self._event(
                    "response.output_item.added",
                    output_index=index,
                    item=_message_item(self.open["id"], "", "in_progress"),
                )
                yield self._event(
                    "response.content_part.added",
                    item_id=self.open["id"],
                    output_index=index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
            else:
                yield self._event(
                    "response.output_item.added",
                    output_index=index,
                    item={"type": "reasoning", "id": self.open["id"], "summary": []},
                )
        self.text += text
        delta = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        extra: dict[str, Any] = {"logprobs": []} if kind == "message" else {}
        yield self._event(
            delta, item_id=self.open["id"], output_index=len(self.output), content_index=0, delta=text, **extra
        )

    def _close(self) -> Iterator[dict[str, Any]]:
        if self.open is None:
            return
        index, item_id = len(self.output), self.open["id"]
        if self.open["type"] == "message":
            yield self._event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=self.text,
                logprobs=[],
            )
            part = {"type": "output_text", "text": self.text, "annotations": []}
            yield self._event(
                "response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part
            )
            item = _message_item(item_id, self.text)
        else:
            yield self._event(
                "response.reasoning_text.done", item_id=item_id, output_index=index, content_index=0, text=self.text
            )
            item = _reasoning_item(item_id, self.text)
        yield self._event("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        self.open = None

    def ended(self, start: StartEvent | None, final: FinalEvent) -> Iterator[dict[str, Any]]:
        yield from self._close()
        if not self.output and not self.request.tools:  # nothing written: the empty message all the same
            yield from self._write("message", "")
            yield from self._close()
        shown = response(self.request, start, final, self.output)
        kind = "response.incomplete" if shown["status"] == "incomplete" else "response.completed"
        yield self._event(kind, response=shown)
