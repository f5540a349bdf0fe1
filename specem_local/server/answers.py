"""The queue for the models: as many answers at once as the ensemble has places (``parallel``),
a bounded number of requests waiting for one, and each answer recorded in the history.

The answer itself runs in a thread of its own (``AnswerStream.events``, the stream's async
face); the event loop never waits on a model. Whatever an answer does (ends, fails, is
cancelled because its client went away) the next request waiting starts once it has stopped:
no error can hold the ensemble.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from specem_local.engine import AnswerStream, Ensemble
from specem_local.engine.request import AnswerRequest
from specem_local.engine.tools import as_recorded
from specem_local.errors import ShuttingDown
from specem_local.events import Event
from specem_local.storage.chats import Turn
from specem_local.storage.history import AnswerRecord, History

log = logging.getLogger(__name__)
WAITING_CHECK = 0.25  # seconds between checks that a request waiting for the models still has a client


class AnswerQueue:
    """The ensemble's answers, up to ``places`` at once, with at most ``queue`` requests waiting."""

    def __init__(self, ensemble: Ensemble, queue: int, record: bool) -> None:
        self.ensemble = ensemble
        self.queue = queue
        self.places = ensemble.runner.parallel
        self.history = History() if record else None
        self.answering = 0  # answers running now
        self.waiting = 0  # requests in line for the models
        self.answered = 0
        self.cancelled = 0  # answers stopped early because their client went away
        self._answer_seconds = 5.0  # a moving average of answer times, for Retry-After
        self._turns: asyncio.Semaphore | None = None
        self.closing = False
        self._running: dict[AnswerStream, float] = {}  # the answers running, and when each started

    def close(self) -> None:
        """The server is stopping: the answers in flight are cancelled (their streams end as
        usual, with what they wrote) and no other starts (thread-safe: a signal handler calls it)."""
        self.closing = True
        for running in list(self._running):
            running.cancel()

    def place(self) -> QueuePlace | None:
        """A place in line, taken now (so requests arriving together are counted), or None
        when the line is full."""
        if self.answering + self.waiting > self.queue + self.places - 1:
            return None
        return QueuePlace(self)

    def retry_after(self) -> int:
        """Seconds until a place in line is likely: the answers ahead at the recent pace."""
        return max(1, math.ceil(self._answer_seconds * (self.waiting + 1) / self.places))

    async def events(
        self,
        prepared: AnswerRequest,
        messages: list[dict[str, Any]],
        place: QueuePlace,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[Event]:
        """The answer's events, in order, as the worker thread produces them. Ending early
        (the client went away) cancels the answer; the next one starts when it has stopped.
        ``messages``: the conversation as the client sent it, for the history.
        ``gone``: whether the client has hung up, asked while the request waits for its turn,
        so a request nobody waits for gives its place back at once and never starts."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.places)
        try:
            if not await self._take_turn(gone):
                return
        finally:
            place.give_back()
        try:
            if self.closing:
                raise ShuttingDown("the server is shutting down; no answer starts now")
            stream = self.ensemble.stream(prepared)
            record = self._start_record(messages)
            if record is not None:
                stream.log_to(record, lambda said: log.warning("specem serve: warning: %s", said))
            self.answering += 1
            self._running[stream] = time.monotonic()
            events = stream.events(ended=lambda finish: self._answer_ended(stream, finish))
        except BaseException:
            self._turns.release()
            raise
        async for event in events:
            yield event

    async def _take_turn(self, gone: Callable[[], Awaitable[bool]] | None) -> bool:
        """Wait for the models; False (and no turn taken) if the client hangs up first. A
        request cancelled while it waits (a stream whose client left) takes no turn either."""
        assert self._turns is not None
        waiting = asyncio.ensure_future(self._turns.acquire())
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
        turn = self._turns
        assert turn is not None
        if waiting.done() and not waiting.cancelled():
            turn.release()
        else:
            waiting.cancel()
            waiting.add_done_callback(lambda f: turn.release() if not f.cancelled() else None)

    def _answer_ended(self, stream: AnswerStream, finish: str | None) -> None:
        """An answer's thread has stopped (``finish``: its finish reason; None if it failed):
        the next request in line may start. Counted as cancelled only if it ended so."""
        assert self._turns is not None
        took = time.monotonic() - self._running.pop(stream)
        self._answer_seconds = 0.7 * self._answer_seconds + 0.3 * took  # a moving average
        self.answering -= 1
        self.answered += 1
        self.cancelled += finish == "cancelled"
        self._turns.release()

    def _start_record(self, messages: list[dict[str, Any]]) -> AnswerRecord | None:
        """The request's conversation and its answer in the history; a history that cannot be
        written costs the record, not the answer."""
        if self.history is None:
            return None
        try:
            turns = [Turn(m["role"], as_recorded(m)) for m in messages]
            return self.history.start_new_chat("serve", turns)
        except Exception as error:
            log.warning("specem serve: warning: not recorded in the history: %s", error)
            return None


class QueuePlace:
    """A request's place in the queue for the models, given back exactly once: when its answer
    starts, or when its response ends without the answer ever starting."""

    def __init__(self, line: AnswerQueue) -> None:
        self.line = line
        self.held = True
        line.waiting += 1

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.line.waiting -= 1
