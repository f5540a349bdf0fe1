"""One answer, streamed: ``Ensemble.stream`` returns an ``AnswerStream``; iterate it for the
events. It holds the ensemble from its first event to its last, brings back members lost in an
earlier answer (or says why it cannot), and turns a cancel into a stop within a second, even
while a member on another machine is stuck in a step.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

from specem_local.engine.member import Member, can_draft_and_verify
from specem_local.engine.request import AnswerRequest
from specem_local.engine.rounds import Answer
from specem_local.errors import NoMemberLeft, SpecemError
from specem_local.events import Event, FinalEvent


class AnswerStream(Iterator[Event]):
    """One answer, streamed: iterate it for its events. ``cancel()`` works from any thread, at
    any time, even before the first event; the answer then ends with "cancelled". The stream
    holds the ensemble from its first event until its last (or ``close()``)."""

    def __init__(
        self,
        ensemble: Any,  # the Ensemble that runs it (engine.ensemble imports this module)
        request: AnswerRequest,
    ) -> None:
        self._ensemble = ensemble
        self.request = request
        self._members = list(request.members)
        self._settings = request.settings
        self._constraint = request.output_format
        self._cancelled = threading.Event()
        self._answer: Answer | None = None
        self._steps: Iterator[Event] | None = None
        self._final: FinalEvent | None = None
        self._ended = False

    def cancel(self) -> None:
        """Stop the answer (from any thread): the round loop stops at its next check, and a
        step waiting on a worker process (a member on another machine) stops waiting at once."""
        self._cancelled.set()
        for member in self._members:
            member.model.interrupt()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def __next__(self) -> Event:
        if self._ended:
            raise StopIteration
        if self._steps is None:
            self._ensemble._open_answer(self)
            try:  # whatever setting up raises, the ensemble is free for the next answer
                members, absent = present_members(self._members)
                self._answer = self._new_answer(members, absent)
                self._steps = self._answer.run()
            except BaseException:
                self.close()
                raise
        try:
            event = self._ensemble._step(self._steps)
        except BaseException:  # the end, an error, or Ctrl-C inside a step: the answer is over
            self.close()
            raise
        if isinstance(event, FinalEvent):
            if self._constraint is not None and event.finish_reason == "eos":  # whole: the constraint ended it
                event = dataclasses.replace(event, parsed=self._constraint.parse(self._answer.prefix + event.text))
            self._final = event
            self._ensemble._remember(self._answer.members, self._settings, self._answer.start, event)
            self.close()
        return event

    def _new_answer(self, members: list[Member], absent: dict[str, str]) -> Answer:
        """The round loop over the members present; the request's starting weights, unless the
        store was written since it was prepared or a member is out (read again then)."""
        request = self.request
        start = request.start
        if members != self._members or request.weights_version != self._ensemble.weights_version:
            start = self._ensemble._starting_weights(members, self._settings)
        return Answer(request, members, start, self._cancelled, self._ensemble._map, absent)

    def final(self) -> FinalEvent:
        """Run the answer to its end and return its final record. An answer that an exception
        (Ctrl-C) broke off ends as "cancelled", with what it had written."""
        for _ in self:
            pass
        if self._final is None and self._answer is None:
            raise SpecemError("this answer was closed before it began")
        return self._final or self._answer.final_event("cancelled")

    def close(self) -> None:
        """End the stream here: no more events, and the ensemble may start another answer
        (dropping the stream does the same)."""
        self._ended = True
        self._ensemble._release(self)


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
