"""The one owner of running answers on a set of loaded members.

``AnswerRunner`` holds what answers share: the places (``parallel`` answers at once, each with
members of its own over the same models: ``places.py``), the worker threads and the CPU cores
they share, the steps in flight (a model is never freed under a running decode), the cancel of
whatever is open, and the weights an answer starts from and hands on. An ``AnswerStream`` asks
it for a place, runs its steps through it and gives the place back; nothing else about a
running answer lives anywhere else.

Admission lives here and nowhere else: answers wait in one line for a place and the KV cells
they reserve, first come, first served (``enqueue`` counts one at once, ``begin`` waits for its
turn); the server's 429 is this line being full (``Busy``). An answer that would wait only for
answers open on its own thread is a ``SpecemError`` (never a hang); each answer has its own
cancel (``AnswerStream.cancel``), which also lets it out of the line at once, and a cancel sent
before its first step is not lost; ``close()`` waits for the steps in flight before it frees the
models.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from specem_local.engine.learned import StartingWeights, remember, starting_weights
from specem_local.engine.member import Member
from specem_local.engine.places import Batcher, place_members
from specem_local.errors import Busy, SpecemError
from specem_local.events import Event, FinalEvent
from specem_local.settings import EnsembleSettings
from specem_local.storage.weights import WeightStore

Item = TypeVar("Item")
Result = TypeVar("Result")


class Cancellable(Protocol):
    """What the runner knows of an answer: whether it was cancelled, and how to cancel it."""

    @property
    def cancelled(self) -> bool: ...

    def cancel(self) -> None: ...


@dataclass(frozen=True)
class Opened:
    """An answer holding a place: the answer, the KV cells it reserves, the thread that opened
    it and when."""

    answer: weakref.ref[Cancellable]
    cells: int
    thread: int
    since: float


class AnswerRunner:
    """Runs answers on ``members``: places, threads, steps, cancel, close, weights.
    ``threads_per_model``: the cores each model may use (None: models made by the caller keep
    their own threads); ``warnings``: where what is said once goes (the ensemble's list);
    ``parallel``: answers that may run at once (their members' models hold that many times
    the sequences one answer needs)."""

    def __init__(
        self,
        members: Sequence[Member],
        threads_per_model: int | None,
        weight_store: WeightStore | None,
        warnings: list[str],
        parallel: int = 1,
    ) -> None:
        self.models = [member.model for member in members]  # what close() frees
        self.batcher = Batcher()
        self.places = [list(members)] if parallel == 1 else place_members(members, parallel, self.batcher)
        self.members = self.places[0]
        self.threads_per_model = threads_per_model
        self.weight_store = weight_store
        self.warnings = warnings
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=len(self.members), thread_name_prefix="specem"
        )
        self._state = threading.Condition()  # guards _open, _queue, _steps, _closed and the pace
        self._open: dict[int, Opened] = {}  # place -> the answer holding it
        self._queue: list[weakref.ref[Cancellable]] = []  # answers waiting for a place, first come first served
        self._steps = 0  # steps running now
        self._closed = False
        self._in_step = threading.local()  # .active: this thread runs a step (or a part of one)
        self.answer_seconds = 5.0  # a moving average of how long an answer holds its place

    @property
    def parallel(self) -> int:
        return len(self.places)

    # -- places: the one scheduler -----------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def running(self) -> int:
        """Answers holding a place now."""
        with self._state:
            return len(self._open_places())

    @property
    def waiting(self) -> int:
        """Answers in line for a place."""
        with self._state:
            return len(self._waiting())

    def enqueue(self, answer: Cancellable, limit: int | None = None) -> None:
        """Put ``answer`` in line now, so answers that arrive together are counted at once (the
        server does, before it answers); it starts when its turn comes (``begin``). ``Busy``
        when ``limit`` answers are already running or waiting."""
        with self._state:
            if self._closed:
                raise SpecemError("this ensemble has been closed")
            if self._place_of(answer) is not None or any(a is answer for a in self._waiting()):
                return
            if limit is not None and len(self._open_places()) + len(self._waiting()) >= limit:
                raise Busy(
                    f"busy: {self.parallel} answer{'s' if self.parallel > 1 else ''} at once and "
                    f"{max(limit - self.parallel, 0)} waiting; try again shortly",
                    retry_after=self.retry_after(),
                )
            self._queue.append(weakref.ref(answer))

    def begin(self, answer: Cancellable, cells: int) -> int | None:
        """Give ``answer`` a place (the one it holds, if any) and return it, when its turn comes:
        first come, first served, so an answer that fits only alone is never overtaken by later
        ones that fit beside the running answers (as llama.cpp's server defers a task). None
        when the answer is cancelled while it waits. A ``SpecemError`` when closed, or when the
        answers it would wait for are all open on this same thread (waiting would never end)."""
        with self._state:
            held = self._place_of(answer)
            if held is not None:
                return held
            if not any(a is answer for a in self._waiting()):
                self._queue.append(weakref.ref(answer))
            try:
                while True:
                    if self._closed:
                        raise SpecemError("this ensemble has been closed")
                    if answer.cancelled:
                        return None
                    taken = set(self._open_places())  # places only: a dropped answer must not be held alive here
                    free = [place for place in range(self.parallel) if place not in taken]
                    first = self._waiting()[0] is answer
                    if first and free and (not taken or self._fits(cells, free)):
                        break
                    if taken and all(o.thread == threading.get_ident() for o in self._open.values()):
                        raise SpecemError(self._all_open_message(bool(free)))
                    # looks again now and then: an answer dropped without closing says nothing
                    self._state.wait(timeout=0.5)
            finally:
                self._queue = [ref for ref in self._queue if ref() is not None and ref() is not answer]
                self._state.notify_all()
            self._open[free[0]] = Opened(weakref.ref(answer), cells, threading.get_ident(), time.monotonic())
            return free[0]

    def _all_open_message(self, room: bool) -> str:
        if self.parallel == 1:
            return (
                "another answer is still open on this ensemble; read it to the end (or cancel it and read its last "
                "event) before starting the next one"
            )
        if room:
            return (
                "this answer's KV cells do not fit beside the answers open on this thread; read one to the end (or "
                "cancel it) first, or raise n_ctx"
            )
        return (
            f"all {self.parallel} places of this ensemble hold open answers; read one to the end (or cancel it) "
            "first, or load with a larger parallel"
        )

    def _place_of(self, answer: Cancellable) -> int | None:
        return next((place for place, opened in self._open_places().items() if opened is answer), None)

    def _open_places(self) -> dict[int, Cancellable]:
        """The open answers by place (a stream that was dropped has given its place back)."""
        alive = {place: opened.answer() for place, opened in self._open.items()}
        for place in [p for p, answer in alive.items() if answer is None]:
            del self._open[place]
        return {place: answer for place, answer in alive.items() if answer is not None}

    def _waiting(self) -> list[Cancellable]:
        """The answers in line, first first (one that was dropped has left it)."""
        waiting = [ref() for ref in self._queue]
        self._queue = [ref for ref, answer in zip(self._queue, waiting) if answer is not None]
        return [answer for answer in waiting if answer is not None]

    def _fits(self, cells: int, free: list[int]) -> bool:
        """Whether ``cells`` fit in the KV memory beside the open answers; the cells idle places
        still hold (their last prompt) are freed first if that makes room."""
        capacity = min(model.n_ctx for model in self.models)
        reserved = sum(opened.cells for opened in self._open.values())
        if reserved + cells > capacity:
            return False
        idle = sum(max(len(m.tokens) for m in self.places[place]) for place in free)
        if reserved + cells + idle > capacity:
            for place in free:
                for member in self.places[place]:
                    member.reset()
        return True

    def retry_after(self) -> int:
        """Seconds until a place is likely, for a request turned away: the answers waiting,
        at the recent pace."""
        return max(1, math.ceil(self.answer_seconds * (len(self._queue) + 1) / self.parallel))

    def at_place(self, place: int, members: Sequence[Member]) -> list[Member]:
        """``members`` (of any place) as the members of ``place``."""
        chosen = {member.name for member in members}
        return [member for member in self.places[place] if member.name in chosen]

    def end(self, answer: Cancellable) -> None:
        """``answer`` gives its place back, or its place in line (a no-op if it holds neither)."""
        with self._state:
            for place, opened in list(self._open.items()):
                if opened.answer() is answer:
                    del self._open[place]
                    self.answer_seconds = 0.7 * self.answer_seconds + 0.3 * (time.monotonic() - opened.since)
            self._queue = [ref for ref in self._queue if ref() is not None and ref() is not answer]
            self._state.notify_all()

    def wake(self) -> None:
        """Let the answers waiting for a place look again (one of them was cancelled)."""
        with self._state:
            self._state.notify_all()

    def cancel(self) -> None:
        """Stop the open answers and the ones in line, if any (safe from any thread)."""
        with self._state:
            answers = [*self._open_places().values(), *self._waiting()]
        for answer in answers:
            answer.cancel()

    def close(self) -> None:
        """Cancel the open answers, wait for their steps in flight, then free the models."""
        if getattr(self._in_step, "active", False):
            raise SpecemError("close() was called from inside an answer's step; close the ensemble after it")
        self.cancel()
        with self._state:
            if self._closed:
                return
            self._closed = True
            while self._steps:
                self._state.wait()
            self._state.notify_all()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.batcher.close()
        for model in self.models:
            model.close()

    # -- steps -------------------------------------------------------------------------------------
    def step(self, steps: Iterator[Event]) -> Event:
        """Run an answer to its next event; the models are not freed while it runs."""
        with self._state:
            if self._closed:
                raise SpecemError("this ensemble was closed during the answer")
            self._steps += 1
        self._in_step.active = True
        try:
            with self.batcher.step():
                return next(steps)
        finally:
            self._in_step.active = False
            with self._state:
                self._steps -= 1
                self._state.notify_all()

    def run_each(
        self, settings: EnsembleSettings, function: Callable[[Item], Result], items: list[Item]
    ) -> list[Result]:
        """``function`` over ``items`` (members, or work for them) within a step: in the worker
        threads when the drafting setting says so, else one after another; either way the
        models running at once share the cores."""
        threaded = self._threaded(settings) and len(items) > 1 and self._executor is not None and self.parallel == 1
        self._share_cores(len(items) if threaded else 1)
        if threaded:
            return self._in_workers(function, items)
        return [function(item) for item in items]

    def _threaded(self, settings: EnsembleSettings) -> bool:
        """Threads, or round-robin: ``auto`` takes threads when a model runs on a GPU or on
        another machine (RPC), where the host mostly waits and they were 1.1-1.8x round-robin;
        on 2 CPU cores they are level without model exit and within about 10% either way with it
        (docs/performance.md). With several places the answers' decodes share batches instead."""
        if settings.drafting == "auto":
            return any(m.model.placement.startswith(("GPU", "RPC")) for m in self.members)
        return settings.drafting == "threads"

    def _in_workers(self, function: Callable[[Item], Result], items: list[Item]) -> list[Result]:
        """``function`` over ``items`` in the worker threads. Returns or raises only when every
        worker has stopped: after an error or Ctrl-C in one, the others would otherwise go on
        decoding while the next step uses the same models."""
        assert self._executor is not None
        futures = [self._executor.submit(self._part_of_step(function), item) for item in items]
        try:
            return [future.result() for future in futures]
        except BaseException:  # Ctrl-C: a step stuck on another machine must not hold the wait below
            for member in self.members:
                member.model.interrupt()
            raise
        finally:
            for future in futures:
                future.cancel()
            concurrent.futures.wait(futures)

    def _part_of_step(self, function: Callable[[Item], Result]) -> Callable[[Item], Result]:
        """``function`` run in a worker thread as part of the step (close() from it is an error)."""

        def part(item: Item) -> Result:
            self._in_step.active = True
            try:
                return function(item)
            finally:
                self._in_step.active = False

        return part

    def _share_cores(self, at_once: int) -> None:
        """Give the models that decode at once a share of the cores each, at most
        ``threads_per_model``: more llama.cpp threads than cores only wait on each other."""
        if self.threads_per_model is None:  # models made by the caller: their threads are theirs
            return
        threads = threads_each(self.threads_per_model, at_once)
        for member in self.members:
            if member.model.lost is None:
                member.model.set_threads(threads)

    # -- weights across answers ---------------------------------------------------------------------
    @property
    def weights_version(self) -> int:
        """Changes whenever this process writes the weight store: starting weights read before
        are read again."""
        return self.weight_store.writes if self.weight_store is not None else 0

    def starting_weights(self, members: list[Member], settings: EnsembleSettings) -> StartingWeights:
        """The weights an answer of ``members`` starts from; an unreadable store costs the kept
        weights (said once), not the answer."""
        try:
            return starting_weights(self.weight_store, members, settings)
        except SpecemError as error:
            start = starting_weights(self.weight_store, members, settings, unreadable=True)
            fallback = "the built-in calibration" if start.origin == "built-in" else "the prior weights"
            self.warn(f"warning: {error}; starting from {fallback}")
            return start

    def remember(
        self, members: list[Member], settings: EnsembleSettings, start: StartingWeights, final: FinalEvent
    ) -> None:
        """Hand on what an ended answer learned (with ``carry_weights``)."""
        if self.weight_store is None:
            return
        try:
            remember(self.weight_store, members, settings, start, final.weights)
        except SpecemError as error:
            self.warn(f"warning: {error}; the weights this answer learned were not kept")

    def warn(self, message: str) -> None:
        """Say a warning once: the front ends ask for the starting weights, then answer."""
        if message not in self.warnings:
            self.warnings.append(message)
            warnings.warn(message, stacklevel=4)


def threads_each(threads_per_model: int, at_once: int) -> int:
    """llama.cpp threads for each of ``at_once`` models decoding together."""
    return max(1, min(threads_per_model, available_cores() // at_once))


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
