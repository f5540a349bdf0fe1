"""Anthropic's Messages API, the way back (``anthropic_format.py`` parses the request): the
engine's events become a ``message`` object, or the stream's named events (``message_start``;
each content block's start, deltas and stop; ``message_delta``; ``message_stop``), as plain
functions. The ensemble's own facts ride in ``x_specem``, never in a content block."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from specem_local.engine import ToolCall
from specem_local.events import Event, FinalEvent, RoundEvent, StartEvent
from specem_local.server.anthropic_format import PATH, Request
from specem_local.server.errors import http_error
from specem_local.server.replies import (
    Piece,
    Pieces,
    Whole,
    answer_facts,
    finish_name,
    prompt_tokens,
    round_facts,
    whole_reply,
)

SIGNATURE = ""  # a thinking block's signature: the ensemble's thinking is not signed
# How the ensemble's finish reads in Anthropic's words (tool calls: "tool_use").
STOP_REASONS = {
    "eos": "end_turn",
    "empty": "end_turn",
    "cancelled": "end_turn",
    "stop": "stop_sequence",
    "length": "max_tokens",
    "context": "model_context_window_exceeded",
}


def stop_reason(final: FinalEvent) -> str:
    return finish_name(final, STOP_REASONS, "end_turn", "tool_use")


def stop_sequence(final: FinalEvent) -> str | None:
    """The stop sequence that ended the answer (None when none did)."""
    return (final.stop_sequence or None) if stop_reason(final) == "stop_sequence" else None


def usage(start: StartEvent | None, final: FinalEvent | None) -> dict[str, int]:
    """The prompt as the largest tokenizer counted it, the answer in its authors' tokens (its
    thinking included, as Anthropic counts it)."""
    return {"input_tokens": prompt_tokens(start), "output_tokens": final.tokens if final is not None else 0}


def tool_use_id(call: ToolCall) -> str:
    """A call's id as Anthropic writes them (``toolu_...``)."""
    return "toolu_" + call.id.removeprefix("call_")


def _tool_use_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": call.arguments}


def _thinking_block(thinking: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thinking, "signature": SIGNATURE}


def _message(request: Request, content: list[dict[str, Any]], start: StartEvent | None) -> dict[str, Any]:
    """The message as it begins: no content yet, no stop reason."""
    return {
        "id": request.id,
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage(start, None),
    }


def message(request: Request, whole: Whole) -> dict[str, Any]:
    """A whole answer as a ``message``: its thinking (before tools or a format), its text, its
    tool uses, how it stopped, its usage, and ``x_specem``."""
    start, final = whole.start, whole.final
    assert final is not None
    reply = whole_reply(final, request.tools)
    content = [_thinking_block(final.reasoning if request.thinking_shown else "")] if final.reasoning else []
    content += [{"type": "text", "text": reply.content}] if reply.content else []
    content += [_tool_use_block(call) for call in reply.calls]
    return {
        **_message(request, content, start),
        "stop_reason": stop_reason(final),
        "stop_sequence": stop_sequence(final),
        "usage": usage(start, final),
        "x_specem": answer_facts(start, final),
    }


SseEvent = tuple[str, dict[str, Any]]  # an event's name and its data


class StreamedMessage:
    """A streamed answer as Anthropic's named events: ``message_start`` when it starts; its
    thinking, its text and each tool use (once whole, its input in one ``input_json_delta``) as
    content blocks in order, each opened, added to and closed; then ``message_delta`` (how it
    stopped, the usage, ``x_specem``) and ``message_stop``. A round's block delta carries the
    round's ``x_specem``."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.pieces = Pieces(request.tools)
        self.start_event: StartEvent | None = None
        self.started = False
        self.blocks = 0  # content blocks opened so far
        self.open: str | None = None  # the kind of the block open now ("thinking", "text")

    def of(self, event: Event) -> list[SseEvent]:
        """What ``event`` adds to the stream (nothing, for a round with nothing to show)."""
        if isinstance(event, StartEvent):
            self.start_event = event
            return self._begun()
        if isinstance(event, RoundEvent):
            piece = self.pieces.of(event)
            return self._piece(piece) if piece is not None else []
        if isinstance(event, FinalEvent):
            return self._end(event)
        return []

    def _begun(self) -> list[SseEvent]:
        if self.started:
            return []
        self.started = True
        return [("message_start", {"type": "message_start", "message": _message(self.request, [], self.start_event)})]

    def _piece(self, piece: Piece) -> list[SseEvent]:
        said = self._begun()
        facts = round_facts(piece.event)
        if piece.reasoning:
            said += self._opened("thinking", _thinking_block(""))
            if self.request.thinking_shown:  # display "omitted": the block, opened and closed, says nothing
                said.append(self._delta({"type": "thinking_delta", "thinking": piece.reasoning}, facts))
        if piece.text:
            said += self._opened("text", {"type": "text", "text": ""})
            said.append(self._delta({"type": "text_delta", "text": piece.text}, facts))
        for _, call in piece.calls:
            said += self._opened("tool_use", {**_tool_use_block(call), "input": {}})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call.arguments, ensure_ascii=False)}
            said += [self._delta(delta, facts), *self._closed()]
        return said

    def _opened(self, kind: str, block: dict[str, Any]) -> list[SseEvent]:
        """A block of ``kind`` open for the next delta: the one open now, or a new one after it."""
        if self.open == kind:
            return []
        said = self._closed()
        self.open, self.blocks = kind, self.blocks + 1
        started = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*said, ("content_block_start", started)]

    def _closed(self) -> list[SseEvent]:
        if self.open is None:
            return []
        self.open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    @property
    def index(self) -> int:
        return self.blocks - 1

    def _delta(self, delta: dict[str, Any], facts: dict[str, Any]) -> SseEvent:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta,
                                       "x_specem": facts}  # fmt: skip

    def _end(self, final: FinalEvent) -> list[SseEvent]:
        delta = {"stop_reason": stop_reason(final), "stop_sequence": stop_sequence(final)}
        ending = {"type": "message_delta", "delta": delta, "usage": usage(self.start_event, final)}
        ending["x_specem"] = answer_facts(self.start_event, final)
        return [*self._begun(), *self._closed(), ("message_delta", ending), ("message_stop", {"type": "message_stop"})]


async def sse_events(request: Request, events: AsyncIterator[Event]) -> AsyncIterator[dict[str, str]]:
    """The answer's events as Server-Sent Events, each named (``event:``) with its JSON
    (``data:``); a failure once the stream has begun is an ``error`` event, as Anthropic's API
    sends one."""
    writer = StreamedMessage(request)
    try:
        async for event in events:
            for name, data in writer.of(event):
                yield {"event": name, "data": json.dumps(data, ensure_ascii=False)}
    except Exception as error:  # a request's fault (400), the machines' (503) or a bug (500, logged)
        yield {"event": "error", "data": json.dumps(http_error(error, answering=True).body(PATH))}
