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

from specem_local.engine import AnswerStream, Ensemble
from specem_local.errors import Busy
from specem_local.events import Event, FinalEvent, RoundEvent, StartEvent
from specem_local.server import ollama_format as ol
from specem_local.server import openai_format as oa
from specem_local.server.answers import AnswerQueue
from specem_local.server.errors import ApiError, HttpError, http_error
from specem_local.server.gate import Gate, GateRules
from specem_local.server.replies import Pieces, Whole

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
    """The routes, over one loaded ensemble. ``app`` is the ASGI application to serve."""

    def __init__(self, ensemble: Ensemble, options: ServerOptions) -> None:
        self.ensemble = ensemble
        self.options = options
        self.answers = AnswerQueue(ensemble, options.queue, options.record)
        self.created = int(time.time())
        self.modified = ol.now()
        self.size = sum(member.parameters for member in ensemble.member_facts())  # for Ollama's "size"
        routes = [
            Route("/", self.root, methods=["GET", "HEAD"]),
            Route("/health", self.health),
            Route("/v1/models", self.models),
            Route("/v1/models/{model:path}", self.model),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
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
        """``client.models.retrieve("specem")``: the one model, or a 404 naming it."""
        wanted = request.path_params["model"]
        runs_on = {member.name: member.placement for member in self.ensemble.member_facts()}
        [served] = oa.models_list(self.ensemble.model_names, self.created, runs_on)["data"]
        if wanted != served["id"]:
            message = f"the model {wanted[:80]!r} does not exist; this server serves {served['id']!r}"
            return HttpError(404, message, "not_found_error", "model").response(request.url.path)
        return JSONResponse(served)

    async def ollama_version(self, _request: HttpRequest) -> Response:
        return JSONResponse({"version": ol.OLLAMA_VERSION})

    async def ollama_tags(self, _request: HttpRequest) -> Response:
        return JSONResponse(ol.tags(self.ensemble.model_names, self.size, self.modified))

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
            api = "OpenAI's API: /v1/chat/completions, /v1/models (and /health)"
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
        started = await self._start(request, oa.parse_request)
        if isinstance(started, Response):
            return started
        parsed, stream = started
        assert stream is not None  # OpenAI's route has no load request: messages are required
        gone = None if parsed.stream else request.is_disconnected  # a stream's own end cancels it
        events = self.answers.events(stream, gone)
        if parsed.stream:  # the background task lets the answer go if the stream never starts
            return EventSourceResponse(
                self._sse_chunks(parsed, events),
                ping=15,
                sep="\n",
                background=BackgroundTask(stream.close),
                shutdown_grace_period=STREAM_GRACE,  # a stop cancels the answer: its stream then ends as usual
            )
        return await self._whole(request, events, stream, lambda whole: JSONResponse(oa.completion(parsed, whole)))

    async def ollama_chat(self, request: HttpRequest) -> Response:
        return await self._ollama_answer(request, ol.parse_chat, chat=True)

    async def ollama_generate(self, request: HttpRequest) -> Response:
        return await self._ollama_answer(request, ol.parse_generate, chat=False)

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
                self._ndjson_lines(parsed, events, chat),
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
            prepared = await asyncio.to_thread(self.ensemble.prepare, ask)
            return parsed, self.answers.start(prepared, parsed.messages)
        except Busy as busy:
            return http_error(busy).response(request.url.path, {"Retry-After": str(busy.retry_after)})
        except Exception as error:  # a request's fault (ApiError, SpecemError), or a bug: a 500, logged
            return http_error(error, getattr(parsed, "fields", None)).response(request.url.path)

    async def _whole(
        self,
        request: HttpRequest,
        events: AsyncIterator[Event],
        stream: AnswerStream,
        respond: Callable[[Whole], Response],
    ) -> Response:
        """A whole answer as one response, or the error that ended it."""
        try:
            whole = await self._collect(events, request)
        except Exception as error:  # the request's fault (400), the machines' (503), or a bug (500, logged)
            return http_error(error, answering=True).response(request.url.path)
        finally:
            stream.close()  # a no-op once it has ended; else it leaves the line
        if whole.final is None:
            return HttpError(499, "the client went away").response(request.url.path)
        return respond(whole)

    async def _sse_chunks(self, parsed: oa.Request, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        start: StartEvent | None = None
        first = True
        pieces = Pieces(parsed.tools)
        try:
            async for event in events:
                if isinstance(event, StartEvent):
                    start = event
                elif isinstance(event, RoundEvent) and (piece := pieces.of(event)) is not None:
                    yield json.dumps(oa.piece_chunk(parsed, piece, first), ensure_ascii=False)
                    first = False
                elif isinstance(event, FinalEvent):
                    for chunk in oa.final_chunks(parsed, start, event, first):
                        yield json.dumps(chunk, ensure_ascii=False)
        except Exception as error:  # after the stream began: say it the way OpenAI's servers do
            yield json.dumps(http_error(error, answering=True).body("/v1"))
        yield "[DONE]"

    async def _ndjson_lines(self, parsed: ol.Request, events: AsyncIterator[Event], chat: bool) -> AsyncIterator[str]:
        start: StartEvent | None = None
        pieces = Pieces(parsed.tools)
        try:
            async for event in events:
                if isinstance(event, StartEvent):
                    start = event
                elif isinstance(event, RoundEvent) and (piece := pieces.of(event)) is not None:
                    for line in ol.piece_lines(chat, piece, parsed.logprobs and not parsed.tools):
                        yield json.dumps(line, ensure_ascii=False) + "\n"
                elif isinstance(event, FinalEvent):
                    ended = Whole(start, event)  # streamed: the answer's text and tokens went in the lines
                    yield json.dumps(ol.final_line(chat, parsed, ended, streamed=True), ensure_ascii=False) + "\n"
        except Exception as error:  # Ollama ends a broken stream with an error line
            yield json.dumps(http_error(error, answering=True).body("/api")) + "\n"

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


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # a string, or an unterminated one to the end


def json_depth(body: bytes | bytearray) -> int:
    """How deep a JSON text nests its arrays and objects, counted without parsing it (brackets
    inside strings are skipped), so a body built to exhaust the parser's stack is refused
    first. Linear in the body, in C: a regex drops the strings, numpy counts the brackets."""
    brackets = np.frombuffer(_JSON_STRING.sub(b"", bytes(body)), dtype=np.uint8)
    steps = np.isin(brackets, (0x5B, 0x7B)).astype(np.int64) - np.isin(brackets, (0x5D, 0x7D))
    return int(np.cumsum(steps).max(initial=0))
