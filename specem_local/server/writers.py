"""The streams each API writes, from an answer's events: OpenAI's chunks (several choices at once
for ``n``, merged as they come), Ollama's NDJSON lines and the Responses API's events. Each turns
rounds into pieces (``replies.Pieces``) and lets its API's module shape them; a failure after the
stream began is said in the stream, the way each API's own servers say it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from specem_local.events import Event, FinalEvent, RoundEvent, StartEvent
from specem_local.server import ollama_format as ol
from specem_local.server import openai_format as oa
from specem_local.server import responses_format as rf
from specem_local.server import responses_output as ro
from specem_local.server.errors import http_error
from specem_local.server.replies import Pieces, Whole

_END = object()
# An MCP loop's step after a whole answer: the items of what the server ran, the next answer's events
FollowUp = Callable[[Whole], Awaitable[tuple[list[dict[str, Any]], AsyncIterator[Event] | None]]]


async def merged(streams: list[AsyncIterator[Event]]) -> AsyncIterator[tuple[int, Event]]:
    """The events of several answers as they come, each with its answer's index; an error in one
    ends the merged stream with it (the others are closed)."""
    if len(streams) == 1:
        async for event in streams[0]:
            yield 0, event
        return
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def drain(index: int, stream: AsyncIterator[Event]) -> None:
        try:
            async for event in stream:
                await queue.put((index, event))
        except Exception as error:
            await queue.put(error)
        finally:
            await queue.put(_END)

    tasks = [asyncio.ensure_future(drain(i, s)) for i, s in enumerate(streams)]
    ended = 0
    try:
        while ended < len(streams):
            item = await queue.get()
            if item is _END:
                ended += 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        for stream in streams:
            await stream.aclose()  # type: ignore[attr-defined]


async def openai_chunks(parsed: oa.Request, streams: list[AsyncIterator[Event]]) -> AsyncIterator[str]:
    """Chat-completions chunks: each choice's pieces as they come (``choices[0].index`` says
    which), each choice's finish, then the usage chunk when asked, and ``[DONE]``."""
    wholes = [Whole() for _ in streams]
    first = [True] * len(streams)
    pieces = [Pieces(parsed.tools) for _ in streams]
    try:
        async for index, event in merged(streams):
            wholes[index].add(event)
            if isinstance(event, RoundEvent) and (piece := pieces[index].of(event)) is not None:
                yield json.dumps(oa.piece_chunk(parsed, piece, first[index], index), ensure_ascii=False)
                first[index] = False
            elif isinstance(event, FinalEvent):
                for chunk in oa.final_chunks(parsed, wholes[index].start, event, first[index], index):
                    yield json.dumps(chunk, ensure_ascii=False)
        if parsed.include_usage:
            yield json.dumps(oa.usage_chunk(parsed, wholes), ensure_ascii=False)
    except Exception as error:  # after the stream began: say it the way OpenAI's servers do
        yield json.dumps(http_error(error, answering=True).body("/v1"))
    yield "[DONE]"


async def ollama_lines(parsed: ol.Request, events: AsyncIterator[Event], chat: bool) -> AsyncIterator[str]:
    """Ollama's NDJSON lines: each piece, then the line that ends the answer."""
    start: StartEvent | None = None
    pieces = Pieces(parsed.tools)
    try:
        async for event in events:
            if isinstance(event, StartEvent):
                start = event
            elif isinstance(event, RoundEvent) and (piece := pieces.of(event)) is not None:
                for line in ol.piece_lines(chat, piece, parsed.logprobs and not parsed.tools, parsed.model):
                    yield json.dumps(line, ensure_ascii=False) + "\n"
            elif isinstance(event, FinalEvent):
                ended = Whole(start, event)  # streamed: the answer's text and tokens went in the lines
                yield json.dumps(ol.final_line(chat, parsed, ended, streamed=True), ensure_ascii=False) + "\n"
    except Exception as error:  # Ollama ends a broken stream with an error line
        yield json.dumps(http_error(error, answering=True).body("/api")) + "\n"


async def response_events(
    parsed: rf.Request,
    events: AsyncIterator[Event],
    keep: Callable[[dict[str, Any]], None],
    follow: FollowUp | None = None,
) -> AsyncIterator[dict[str, str]]:
    """The Responses API's events (``event:`` and ``data:`` of each); ``keep`` is given the
    response once it is whole (``store``). ``follow`` (an MCP loop): given each whole
    answer, the items of what the server ran for it (written once the answer ends) and the next
    answer's events, or None when this answer is the last."""
    writer, pieces, whole = ro.Events(parsed), Pieces(parsed.tools), Whole()
    for shown in writer.started():
        yield {"event": shown["type"], "data": json.dumps(shown, ensure_ascii=False)}
    try:
        following: AsyncIterator[Event] | None = events
        while following is not None:
            answer, following = following, None
            async for event in answer:
                whole.add(event)
                said: list[dict[str, Any]] = []
                if isinstance(event, RoundEvent) and (piece := pieces.of(event)) is not None:
                    said = list(writer.piece(piece))
                elif isinstance(event, FinalEvent):
                    items, following = await follow(whole) if follow is not None else ([], None)
                    if following is None:  # the last answer: what ran for it, then the response
                        said = [shown for item in items for shown in writer.item(item)]
                        ended = list(writer.ended(whole.start, event))
                        said += ended
                        if event.finish_reason != "cancelled":  # a response cut short is not continued
                            keep(ended[-1]["response"])
                    else:
                        said = list(writer.answered(whole, items))
                        pieces, whole = Pieces(parsed.tools), Whole()
                for shown in said:
                    yield {"event": shown["type"], "data": json.dumps(shown, ensure_ascii=False)}
    except Exception as error:  # after the stream began: an error event, as OpenAI's servers send
        failed = http_error(error, answering=True)
        body = {"type": "error", "code": failed.code, "message": failed.message, "param": failed.param}
        yield {"event": "error", "data": json.dumps({**body, "sequence_number": writer.number + 1})}
