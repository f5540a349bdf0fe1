"""The one owner of running answers on a set of loaded members.

``AnswerRunner`` holds what answers share: the places (one answer at a time), the worker
threads and the CPU cores they share, the step lock (a model is never freed under a running
decode), the cancel of whatever is open, and the weights an answer starts from and hands on.
An ``AnswerStream`` asks it for a place, runs its steps through it and gives the place back;
nothing else about a running answer lives anywhere else.

Threads and lifetimes: a second answer while one is open is a ``SpecemError`` (never a hang);
each answer has its own cancel (``AnswerStream.cancel``), so a cancel sent before its first
step is not lost; ``close()`` waits for the step in flight before it frees the models.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from specem_local.engine.learned import StartingWeights, remember, starting_weights
from specem_local.engine.member import Member
from specem_local.errors import SpecemError
from specem_local.events import Event, FinalEvent
from specem_local.settings import EnsembleSettings
from specem_local.storage.weights import WeightStore

Item = TypeVar("Item")
Result = TypeVar("Result")


class Cancellable(Protocol):
    """What the runner knows of an open answer: that it can be cancelled."""

    def cancel(self) -> None: ...


class AnswerRunner:
    """Runs answers on ``members``: places, threads, the step lock, cancel, close, weights.
    ``threads_per_model``: the cores each model may use (None: models made by the caller keep
    their own threads); ``warnings``: where what is said once goes (the ensemble's list)."""

    def __init__(
        self,
        members: Sequence[Member],
        threads_per_model: int | None,
        weight_store: WeightStore | None,
        warnings: list[str],
    ) -> None:
        self.members = list(members)
        self.threads_per_model = threads_per_model
        self.weight_store = weight_store
        self.warnings = warnings
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=len(self.members), thread_name_prefix="specem"
        )
        self._running = threading.Lock()  # held while engine code runs: a step of an answer
        self._state = threading.Lock()  # guards _open and _closed
        self._open: weakref.ref[Cancellable] | None = None  # a dropped stream frees its place
        self._closed = False
        self._in_step = threading.local()  # .active: this thread runs a step (or a part of one)

    # -- places ------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def begin(self, answer: Cancellable) -> None:
        """Give ``answer`` the place (a ``SpecemError`` if another answer holds it, or if closed)."""
        with self._state:
            if self._closed:
                raise SpecemError("this ensemble has been closed")
            current = self._open() if self._open is not None else None
            if current is not None and current is not answer:
                raise SpecemError(
                    "another answer is still open on this ensemble; read it to the end (or cancel it and "
                    "read its last event) before starting the next one"
                )
            self._open = weakref.ref(answer)

    def end(self, answer: Cancellable) -> None:
        """``answer`` gives its place back (a no-op if it holds none)."""
        with self._state:
            current = self._open() if self._open is not None else None
            if current is None or current is answer:
                self._open = None

    def cancel(self) -> None:
        """Stop the open answer, if any (safe from any thread)."""
        with self._state:
            answer = self._open() if self._open is not None else None
        if answer is not None:
            answer.cancel()

    def close(self) -> None:
        """Cancel the open answer, wait for its step in flight, then free the models."""
        if getattr(self._in_step, "active", False):
            raise SpecemError("close() was called from inside an answer's step; close the ensemble after it")
        self.cancel()
        with self._running, self._state:
            if self._closed:
                return
            self._closed = True
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            for member in self.members:
                member.model.close()

    # -- steps -------------------------------------------------------------------------------------
    def step(self, steps: Iterator[Event]) -> Event:
        """Run an answer to its next event, holding the models while it runs."""
        with self._running:
            if self._closed:
                raise SpecemError("this ensemble was closed during the answer")
            self._in_step.active = True
            try:
                return next(steps)
            finally:
                self._in_step.active = False

    def run_each(
        self, settings: EnsembleSettings, function: Callable[[Item], Result], items: list[Item]
    ) -> list[Result]:
        """``function`` over ``items`` (members, or work for them) within a step: in the worker
        threads when the drafting setting says so, else one after another; either way the
        models running at once share the cores."""
        threaded = self._threaded(settings) and len(items) > 1 and self._executor is not None
        self._share_cores(len(items) if threaded else 1)
        if threaded:
            return self._in_workers(function, items)
        return [function(item) for item in items]

    def _threaded(self, settings: EnsembleSettings) -> bool:
        """Threads, or round-robin: ``auto`` takes threads when a model runs on a GPU or on
        another machine (RPC), where the host mostly waits and they were 1.1-1.8x round-robin;
        on 2 CPU cores they are level without model exit and within about 10% either way with it
        (docs/performance.md)."""
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
