"""``specem serve``: the ensemble as a local OpenAI-compatible endpoint (starlette + uvicorn +
sse-starlette), for Open WebUI, Continue, the ``openai`` client and anything else that speaks
``/v1/chat/completions``.

The models are loaded once and shared, so one answer runs at a time; a few more requests wait
in a bounded queue, and past it a request gets 429 with ``Retry-After``. An answer runs in a
worker thread (llama.cpp blocks); its events cross to the event loop through an asyncio queue,
so the loop never waits on a model. A client that goes away cancels its answer at the next
round, and the next request starts only when that answer has stopped. Every answer served is
recorded in the history (origin ``serve``) unless ``--no-log``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specem_local import openai_format as oa
from specem_local.chats import Turn
from specem_local.engine import Ensemble
from specem_local.errors import SpecemError
from specem_local.events import Event, FinalEvent, RoundEvent, StartEvent
from specem_local.history import AnswerRecord, History

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_END = object()


@dataclass(frozen=True)
class ServerOptions:
    api_key: str | None = None
    queue: int = 4  # requests that may wait while one is answered
    max_body_bytes: int = 1 << 20
    record: bool = True


class EnsembleServer:
    """The routes, over one loaded ensemble."""

    def __init__(self, ensemble: Ensemble, options: ServerOptions) -> None:
        self.ensemble = ensemble
        self.options = options
        self.history = History() if options.record else None
        self.created = int(time.time())
        self.answering = False
        self.waiting = 0  # requests in line for the models
        self.answered = 0
        self.cancelled = 0  # answers stopped early because their client went away
        self._answer_started = 0.0
        self._answer_seconds = 5.0  # a moving average of answer times, for Retry-After
        self._turn: asyncio.Lock | None = None
        self.app = Starlette(
            routes=[
                Route("/health", self.health),
                Route("/v1/models", self.models),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            ],
            exception_handlers={404: self.not_found, 405: self.not_allowed},
        )

    # -- routes ----------------------------------------------------------------------------------
    async def health(self, request: HttpRequest) -> Response:
        if (refused := self._refuse_unauthorised(request)) is not None:
            return refused
        return JSONResponse(
            {
                "status": "ok",
                "model": oa.MODEL_ID,
                "members": self.ensemble.model_names,
                "answering": self.answering,
                "waiting": self.waiting,
                "answered": self.answered,
                "cancelled": self.cancelled,
            }
        )

    async def models(self, request: HttpRequest) -> Response:
        if (refused := self._refuse_unauthorised(request)) is not None:
            return refused
        return JSONResponse(oa.models_list(self.ensemble.model_names, self.created))

    async def chat_completions(self, request: HttpRequest) -> Response:
        try:
            if (refused := self._refuse_unauthorised(request)) is not None:
                return refused
            parsed = oa.parse_request(await self._json_body(request))
            self.ensemble.check_settings(**parsed.settings)  # a bad value is a 400 before waiting in line
        except oa.ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except SpecemError as error:
            return _error(400, str(error))
        if self.answering + self.waiting > self.options.queue:
            return _error(
                429,
                f"busy: one answer at a time and {self.options.queue} waiting; try again shortly",
                kind="rate_limit_error",
                headers={"Retry-After": str(self._retry_after())},
            )
        place = _PlaceInLine(self)  # taken now, so requests arriving together are counted
        events = self._answer(parsed, place)
        if parsed.stream:  # the background task gives the place back if the stream never starts
            return EventSourceResponse(
                self._chunks(parsed, events), ping=15, sep="\n", background=BackgroundTask(place.give_back)
            )
        try:
            start, final = await self._collect(events, request)
        except SpecemError as error:
            return _error(400, str(error))
        except Exception as error:  # a fault of the server or llama.cpp, said the way OpenAI says it
            return _error(500, f"the answer failed: {type(error).__name__}: {error}", kind="server_error")
        finally:
            place.give_back()
        if final is None:
            return _error(499, "the client went away")
        return JSONResponse(oa.completion(parsed, start, final))

    async def not_found(self, _request: HttpRequest, _error: Exception) -> Response:
        return _error(
            404, "no such route; this server has /v1/chat/completions, /v1/models and /health", kind="not_found_error"
        )

    async def not_allowed(self, request: HttpRequest, _error: Exception) -> Response:
        return _error(405, f"{request.method} is not allowed on {request.url.path}")

    # -- answers ---------------------------------------------------------------------------------
    async def _answer(self, parsed: oa.Request, place: _PlaceInLine) -> AsyncIterator[Event]:
        """The answer's events, in order, as the worker thread produces them. Ending early
        (the client went away) cancels the answer; the next one starts when it has stopped."""
        loop = asyncio.get_running_loop()
        if self._turn is None:
            self._turn = asyncio.Lock()
        try:
            await self._turn.acquire()
        finally:
            place.give_back()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        try:
            stream = self.ensemble.stream(parsed.messages, **parsed.settings)
            self.answering = True
            self._answer_started = time.monotonic()
            worker = threading.Thread(
                target=self._work, args=(parsed, stream, loop, queue), name="specem-answer", daemon=True
            )
            worker.start()
        except BaseException:
            self.answering = False
            self._turn.release()
            raise
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stream.cancel()  # a no-op once the answer has ended; else it stops at the next round

    def _work(self, parsed: oa.Request, stream: Any, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
        """The worker thread: record the request, run the answer, hand each event (or the error)
        to the loop. Whatever happens, the loop hears the end and the models are released."""
        finish = None
        try:
            record = self._start_record(parsed)
            for event in stream:
                if record is not None:
                    record.event(event)
                if isinstance(event, FinalEvent):
                    finish = event.finish_reason
                loop.call_soon_threadsafe(queue.put_nowait, event)
        except BaseException as error:  # handed to the loop, which raises it there
            loop.call_soon_threadsafe(queue.put_nowait, error)
        finally:  # counted as cancelled only if it ended so, not if the stream was let go after its end
            loop.call_soon_threadsafe(self._answer_ended, finish == "cancelled")
            loop.call_soon_threadsafe(queue.put_nowait, _END)

    def _retry_after(self) -> int:
        """Seconds until a place in line is likely: the answers ahead at the recent pace."""
        return max(1, math.ceil(self._answer_seconds * (self.waiting + 1)))

    def _answer_ended(self, cancelled: bool) -> None:
        assert self._turn is not None
        took = time.monotonic() - self._answer_started
        self._answer_seconds = 0.7 * self._answer_seconds + 0.3 * took  # a moving average
        self.answering = False
        self.answered += 1
        self.cancelled += cancelled
        self._turn.release()

    async def _chunks(self, parsed: oa.Request, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        start: StartEvent | None = None
        first = True
        try:
            async for event in events:
                if isinstance(event, StartEvent):
                    start = event
                elif isinstance(event, RoundEvent) and event.text:
                    yield json.dumps(oa.round_chunk(parsed, event, first), ensure_ascii=False)
                    first = False
                elif isinstance(event, FinalEvent):
                    for chunk in oa.final_chunks(parsed, start, event, first):
                        yield json.dumps(chunk, ensure_ascii=False)
        except Exception as error:  # after the stream began: say it the way OpenAI's servers do
            detail = str(error) if isinstance(error, SpecemError) else f"{type(error).__name__}: {error}"
            yield json.dumps(oa.error_body(f"the answer failed: {detail}", "server_error"))
        yield "[DONE]"

    async def _collect(
        self, events: AsyncIterator[Event], request: HttpRequest
    ) -> tuple[StartEvent | None, FinalEvent | None]:
        start = None
        async for event in events:
            if isinstance(event, StartEvent):
                start = event
            elif isinstance(event, FinalEvent):
                return start, event
            if await request.is_disconnected():
                await events.aclose()
                return start, None
        return start, None

    def _start_record(self, parsed: oa.Request) -> AnswerRecord | None:
        """The request's conversation and its answer in the history; a history that cannot be
        written costs the record, not the answer."""
        if self.history is None:
            return None
        asked = [Turn(message["role"], message["content"]) for message in parsed.messages]
        try:
            return self.history.start_new_chat("serve", asked)
        except Exception as error:
            print(f"specem serve: warning: not recorded in the history: {error}", flush=True)
            return None

    # -- the request -----------------------------------------------------------------------------
    def _refuse_unauthorised(self, request: HttpRequest) -> Response | None:
        key = self.options.api_key
        if key is None:
            return None
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode()):
            return None
        return _error(
            401,
            "a valid API key is needed: send Authorization: Bearer KEY",
            kind="invalid_request_error",
            code="invalid_api_key",
        )

    async def _json_body(self, request: HttpRequest) -> Any:
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise oa.ApiError(413, f"the request body is larger than {limit} bytes")
        body = b""
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise oa.ApiError(413, f"the request body is larger than {limit} bytes")
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise oa.ApiError(400, f"the request body is not valid JSON ({error})") from None


class _PlaceInLine:
    """A request's place in the queue for the models, given back exactly once: when its answer
    starts, or when its response ends without the answer ever starting."""

    def __init__(self, server: EnsembleServer) -> None:
        self.server = server
        self.held = True
        server.waiting += 1

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.server.waiting -= 1


def _error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(oa.error_body(message, kind, code=code), status_code=status, headers=headers)


def check_binding(host: str, api_key: str | None) -> None:
    """Refuse to put the models on the network without a key."""
    if host not in LOOPBACK and not api_key:
        raise SpecemError(
            f"--host {host} would let other machines use these models with no key; give --api-key "
            "(or set SPECEM_API_KEY), or keep the default --host 127.0.0.1"
        )
