"""The MCP loop of OpenAI's Responses API on ``specem serve --mcp CONFIG``: a request that opts
in to a server of the config (``{"type": "mcp", "server_label": NAME}`` in ``tools``) is
answered by the server's own agent loop, as OpenAI's API runs remote MCP servers.

The ensemble answers with the MCP tools offered (beside the client's function tools); the MCP
calls of an answer are run here (``McpTools.call``, off the event loop: a call is bounded by
the server's call timeout and a failure is its result, ``error: ...``), and the ensemble answers
again with their results, until it answers with a message, calls a function of the client's
(its turn: those come back as ``function_call`` items, the MCP calls beside them still run),
or has read ``CHAIN_LIMIT`` rounds of results or run the request's ``max_tool_calls`` (the
next answer is then asked for a message, ``tool_choice: "none"``; a call past that limit is not
run, its item ``incomplete``). Each answer goes through the line of answers (``answers.py``) and
is recorded in the history like any other; the response's ``usage`` sums them all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response

from specem_local.engine import AnswerStream, Ensemble, FormatAsk, ToolCall
from specem_local.events import Event
from specem_local.mcp import McpTools
from specem_local.server import responses_format as rf
from specem_local.server import responses_output as ro
from specem_local.server.answers import AnswerQueue
from specem_local.server.errors import http_error
from specem_local.server.replies import Whole, whole_reply
from specem_local.server.responses_mcp import McpServer

CHAIN_LIMIT = 8  # rounds of MCP results; the answer after the last is a message
CUT = ("length", "context", "cancelled")  # an answer that ended so: its calls are not run

Collected = Callable[[HttpRequest, AsyncIterator[Event], AnswerStream], Awaitable[Whole | Response]]


def servers_of(tools: McpTools) -> tuple[McpServer, ...]:
    """The MCP servers a request may opt in to: each server of the config, in its order, with the
    tools it listed, or the line that says why it did not start."""
    servers = []
    for config in tools.servers:
        listed = tuple(tool for tool in tools.tools if tool.server == config.name)
        said = f"the MCP server {config.name!r} "
        problem = None if listed else next((line for line in tools.problems if line.startswith(said)), None)
        servers.append(McpServer(config.name, listed, problem))
    return tuple(servers)


class McpRounds:
    """One request's MCP loop, from its first answer (started already, as every request's is)."""

    def __init__(
        self, parsed: rf.Request, first: AnswerStream, ensemble: Ensemble, answers: AnswerQueue, tools: McpTools
    ) -> None:
        self.parsed, self.ensemble, self.answers, self.tools = parsed, ensemble, answers, tools
        self.streams = [first]  # every answer of the loop, closed when the request ends
        self.messages = list(parsed.messages)  # the conversation, the calls and their results added
        self.wholes: list[Whole] = []  # the answers so far
        self.rounds = 0  # rounds of MCP results read
        self.left = parsed.max_tool_calls  # MCP calls it may still run (None: no limit)

    def close(self) -> None:
        """Let every answer of the loop go (a no-op for those that have ended)."""
        for stream in self.streams:
            stream.close()

    async def after(self, whole: Whole) -> tuple[list[dict[str, Any]], AnswerStream | None]:
        """An answer has ended: its MCP calls run, as ``mcp_call`` items, and the next answer,
        started with their results; None when this answer is the loop's last."""
        final = whole.final
        assert final is not None
        self.wholes.append(whole)
        offered = self.parsed.mcp_tools
        reply = whole_reply(final, self.parsed.tools)
        calls = [call for call in reply.calls if call.name in offered]
        if not calls:
            return [], None
        if final.finish_reason in CUT:  # cut short: nothing is run
            return [ro.mcp_call_item(offered[call.name], call, None) for call in calls], None
        run = calls if self.left is None else calls[: self.left]
        results = [await asyncio.to_thread(self.tools.call, call.name, call.arguments) for call in run]
        items = [ro.mcp_call_item(offered[call.name], call, result) for call, result in zip(calls, results)]
        items += [ro.mcp_call_item(offered[call.name], call, None) for call in calls[len(run) :]]  # past the limit
        if self.left is not None:
            self.left -= len(run)
        if len(calls) < len(reply.calls) or not run:  # the client's functions were called too: its turn
            return items, None
        self.rounds += 1
        self.messages += called_and_answered(run, results)
        ask = self.parsed.ask
        assert isinstance(ask.output, FormatAsk)
        last = self.rounds >= CHAIN_LIMIT or self.left == 0  # the next answer is a message
        output = dataclasses.replace(ask.output, tool_choice="none" if last else None)
        settings = {**ask.settings, "escalate_below": 0.0} if self.parsed.stream else ask.settings
        asked = dataclasses.replace(ask, prompt=list(self.messages), settings=settings, output=output)
        prepared = await asyncio.to_thread(self.ensemble.prepare, asked)
        stream = self.answers.start(prepared, list(self.messages), admitted=True)
        self.streams.append(stream)
        return items, stream

    async def follow(self, whole: Whole) -> tuple[list[dict[str, Any]], AsyncIterator[Event] | None]:
        """The streamed loop's next step (``writers.response_events``)."""
        items, stream = await self.after(whole)
        return items, None if stream is None else self.answers.events(stream)

    async def whole(
        self,
        request: HttpRequest,
        events: AsyncIterator[Event],
        collected: Collected,
        keep: Callable[[dict[str, Any]], None],
    ) -> Response:
        """The whole loop as one ``response``, or the error that ended it."""
        parsed, stream = self.parsed, self.streams[0]
        output = ro.mcp_list_items(parsed)
        while True:
            whole = await collected(request, events, stream)
            if isinstance(whole, Response):
                return whole
            try:
                items, following = await self.after(whole)
            except Exception as error:  # the next answer refused (the server stops, a bug): said as usual
                return http_error(error, parsed.fields, answering=True).response(request.url.path)
            output += ro.output_items(whole, parsed.tools, items, parsed.mcp_tools)
            if following is None:
                response = ro.response(parsed, whole.start, whole.final, output, self.wholes[:-1])
                if whole.final is None or whole.final.finish_reason != "cancelled":
                    keep(response)
                return JSONResponse(response)
            stream, events = following, self.answers.events(following, request.is_disconnected)


def called_and_answered(calls: list[ToolCall], results: list[str]) -> list[dict[str, Any]]:
    """The calls the models made and each one's result, as the next answer reads them."""
    made = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
        }
        for call in calls
    ]
    answered = [{"role": "tool", "tool_call_id": c.id, "content": result} for c, result in zip(calls, results)]
    return [{"role": "assistant", "content": None, "tool_calls": made}, *answered]
