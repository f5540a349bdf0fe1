"""OpenAI's Responses API, the way back, as plain functions: a whole answer as a ``response``
object and its output items (reasoning, message, function calls, and an MCP loop's
``mcp_list_tools`` and ``mcp_call`` items), or the stream of events the ``openai`` client reads
(``response.created`` ... ``response.completed``), from the same pieces every API writes
(``replies.py``). The requests are ``responses_format.py``'s.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from specem_local.engine import ToolCall
from specem_local.events import FinalEvent, StartEvent
from specem_local.mcp import Offered
from specem_local.server.replies import Piece, Whole, answer_facts, prompt_tokens, whole_reply
from specem_local.server.responses_format import Request
from specem_local.server.responses_mcp import MCP_ITEMS


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


def output_items(
    whole: Whole, tools: bool, mcp_calls: Sequence[dict[str, Any]] = (), mcp: Collection[str] = ()
) -> list[dict[str, Any]]:
    """A whole answer's output items: its reasoning (when it thought first), then its calls
    (``mcp_calls``: the ``mcp_call`` items of those the server ran, the tools named in ``mcp``),
    or its message."""
    final = whole.final
    assert final is not None
    items = [_reasoning_item("rs_" + uuid.uuid4().hex, final.reasoning)] if final.reasoning else []
    reply = whole_reply(final, tools)
    if reply.calls:
        return [*items, *mcp_calls, *(_call_item(call) for call in reply.calls if call.name not in mcp)]
    return [*items, _message_item("msg_" + uuid.uuid4().hex, reply.content or "")]


def mcp_list_items(request: Request) -> list[dict[str, Any]]:
    """An ``mcp_list_tools`` item for each MCP server opted in: the tools allowed of it, as its
    server names them (``error``: why it has none, when it did not start)."""
    return [
        {
            "type": "mcp_list_tools",
            "id": "mcpl_" + uuid.uuid4().hex,
            "server_label": server.label,
            "tools": [
                {
                    "name": tool.tool,
                    "description": tool.spec["function"].get("description") or None,
                    "input_schema": tool.spec["function"].get("parameters"),
                    "annotations": None,
                }
                for tool in server.tools
            ],
            "error": server.error,
        }
        for server in request.mcp
    ]


def mcp_call_item(tool: Offered, call: ToolCall, result: str | None) -> dict[str, Any]:
    """An ``mcp_call`` item: the call, as its server names the tool, and its result (``output``),
    or the error it ended in (a result ``error: ...``); None: not run (the answer was cut)."""
    failed = result is not None and result.startswith("error: ")
    return {
        "type": "mcp_call",
        "id": "mcp_" + call.id.removeprefix("call_"),
        "server_label": tool.server,
        "name": tool.tool,
        "arguments": json.dumps(call.arguments, ensure_ascii=False),
        "output": None if failed else result,
        "error": _tool_error(result.removeprefix("error: ")) if failed and result is not None else None,
        "status": "incomplete" if result is None else "failed" if failed else "completed",
    }


def _tool_error(text: str) -> dict[str, Any]:
    """A failed call's ``error`` in the shape the ``openai`` client reads (its
    ``McpToolExecutionError``): the error as text content."""
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}


def response(
    request: Request,
    start: StartEvent | None,
    final: FinalEvent | None,
    output: list[dict[str, Any]],
    earlier: Sequence[Whole] = (),
) -> dict[str, Any]:
    """The ``response`` object: in progress (no final yet), completed, incomplete (a limit cut
    the answer) or cancelled (the server stopped it); ``earlier``: the answers before the last
    of an MCP loop (``usage`` sums them all)."""
    incomplete = final is not None and final.finish_reason in ("length", "context")
    status = "in_progress" if final is None else "incomplete" if incomplete else "completed"
    status = "cancelled" if final is not None and final.finish_reason == "cancelled" else status
    body: dict[str, Any] = {
        "id": request.id,
        "object": "response",
        "created_at": request.created,
        "status": status,
        "model": request.model,
        "output": output,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "previous_response_id": request.previous,
        "store": request.store,
        **request.echo,
    }
    if final is not None:
        finals = [whole.final for whole in earlier if whole.final is not None]
        prompt = prompt_tokens(start) + sum(prompt_tokens(whole.start) for whole in earlier)
        tokens = final.tokens + sum(each.tokens for each in finals)
        body["usage"] = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": tokens,
            "output_tokens_details": {
                "reasoning_tokens": final.reasoning_tokens + sum(each.reasoning_tokens for each in finals)
            },
            "total_tokens": prompt + tokens,
        }
        body["x_specem"] = answer_facts(start, final)
        if earlier:
            body["x_specem"]["answers"] = len(earlier) + 1
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
        self.earlier: list[Whole] = []  # the answers of an MCP loop before the one being written

    def _event(self, kind: str, **data: Any) -> dict[str, Any]:
        self.number += 1
        return {"type": kind, "sequence_number": self.number, **data}

    def started(self) -> Iterator[dict[str, Any]]:
        shown = response(self.request, None, None, [])
        yield self._event("response.created", response=shown)
        yield self._event("response.in_progress", response=shown)
        for item in mcp_list_items(self.request):
            yield from self.item(item)

    def item(self, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """A finished item (an MCP server's tools, a call the server ran) as added, then done."""
        yield from self._close()
        index = len(self.output)
        yield self._event("response.output_item.added", output_index=index, item=item)
        yield self._event("response.output_item.done", output_index=index, item=item)
        self.output.append(item)

    def answered(self, whole: Whole, items: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """An answer of an MCP loop has ended and the server ran its calls (``items``); the
        next answer's events follow."""
        yield from self._close()
        self.earlier.append(whole)
        for item in items:
            yield from self.item(item)

    def piece(self, piece: Piece) -> Iterator[dict[str, Any]]:
        if piece.reasoning:
            yield from self._write("reasoning", piece.reasoning)
        if piece.text:
            yield from self._write("message", piece.text)
        mcp = self.request.mcp_tools
        for _, call in piece.calls:
            if call.name in mcp:  # the server runs it: its mcp_call item follows the answer
                continue
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
        written = [item for item in self.output if item["type"] not in MCP_ITEMS]
        if not written and not self.request.tools:  # nothing written: the empty message all the same
            yield from self._write("message", "")
            yield from self._close()
        shown = response(self.request, start, final, self.output, self.earlier)
        kind = "response.completed" if shown["status"] == "completed" else "response.incomplete"  # or cancelled
        yield self._event(kind, response=shown)
