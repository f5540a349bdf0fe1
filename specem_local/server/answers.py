"""The server's answers over the runner's one line for the models: a request is put in line as
it arrives (``Busy``, a 429, when ``parallel`` answers run and ``queue`` wait), runs when its
turn comes, and is recorded in the history.

The answer itself runs in a thread of its own (``AnswerStream.events``, the stream's async
face); the event loop never waits on a model. Whatever an answer does (ends, fails, is
cancelled because its client went away, even while it waits for its turn) the next one in line
starts once it has stopped: no error can hold the ensemble.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from specem_local.engine import AnswerRequest, AnswerStream, Ensemble, recorded_turns
from specem_local.errors import ShuttingDown
from specem_local.events import Event
from specem_local.storage.chats import Turn
from specem_local.storage.history import AnswerRecord, History

log = logging.getLogger(__name__)
WAITING_CHECK = 0.25  # seconds between checks that a request waiting for the models still has a client


class AnswerQueue:
    """The ensemble's answers: up to ``places`` at once, with at most ``queue`` requests waiting."""

    def __init__(self, ensemble: Ensemble, queue: int, record: bool) -> None:
        self.ensemble = ensemble
        self.runner = ensemble.runner
        self.queue = queue
        self.places = self.runner.parallel
        self.history = History() if record else None
        self.answered = 0
        self.cancelled = 0  # answers stopped early because their client went away
        self.closing = False

    @property
    def answering(self) -> int:
        return self.runner.running

    @property
    def waiting(self) -> int:
        return self.runner.waiting

    def close(self) -> None:
        """The server is stopping: the answers in flight and in line are cancelled (their streams
        end as usual, with what they wrote) and no other starts (thread-safe: a signal handler
        calls it)."""
        self.closing = True
        self.runner.cancel()

    def start(self, prepared: AnswerRequest, messages: list[dict[str, Any]], *, admitted: bool = False) -> AnswerStream:
        """The request's answer, in line now (so requests arriving together are counted):
        ``Busy`` when the line is full, ``ShuttingDown`` while the server stops. ``messages``:
        the conversation as the client sent it, for the history. ``admitted``: a later answer
        of a request the line took already (an MCP loop's), in line whatever its length."""
        if self.closing:
            raise ShuttingDown("the server is shutting down; no answer starts now")
        stream = self.ensemble.stream(prepared)
        self.runner.enqueue(stream, limit=None if admitted else self.places + self.queue)
        if self.history is not None:  # recorded once it has its turn: one that never runs leaves nothing
            stream.log_to(
                lambda: self._start_record(messages), lambda said: log.warning("specem serve: warning: %s", said)
            )
        return stream

    async def events(
        self, stream: AnswerStream, gone: Callable[[], Awaitable[bool]] | None = None
    ) -> AsyncIterator[Event]:
        """The answer's events, in order, as its thread produces them. Ending early (the client
        went away) cancels the answer; the next one starts when it has stopped. ``gone``: whether
        the client has hung up, asked while the request waits for its turn, so a request nobody
        waits for leaves the line at once and never starts."""
        watcher = asyncio.ensure_future(self._watch(stream, gone)) if gone is not None else None
        try:
            async for event in stream.events(ended=lambda finish: self._answer_ended(stream, finish)):
                if not stream.began:  # cancelled in line: its client went away, or the server stops
                    if self.closing:
                        raise ShuttingDown("the server is shutting down; no answer starts now")
                    return
                if watcher is not None:  # it has its turn: the route watches its client from here
                    watcher.cancel()
                    watcher = None
                yield event
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    @staticmethod
    async def _watch(stream: AnswerStream, gone: Callable[[], Awaitable[bool]]) -> None:
        while not await gone():
            await asyncio.sleep(WAITING_CHECK)
        stream.cancel()  # out of the line: its stream ends "cancelled" without running

    def _answer_ended(self, stream: AnswerStream, finish: str | None) -> None:
        """An answer's thread has stopped (``finish``: its finish reason; None if it failed).
        Counted if it ran (had its turn), as cancelled only if it ended so."""
        if stream.began:
            self.answered += 1
            self.cancelled += finish == "cancelled"

    def _start_record(self, messages: list[dict[str, Any]]) -> AnswerRecord | None:
        """The request's conversation and its answer in the history; a history that cannot be
        written costs the record, not the answer."""
        assert self.history is not None
        try:
            turns = [Turn(role, text) for role, text in recorded_turns(messages)]
            return self.history.start_new_chat("serve", turns)
        except Exception as error:
            log.warning("specem serve: warning: not recorded in the history: %s", error)
            return None
