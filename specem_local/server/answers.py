"""The models' line: one answer at a time on the shared ensemble, a bounded queue before it,
and the bridge from the worker thread that runs an answer to the event loop that serves it.

llama.cpp blocks, so an answer runs in a worker thread and its events cross to the loop
through an asyncio queue; the loop never waits on a model. Whatever an answer does (ends,
fails, is cancelled because its client went away) its stream is closed and the next request
in line starts: no error can hold the ensemble.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from specem_local.engine import AnswerStream, Ensemble
from specem_local.engine.request import AnswerRequest
from specem_local.errors import SpecemError
from specem_local.events import Event, FinalEvent
from specem_local.storage.chats import Turn
from specem_local.storage.history import AnswerRecord, History

_END = object()


class ShuttingDown(SpecemError):
    """The server is stopping (SIGTERM, Ctrl-C): no answer starts any more (a 503)."""
WAITING_CHECK = 0.25  # seconds between checks that a request waiting for the models still has a client


class AnswerLine:
    """The ensemble's answers, one at a time, with at most ``queue`` requests waiting."""

    def __init__(self, ensemble: Ensemble, queue: int, record: bool) -> None:
        self.ensemble = ensemble
        self.queue = queue
        self.history = History() if record else None
        self.answering = False
        self.waiting = 0  # requests in line for the models
        self.answered = 0
        self.cancelled = 0  # answers stopped early because their client went away
        self._answer_started = 0.0
        self._answer_seconds = 5.0  # a moving average of answer times, for Retry-After
        self._turn: asyncio.Lock | None = None
        self.closing = False
        self._running: AnswerStream | None = None

    def close(self) -> None:
        """The server is stopping: the answer in flight is cancelled (its stream ends as usual,
        with what it wrote) and no other starts (thread-safe: a signal handler calls it)."""
        self.closing = True
        running = self._running
        if running is not None:
            running.cancel()

    def place(self) -> PlaceInLine | None:
        """A place in line, taken now (so requests arriving together are counted), or None
        when the line is full."""
        if self.answering + self.waiting > self.queue:
            return None
        return PlaceInLine(self)

    def retry_after(self) -> int:
        """Seconds until a place in line is likely: the answers ahead at the recent pace."""
        return max(1, math.ceil(self._answer_seconds * (self.waiting + 1)))

    async def events(
        self,
        prepared: AnswerRequest,
        messages: list[dict[str, str]],
        place: PlaceInLine,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[Event]:
        """The answer's events, in order, as the worker thread produces them. Ending early
        (the client went away) cancels the answer; the next one starts when it has stopped.
        ``messages``: the conversation as the client sent it, for the history.
        ``gone``: whether the client has hung up, asked while the request waits for its turn,
        so a request nobody waits for gives its place back at once and never starts."""
        if self._turn is None:
            self._turn = asyncio.Lock()
        try:
            if not await self._take_turn(gone):
                return
        finally:
            place.give_back()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        try:
            if self.closing:
                raise ShuttingDown("the server is shutting down; no answer starts now")
            stream = self.ensemble.stream(prepared)
            self._running = stream
            self.answering = True
            self._answer_started = time.monotonic()
            worker = threading.Thread(
                target=self._work, args=(messages, stream, loop, queue), name="specem-answer", daemon=True
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

    async def _take_turn(self, gone: Callable[[], Awaitable[bool]] | None) -> bool:
        """Wait for the models; False (and no turn taken) if the client hangs up first. A
        request cancelled while it waits (a stream whose client left) takes no turn either."""
        assert self._turn is not None
        waiting = asyncio.ensure_future(self._turn.acquire())
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=WAITING_CHECK)
                if done:
                    return True
                if gone is not None and await gone():
                    self._let_go(waiting)
                    return False
        except BaseException:
            self._let_go(waiting)
            raise

    def _let_go(self, waiting: asyncio.Future) -> None:
        """Stop waiting for the turn; a turn that came as it was let go is given back."""
        assert self._turn is not None
        if waiting.done() and not waiting.cancelled():
            self._turn.release()
        else:
            waiting.cancel()
            waiting.add_done_callback(lambda f: self._turn.release() if not f.cancelled() else None)

    def _work(
        self,
        messages: list[dict[str, str]],
        stream: AnswerStream,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue,
    ) -> None:
        """The worker thread: record the request, run the answer, hand each event (or the error)
        to the loop. Whatever happens (the stream closes itself on any error), the loop hears
        the end and the models are released."""
        finish, record = None, None
        try:
            record = self._start_record(messages)
            for event in stream:
                if record is not None:
                    record.event(event)
                if isinstance(event, FinalEvent):
                    finish = event.finish_reason
                _tell(loop, queue.put_nowait, event)
        except BaseException as error:  # handed to the loop, which raises it there
            if record is not None:  # the history says how it ended, as specem run's does
                record.fail(str(error) or type(error).__name__)
            _tell(loop, queue.put_nowait, error)
        finally:  # counted as cancelled only if it ended so, not if the stream was let go after its end
            _tell(loop, self._answer_ended, finish == "cancelled")
            _tell(loop, queue.put_nowait, _END)

    def _answer_ended(self, cancelled: bool) -> None:
        assert self._turn is not None
        took = time.monotonic() - self._answer_started
        self._answer_seconds = 0.7 * self._answer_seconds + 0.3 * took  # a moving average
        self.answering = False
        self._running = None
        self.answered += 1
        self.cancelled += cancelled
        self._turn.release()

    def _start_record(self, messages: list[dict[str, str]]) -> AnswerRecord | None:
        """The request's conversation and its answer in the history; a history that cannot be
        written costs the record, not the answer."""
        if self.history is None:
            return None
        try:
            return self.history.start_new_chat("serve", [Turn(m["role"], m["content"]) for m in messages])
        except Exception as error:
            print(f"specem serve: warning: not recorded in the history: {error}", file=sys.stderr, flush=True)
            return None


def _tell(loop: asyncio.AbstractEventLoop, callback: Any, argument: object) -> None:
    """Run ``callback(argument)`` on the loop, unless the loop has closed (the server is
    shutting down): then nobody is left to tell."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, argument)


class PlaceInLine:
    """A request's place in the queue for the models, given back exactly once: when its answer
    starts, or when its response ends without the answer ever starting."""

    def __init__(self, line: AnswerLine) -> None:
        self.line = line
        self.held = True
        line.waiting += 1

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.line.waiting -= 1
