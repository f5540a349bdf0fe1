"""The routes of ``specem serve``: OpenAI's ``/v1`` and Ollama's ``/api``, over one loaded
ensemble and one line of answers (``answers.py``), behind the gate (``gate.py``).

Every route refuses what it cannot do in its API's own error shape: a bad field is a 400
naming it, an unknown route a 404, a wrong method a 405, a full line a 429 with
``Retry-After``. A fault while answering is a 500 (or, once a stream has begun, an error in
the stream) and one log line; the next request is served as usual.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from specem_local.engine import AnswerRequest, AnswerStream, Ask, Ensemble, PromptTooLong
from specem_local.errors import Busy
from specem_local.events import Event
from specem_local.mcp import McpTools
from specem_local.server import anthropic_format as an
from specem_local.server import anthropic_output as ao
from specem_local.server import ollama_format as ol
from specem_local.server import openai_format as oa
from specem_local.server import responses_format as rf
from specem_local.server import responses_output as ro
from specem_local.server import writers
from specem_local.server.answers import AnswerQueue
from specem_local.server.errors import ApiError, HttpError, http_error
from specem_local.server.gate import Gate, GateRules
from specem_local.server.kept import KeptResponses
from specem_local.server.mcp_rounds import McpRounds, servers_of
from specem_local.server.replies import Whole

# Far deeper than any request; a body nested deeper is refused before it is parsed. A schema
# sits 1 to 4 levels down (format, response_format.json_schema.schema, tools[i].function.
# parameters): its own limit (64) is the one a client meets, naming the field.
MAX_JSON_DEPTH = 72
STREAM_GRACE = 8.0  # seconds a stream may take to end after the server is told to stop (within running.SHUTDOWN)


@dataclass(frozen=True)
class ServerOptions:
    queue: int = 4  # requests that may wait while one is answered
    max_body_bytes: int = 1 << 20
    record: bool = True
    gate: GateRules = field(default_factory=GateRules)


class EnsembleServer:
    """The routes, over one loaded ensemble. ``app`` is the ASGI application to serve; ``mcp``:
    the MCP servers' tools a Responses request may opt in to (``specem serve --mcp``, started
    and closed by the caller)."""

    def __init__(self, ensemble: Ensemble, options: ServerOptions, *, mcp: McpTools | None = None) -> None:
        self.ensemble = ensemble
        self.options = options
        self.mcp = mcp
        self.mcp_servers = servers_of(mcp) if mcp is not None else None
        self.answers = AnswerQueue(ensemble, options.queue, options.record)
        self.kept = KeptResponses(self.answers.history)  # the Responses API's (``store``)
        self.created = int(time.time())
        self.modified = ol.now()
        self.size = sum(member.parameters for member in ensemble.member_facts())  # for Ollama's "size"
        routes = [
            Route("/", self.root, methods=["GET", "HEAD"]),
            Route("/health", self.health),
            Route("/v1/models", self.models),
            Route("/v1/models/{model:path}", self.model),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/messages", self.anthropic_messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.anthropic_count_tokens, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
            *self.kept.routes(),
            Route("/v1/completions", self.text_completions, methods=["GET", "POST"]),
            Route("/api/version", self.ollama_version),
            Route("/api/tags", self.ollama_tags),
            Route("/api/ps", self.ollama_running),
            Route("/api/show", self.ollama_show, methods=["POST"]),
            Route("/api/chat", self.ollama_chat, methods=["POST"]),
            Route("/api/generate", self.ollama_generate, methods=["POST"]),
        ]
        handlers = {404: self.not_found, 405: self.not_allowed, Exception: self.failed}
        app = Starlette(routes=routes, exception_handlers=handlers)  # type: ignore[arg-type]
        self.app = Gate(app, options.gate)

    def shut_down(self) -> None:
        """The server is stopping: the answer in flight ends now (cancelled, its stream closed
        as usual) and requests still waiting are answered 503."""
        self.answers.close()

    # -- plain routes ----------------------------------------------------------------------------
    async def root(self, _request: HttpRequest) -> Response:
        return PlainTextResponse("specem is running: OpenAI's API at /v1, Ollama's at /api\n")

    async def health(self, _request: HttpRequest) -> Response:
        queue = self.answers
        return JSONResponse(
            {
                "status": "ok",
                "model": oa.MODEL_ID,
                "members": self.ensemble.model_names,
                "lost": {m.name: m.lost for m in self.ensemble.member_facts() if m.lost},  # back next answer
                "places": queue.places,
                "answering": queue.answering,
                "waiting": queue.waiting,
                "answered": queue.answered,
                "cancelled": queue.cancelled,
            }
        )

    async def models(self, _request: HttpRequest) -> Response:
        runs_on = {member.name: member.placement for member in self.ensemble.member_facts()}
        return JSONResponse(oa.models_list(self.ensemble.model_names, self.created, runs_on))

    async def model(self, request: HttpRequest) -> Response:
        """``client.models.retrieve("specem")`` (or ``"specem/NAME"``): the model, or a 404 naming it."""
        wanted = request.path_params["model"]
        runs_on = {member.name: member.placement for member in self.ensemble.member_facts()}
        listed = oa.models_list(self.ensemble.model_names, self.created, runs_on)["data"]
        served = next((entry for entry in listed if entry["id"] == wanted), None)
        if served is None:
            names = ", ".join(repr(entry["id"]) for entry in listed)
            message = f"the model {wanted[:80]!r} does not exist; this server serves {names}"
            return HttpError(404, message, "not_found_error", "model").response(request.url.path)
        return JSONResponse(served)

    async def ollama_version(self, _request: HttpRequest) -> Response:
        return JSONResponse({"version": ol.OLLAMA_VERSION})

    async def ollama_tags(self, _request: HttpRequest) -> Response:
        sizes = {member.name: member.parameters for member in self.ensemble.member_facts()}
        return JSONResponse(ol.tags(self.ensemble.model_names, self.size, self.modified, sizes))

    async def ollama_running(self, _request: HttpRequest) -> Response:
        return JSONResponse(ol.running(self.ensemble.model_names, self.size))

    async def ollama_show(self, request: HttpRequest) -> Response:
        try:
            ol.show_request(await self._json_body(request))
        except ApiError as error:
            return http_error(error).response(request.url.path)
        return JSONResponse(ol.show(self.ensemble.model_names, self.modified))

    async def text_completions(self, request: HttpRequest) -> Response:
        """Legacy text completions continue raw text; the ensemble's rounds answer conversations,
        each member in its own chat template, so it says where to go instead of guessing."""
        legacy = (
            "legacy text completions are not served: the ensemble answers conversations; "
            "use /v1/chat/completions with the prompt as a user message"
        )
        return HttpError(404, legacy, "not_found_error").response(request.url.path)

    async def not_found(self, request: HttpRequest, _exc: Exception) -> Response:
        api = "Ollama's API: /api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version"
        if not request.url.path.startswith("/api/"):
            api = "OpenAI's API: /v1/chat/completions, /v1/responses, /v1/models; Anthropic's: /v1/messages"
        if request.url.path.startswith("/v1/messages/"):
            api = "Anthropic's Messages API at /v1/messages and /v1/messages/count_tokens (not batches)"
        missing = f"no route {request.url.path[:80]!r}; this server has {api}"
        return HttpError(404, missing, "not_found_error").response(request.url.path)

    async def not_allowed(self, request: HttpRequest, _exc: Exception) -> Response:
        refused = f"{request.method} is not allowed on {request.url.path[:80]}"
        return HttpError(405, refused).response(request.url.path)

    async def failed(self, request: HttpRequest, error: Exception) -> Response:
        """A fault in a route: a 500 in the API's shape (the gate logs it, in one line)."""
        return http_error(error).response(request.url.path)

    # -- answers ---------------------------------------------------------------------------------
    async def chat_completions(self, request: HttpRequest) -> Response:
        started = await self._start(request, lambda body: oa.parse_request(body, self.ensemble.model_names))
        if isinstance(started, Response):
            return started
        parsed, stream = started
        assert stream is not None  # OpenAI's route has no load request: messages are required
        streams = await self._choices(request, parsed, stream)
        if isinstance(streams, Response):
            return streams
        gone = None if parsed.stream else request.is_disconnected  # a stream's own end cancels it
        events = [self.answers.events(each, gone) for each in streams]
        if parsed.stream:  # the background task lets the answers go if the stream never starts
            return EventSourceResponse(
                writers.openai_chunks(parsed, events),
                ping=15,
                sep="\n",
                background=BackgroundTask(close_all, streams),
                shutdown_grace_period=STREAM_GRACE,  # a stop cancels the answer: its stream then ends as usual
            )
        got = await asyncio.gather(*(self._collected(request, e, each) for e, each in zip(events, streams)))
        wholes = [whole for whole in got if isinstance(whole, Whole)]
        return next((w for w in got if isinstance(w, Response)), None) or JSONResponse(oa.completion(parsed, wholes))

    async def _choices(
        self, request: HttpRequest, parsed: oa.Request, first: AnswerStream
    ) -> list[AnswerStream] | Response:
        """The answers of a request asking for ``n``: the first, and ``n - 1`` more, each with a seed
        of its own, all in line at once (a 429 for all when the line cannot take them)."""
        streams = [first]
        try:
            for index in range(1, parsed.n):
                ask = parsed.ask
                seed = int(ask.settings.get("seed", self.ensemble.settings.seed)) + index
                prepared = await asyncio.to_thread(
                    self.ensemble.prepare, dataclasses.replace(ask, settings={**ask.settings, "seed": seed})
                )
                streams.append(self.answers.start(prepared, parsed.messages))
        except Exception as error:
            for stream in streams:
                stream.close()
            headers = {"Retry-After": str(error.retry_after)} if isinstance(error, Busy) else None
            return http_error(error, parsed.fields).response(request.url.path, headers)
        return streams

    async def responses(self, request: HttpRequest) -> Response:
        """OpenAI's Responses API: the answer as a ``response`` object, or its events; with MCP
        tools, the server's own agent loop (``mcp_rounds.py``)."""
        started = await self._start(request, self._parse_responses)
        if isinstance(started, Response):
            return started
        parsed, stream = started
        assert stream is not None
        rounds = McpRounds(parsed, stream, self.ensemble, self.answers, self.mcp) if parsed.mcp and self.mcp else None
        gone = None if parsed.stream else request.is_disconnected
        events = self.answers.events(stream, gone)
        keep = functools.partial(self._keep, parsed)  # the response, once it is whole
        if parsed.stream:
            return EventSourceResponse(
                writers.response_events(parsed, events, keep, rounds.follow if rounds else None),
                ping=15,
                sep="\n",
                background=BackgroundTask(rounds.close if rounds else stream.close),
                shutdown_grace_period=STREAM_GRACE,
            )
        if rounds is not None:
            return await rounds.whole(request, events, self._collected, keep)
        return await self._whole(request, events, stream, lambda whole: JSONResponse(self._responded(parsed, whole)))

    def _parse_responses(self, body: Any) -> rf.Request:
        """A Responses body, the response it continues looked up (a 400 when none is kept, with
        OpenAI's code, which clients read to send the whole conversation instead)."""
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        earlier = self.kept.items(previous) if isinstance(previous, str) else None
        if isinstance(previous, str) and earlier is None:
            missing = (f"Previous response with id {previous[:60]!r} not found: none is kept here (it was made with "
                       "store: false, or elsewhere); send the whole conversation as input instead")  # fmt: skip
            raise ApiError(400, missing, "previous_response_id", code="previous_response_not_found")
        return rf.parse_request(body, earlier, self.ensemble.model_names, self.mcp_servers)

    def _responded(self, parsed: rf.Request, whole: Whole) -> dict[str, Any]:
        response = ro.response(parsed, whole.start, whole.final, ro.output_items(whole, parsed.tools))
        if whole.final is None or whole.final.finish_reason != "cancelled":  # a response cut short is not continued
            self._keep(parsed, response)
        return response

    def _keep(self, parsed: rf.Request, response: dict[str, Any]) -> None:
        """A whole response and the conversation it read, for a later ``previous_response_id``
        and to be read back (unless ``store: false``)."""
        if parsed.store:
            self.kept.keep(response, parsed.items)

    async def anthropic_messages(self, request: HttpRequest) -> Response:
        """Anthropic's Messages API (Claude Code, the ``anthropic`` SDK): a ``message``, or its
        named events (``anthropic_output.py``)."""
        started = await self._start(request, lambda body: an.parse_request(body, self.ensemble.model_names))
        if isinstance(started, Response):
            return started
        parsed, stream = started
        assert stream is not None  # messages are required
        gone = None if parsed.stream else request.is_disconnected  # a stream's own end cancels it
        events = self.answers.events(stream, gone)
        if parsed.stream:
            return EventSourceResponse(
                ao.sse_events(parsed, events),
                ping=15,
                sep="\n",
                background=BackgroundTask(stream.close),
                shutdown_grace_period=STREAM_GRACE,
            )
        return await self._whole(request, events, stream, lambda whole: JSONResponse(ao.message(parsed, whole)))

    async def anthropic_count_tokens(self, request: HttpRequest) -> Response:
        """Anthropic's token count (Claude Code asks it to size its context): the request's
        prompt as the largest tokenizer counts it, the ``input_tokens`` its answer would report;
        checked as a message would be (``max_tokens`` is not asked, nor read; thinking does not count)."""
        parsed = None
        try:
            body = await self._json_body(request)
            if isinstance(body, dict):
                body = {**body, "max_tokens": 1, "thinking": None}
            parsed = an.parse_request(body, self.ensemble.model_names)
            prepared = await asyncio.to_thread(self.ensemble.prepare, parsed.ask)
            return JSONResponse({"input_tokens": max(len(tokens) for tokens in prepared.prompts.values())})
        except Exception as error:
            return http_error(error, getattr(parsed, "fields", None)).response(request.url.path)

    async def ollama_chat(self, request: HttpRequest) -> Response:
        return await self._ollama_answer(
            request, lambda body: ol.parse_chat(body, self.ensemble.model_names), chat=True
        )

    async def ollama_generate(self, request: HttpRequest) -> Response:
        members = self.ensemble.model_names
        return await self._ollama_answer(request, lambda body: ol.parse_generate(body, members), chat=False)

    async def _ollama_answer(self, request: HttpRequest, parse: Callable[[Any], ol.Request], chat: bool) -> Response:
        started = await self._start(request, parse)
        if isinstance(started, Response):
            return started
        parsed, stream = started
        if stream is None:  # a load request
            return JSONResponse(ol.load_line(chat))
        gone = None if parsed.stream else request.is_disconnected
        events = self.answers.events(stream, gone)
        if parsed.stream:
            return StreamingResponse(
                writers.ollama_lines(parsed, events, chat),
                media_type="application/x-ndjson",
                background=BackgroundTask(stream.close),
            )
        return await self._whole(
            request,
            events,
            stream,
            lambda whole: JSONResponse(ol.final_line(chat, parsed, whole)),
        )

    async def _start(
        self, request: HttpRequest, parse: Callable[[Any], Any]
    ) -> Response | tuple[Any, AnswerStream | None]:
        """Parse the body and prepare its answer (off the event loop: compiling a format may take
        seconds), and put it in line for the models; or the response that refuses the request
        (the gate has checked the key). A bad value is a 400, a full line a 429 with
        ``Retry-After``, both before the request waits. None for a load request (no messages)."""
        parsed = None
        try:
            parsed = parse(await self._json_body(request))
            if not parsed.messages:  # a load request: its options are checked all the same
                await asyncio.to_thread(self.ensemble.check_options, parsed.ask)
                return parsed, None
            ask = parsed.ask
            if parsed.stream:  # a streamed answer's text is already out when it ends: never answered again
                ask = dataclasses.replace(ask, settings={**ask.settings, "escalate_below": 0.0})
            prepared = await asyncio.to_thread(self._prepared, ask, getattr(parsed, "truncation", "disabled"))
            return parsed, self.answers.start(prepared, parsed.messages)
        except Busy as busy:
            return http_error(busy).response(request.url.path, {"Retry-After": str(busy.retry_after)})
        except Exception as error:  # a request's fault (ApiError, SpecemError), or a bug: a 500, logged
            return http_error(error, getattr(parsed, "fields", None)).response(request.url.path)

    def _prepared(self, ask: Ask, truncation: str) -> AnswerRequest:
        """The answer prepared; with the Responses API's ``truncation: "auto"``, the oldest
        exchanges dropped until the conversation fits, as OpenAI's does."""
        while True:
            try:
                return self.ensemble.prepare(ask)
            except PromptTooLong:
                shorter = rf.truncated(ask) if truncation == "auto" else None
                if shorter is None:
                    raise
                ask = shorter

    async def _whole(
        self,
        request: HttpRequest,
        events: AsyncIterator[Event],
        stream: AnswerStream,
        respond: Callable[[Whole], Response],
    ) -> Response:
        """A whole answer as one response, or the error that ended it."""
        whole = await self._collected(request, events, stream)
        return whole if isinstance(whole, Response) else respond(whole)

    async def _collected(
        self, request: HttpRequest, events: AsyncIterator[Event], stream: AnswerStream
    ) -> Whole | Response:
        """A whole answer, or the response that says what ended it."""
        try:
            whole = await self._collect(events, request)
        except Exception as error:  # the request's fault (400), the machines' (503), or a bug (500, logged)
            return http_error(error, answering=True).response(request.url.path)
        finally:
            stream.close()  # a no-op once it has ended; else it leaves the line
        if whole.final is None:
            return HttpError(499, "the client went away").response(request.url.path)
        return whole

    async def _collect(self, events: AsyncIterator[Event], request: HttpRequest) -> Whole:
        """The answer's events gathered; its final event None when the client went away."""
        whole = Whole()
        async for event in events:
            whole.add(event)
            if whole.final is not None:
                return whole
            if await request.is_disconnected():
                await events.aclose()  # type: ignore[attr-defined]
                return whole
        return whole

    # -- the request -----------------------------------------------------------------------------
    async def _json_body(self, request: HttpRequest) -> Any:
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"the request body is larger than {limit} bytes")
        body = bytearray()
        try:
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise ApiError(413, f"the request body is larger than {limit} bytes")
        except ClientDisconnect:  # it hung up while sending: no answer is owed, no fault to log
            raise ApiError(499, "the client went away while sending its request") from None
        if json_depth(body) > MAX_JSON_DEPTH:
            raise ApiError(400, f"the request body is nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"the request body is not valid JSON ({error})") from None
        except ValueError:  # Python's limit on integer digits (4,300): no field takes such a number
            raise ApiError(400, "the request body holds a number too long (over 4,300 digits)") from None


def close_all(streams: list[AnswerStream]) -> None:
    """Let the answers go (a no-op for those that have ended)."""
    for stream in streams:
        stream.close()


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # a string, or an unterminated one to the end


def json_depth(body: bytes | bytearray) -> int:
    """How deep a JSON text nests its arrays and objects, counted without parsing it (brackets
    inside strings are skipped), so a body built to exhaust the parser's stack is refused
    first. Linear in the body, in C: a regex drops the strings, numpy counts the brackets."""
    brackets = np.frombuffer(_JSON_STRING.sub(b"", bytes(body)), dtype=np.uint8)
    steps = np.isin(brackets, (0x5B, 0x7B)).astype(np.int64) - np.isin(brackets, (0x5D, 0x7D))
    return int(np.cumsum(steps).max(initial=0))
