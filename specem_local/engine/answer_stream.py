"""One answer, streamed: ``Ensemble.stream`` returns an ``AnswerStream``. Iterate it for the
events (the sync face: the CLI, the chat app's worker, scripts), or ``async for`` over
``events()`` (the async face: the server; the answer runs in a thread of its own and its events
cross to the event loop, which never waits on a model). It holds its place on the runner from
its first event to its last, brings back members lost in an earlier answer (or says why it
cannot), and turns a cancel into a stop within a second, even while a member on another machine
is stuck in a step. ``log_to(record)`` writes it to the history as it streams, for every front
end alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

from specem_local.engine.answer_events import weights_dict
from specem_local.engine.checking import check_requests, escalated, escalation_request, with_check
from specem_local.engine.member import Member, can_draft_and_verify
from specem_local.engine.option_answers import OptionsLoop
from specem_local.engine.request import AnswerRequest
from specem_local.engine.rounds import RoundLoop
from specem_local.engine.runner import AnswerRunner
from specem_local.errors import NoMemberLeft, Signal, SpecemError
from specem_local.events import Event, FinalEvent

_END = object()


class Record(Protocol):
    """Where an answer is written as it streams (``storage.history.AnswerRecord``)."""

    error: str | None

    def event(self, event: Event) -> None: ...

    def fail(self, error: str) -> None: ...


class AnswerStream(Iterator[Event]):
    """One answer, streamed: iterate it for its events. ``cancel()`` works from any thread, at
    any time, even before the first event; the answer then ends with "cancelled"."""

    def __init__(self, runner: AnswerRunner, request: AnswerRequest) -> None:
        self._runner = runner
        self.request = request
        self._members = list(request.members)
        self._cancelled = threading.Event()
        self._loop: RoundLoop | OptionsLoop | None = None
        self._steps: Iterator[Event] | None = None
        self._final: FinalEvent | None = None
        self._place: int | None = None
        self._ended = False
        self._stepping = False  # a thread is in one of its steps: its place is not given back until it returns
        self._step_lock = threading.Lock()
        self._record: Record | None = None
        self._make_record: Callable[[], Record | None] | None = None
        self.record_warning: Callable[[str], None] | None = None  # told once when the history stops recording
        self._watchers: list[Callable[[Event], None]] = []

    def cancel(self) -> None:
        """Stop the answer (from any thread): the round loop stops at its next check, and a
        step waiting on a worker process (a member on another machine) stops waiting at once."""
        self._cancelled.set()
        self._runner.wake()  # out of the line for a place at once, if it waits there
        for member in self._members:
            member.model.interrupt()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def log_to(
        self, record: Record | Callable[[], Record | None], warn: Callable[[str], None] | None = None
    ) -> AnswerStream:
        """Write every event to ``record`` as it streams, and the failure that ends the answer,
        if one does; a record that cannot be written stops recording (``warn`` is told once)
        and the answer goes on. ``record`` may be a function that makes it when the answer gets
        its place (an answer cancelled while it waits leaves nothing). Returns the stream."""
        if callable(record):
            self._make_record = record
        else:
            self._record = record
        self.record_warning = warn
        return self

    def watch(self, seen: Callable[[Event], None]) -> AnswerStream:
        """Tell ``seen`` of every event as it streams, in the thread that steps the answer (a
        batch reads an answer among options' scores this way, to learn from its label).
        Returns the stream."""
        self._watchers.append(seen)
        return self

    @property
    def began(self) -> bool:
        """Whether the answer had a place (one cancelled while it waited never did)."""
        return self._steps is not None

    # -- the sync face ----------------------------------------------------------------------------
    def __next__(self) -> Event:
        if self._ended:
            raise StopIteration
        if self._steps is None:
            waited = time.perf_counter()
            place = self._place = self._runner.begin(self, self.request.cells)
            if place is None:  # cancelled while it waited for a place: it never ran
                self._final = never_ran(self.request, time.perf_counter() - waited)
                self._write(self._final)
                self.close()
                return self._final
            self._members = self._runner.at_place(place, self._members)
            if self._make_record is not None:
                self._record = self._make_record()
            try:  # whatever setting up raises, the runner is free for the next answer
                members, absent = present_members(self._members)
                self._loop = self._new_loop(members, absent)
                self._steps = self._loop.run()
            except BaseException as error:
                self._failed(error)
                self.close()
                raise
        with self._step_lock:
            self._stepping = True
        try:
            event = self._runner.step(self._steps)
            if isinstance(event, FinalEvent):  # its paid check and escalation decode in its place too
                event = self._parsed(self._escalated(self._checked(event)))
        except BaseException as error:  # the end, an error, or Ctrl-C inside a step: the answer is over
            if not isinstance(error, StopIteration):
                self._failed(error)
            self._stepped()
            self.close()
            raise
        if self._stepped():  # closed from another thread during the step: its place is free only now
            assert self._loop is not None
            self._final = event if isinstance(event, FinalEvent) else self._loop.final_event("cancelled")
            self._write(self._final)
            return self._final
        if isinstance(event, FinalEvent):
            self._final = event
            assert self._loop is not None
            if isinstance(self._loop, RoundLoop):  # an answer among options learns nothing of the rounds' weights
                self._runner.remember(self._loop.members, self.request.settings, self._loop.start, event)
            self.close()
        self._write(event)
        return event

    def _checked(self, final: FinalEvent) -> FinalEvent:
        """The answer with its paid check, when asked (``checking.py``); a check that fails
        leaves the answer unchecked."""
        assert self._loop is not None
        if isinstance(self._loop, OptionsLoop):  # its confidence is the mix's own probability
            return final
        try:
            checks = [
                self._answer_alone(request) for request in check_requests(self.request, self._loop.members, final)
            ]
        except (SpecemError, Signal):
            return final
        return with_check(final, checks, self.request)

    def _escalated(self, final: FinalEvent) -> FinalEvent:
        """The reserve member's answer instead of an unsure one (``escalate_below``); if it
        fails, the ensemble's answer stands."""
        reserve = self.request.reserve
        if reserve is None or self._place is None or self.cancelled:
            return final
        [here] = self._runner.at_place(self._place, [reserve])
        try:
            request = escalation_request(self.request, here, final)
            return final if request is None else escalated(final, self._answer_alone(request), reserve.name)
        except (SpecemError, Signal):
            return final

    def _answer_alone(self, request: AnswerRequest) -> FinalEvent:
        """A one-member answer run here, in the answer's place, one step at a time (its events
        are not the stream's)."""
        loop = RoundLoop(request, list(request.members), request.start, self._cancelled, self._runner.run_each)
        steps = loop.run()
        while not isinstance(event := self._runner.step(steps), FinalEvent):
            pass
        return self._parsed_for(request, event)

    def _parsed(self, event: FinalEvent) -> FinalEvent:
        return self._parsed_for(self.request, event)

    @staticmethod
    def _parsed_for(request: AnswerRequest, event: FinalEvent) -> FinalEvent:
        """A whole answer with a format, as a program reads it (the format ended it: "eos")."""
        output_format = request.output_format
        if output_format is None or event.finish_reason != "eos" or event.parsed is not None:
            return event
        return dataclasses.replace(event, parsed=output_format.parse(request.prefix + event.text))

    def _new_loop(self, members: list[Member], absent: dict[str, str]) -> RoundLoop | OptionsLoop:
        """The round loop over the members present (or, for an answer among options, its one
        scoring step); the request's starting weights, unless the store was written since it was
        prepared or a member is out (read again then)."""
        request = self.request
        if request.options is not None:
            return OptionsLoop(request, members, self._cancelled, self._runner.run_each, absent)
        start = request.start
        if members != self._members or request.weights_version != self._runner.weights_version:
            start = self._runner.starting_weights(members, request.settings)
        return RoundLoop(request, members, start, self._cancelled, self._runner.run_each, absent)

    def final(self) -> FinalEvent:
        """Run the answer to its end and return its final record. An answer that an exception
        (Ctrl-C) broke off ends as "cancelled", with what it had written."""
        for _ in self:
            pass
        if self._final is None and self._loop is None:
            raise SpecemError("this answer was closed before it began")
        if self._final is None:
            assert self._loop is not None
            self._final = self._loop.final_event("cancelled")
            self._write(self._final)
        return self._final

    def close(self) -> None:
        """End the stream here: no more events, and the runner may start another answer
        (dropping the stream does the same). Closed from another thread while a step of it
        runs, it is cancelled and gives its place back when that step returns: two answers must
        never decode on one place's models at once (llama.cpp aborts)."""
        with self._step_lock:
            self._ended = True
            stepping = self._stepping
        if stepping:
            self.cancel()
            return
        self._runner.end(self)

    def _stepped(self) -> bool:
        """A step has returned: whether the stream was closed meanwhile (its place is given back now)."""
        with self._step_lock:
            self._stepping = False
            closed = self._ended
        if closed:
            self._runner.end(self)
        return closed

    # -- the history --------------------------------------------------------------------------------
    def _write(self, event: Event) -> None:
        for seen in self._watchers:
            seen(event)
        if self._record is None:
            return
        self._record.event(event)
        self._stop_recording_on_error()

    def _failed(self, error: BaseException) -> None:
        """The answer failed: the record says how (Ctrl-C is written by ``final()`` as a stop)."""
        if self._record is not None and isinstance(error, Exception):
            self._record.fail(str(error) or type(error).__name__)
            self._stop_recording_on_error()

    def _stop_recording_on_error(self) -> None:
        if self._record is not None and self._record.error:
            if self.record_warning is not None:
                self.record_warning(f"the history stopped recording this answer: {self._record.error}")
            self._record = None

    # -- the async face -----------------------------------------------------------------------------
    async def events(self, ended: Callable[[str | None], None] | None = None) -> AsyncIterator[Event]:
        """The events, in order, as a thread of its own produces them (for an event loop, which
        must never wait on a model). Leaving early (the client went away) cancels the answer;
        the thread ends at its next step, and then ``ended(finish_reason)`` is called on the
        loop (None when the answer failed): only then is the runner free for the next answer."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def run() -> None:
            finish: str | None = None
            failed = False
            try:
                for event in self:
                    if isinstance(event, FinalEvent):
                        finish = event.finish_reason
                    _tell(loop, queue.put_nowait, event)
            except BaseException as error:  # handed to the loop, which raises it there
                failed = True
                _tell(loop, queue.put_nowait, error)
            finally:
                if finish is None and not failed and self.began:  # closed by its reader between steps
                    finish = "cancelled"
                if ended is not None:
                    _tell(loop, ended, finish)
                _tell(loop, queue.put_nowait, _END)

        threading.Thread(target=run, name="specem-answer", daemon=True).start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel()  # a no-op once the answer has ended; else it stops at the next round


def _tell(loop: asyncio.AbstractEventLoop, callback: Callable[[Any], None], argument: object) -> None:
    """Run ``callback(argument)`` on the loop, unless it has closed (a server shutting down):
    then nobody is left to tell."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, argument)


def never_ran(request: AnswerRequest, seconds: float) -> FinalEvent:
    """The final record of an answer cancelled before it had a place: nothing written."""
    members = request.members
    return FinalEvent(
        text="",
        finish_reason="cancelled",
        rounds=0,
        tokens=0,
        seconds=seconds,
        first_segment_seconds=None,
        wins={m.name: 0 for m in members},
        drafters_per_round=0.0,
        weights=weights_dict(list(members), request.start.weights),
        plain_generation=len(members) == 1,
    )


def present_members(members: list[Member]) -> tuple[list[Member], dict[str, str]]:
    """The members that can take part in the next answer, and why each other one cannot: a
    member lost in an earlier answer is brought back first (its servers probed, its model
    loaded again); one that cannot come back sits this answer out. ``SpecemError`` when the
    rest cannot both draft and verify."""
    absent: dict[str, str] = {}
    for member in members:
        if member.model.lost is not None:
            try:
                member.model.restart()
                member.reset()  # its memory is empty again: nothing of earlier prompts is cached
            except SpecemError as why:
                absent[member.name] = str(why)
    present = [member for member in members if member.name not in absent]
    if not can_draft_and_verify(present):
        said = "; ".join(f"{name}: {why}" for name, why in absent.items())
        if absent:
            raise NoMemberLeft(f"no member left can answer ({said})")
        raise SpecemError("the members cannot both draft and verify")
    return present, absent
