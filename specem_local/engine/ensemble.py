"""The ensemble: several models answering together, one answer at a time.

``Ensemble`` takes members ready to answer (``Ensemble.from_config`` loads them from
models.toml, ``Ensemble()`` from the usual lookup) and answers one prompt at a time with a
``StartEvent``, one ``RoundEvent`` per round and a ``FinalEvent`` (the round loop itself is in
``rounds.py``). It knows nothing about front ends: the CLI, the chat app and scripts consume
the same stream.

Threads and lifetimes: an ensemble streams one answer at a time, and a second answer while one
is open is a ``SpecemError`` (never a hang). Each answer has its own cancel token
(``AnswerStream.cancel``), so a cancel sent before the answer's first step is not lost.
``close()`` waits for the step in flight, so a model is never freed under a running decode.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specem_local.engine import feedback
from specem_local.engine.answer_stream import AnswerStream
from specem_local.engine.constraints import AnswerFormat, Constraint, constraint_from
from specem_local.engine.learned import StartingWeights, key_of, remember, starting_weights
from specem_local.engine.loading import Loaded, ProgressCallback, load_members
from specem_local.engine.member import Member, can_draft_and_verify
from specem_local.engine.prompting import Message
from specem_local.engine.request import AnswerRequest, Prompt, checked_prefix, conversation, prompt_tokens
from specem_local.engine.roster import Roster
from specem_local.engine.rounds import weights_dict
from specem_local.errors import SpecemError
from specem_local.events import Event, FinalEvent, origin_words
from specem_local.models.config import Config, load_config, with_load_overrides
from specem_local.settings import EnsembleSettings, with_overrides
from specem_local.storage.weights import WeightStore


class Ensemble:
    """Several models answering together. Use as a context manager to free them.

    >>> with Ensemble() as ensemble:               # the models.toml lookup
    ...     print(ensemble.generate("2+2?").text)

    ``Ensemble(members, settings)`` takes members that are ready (and closes their models when
    it is closed); ``Ensemble.from_config(config)`` loads them. ``weight_store`` keeps the
    weights learned from answer to answer (``Ensemble()`` and ``from_config`` use the one in the
    user data dir; None: every answer starts from the prior).
    """

    def __init__(
        self,
        members: Sequence[Member] | None = None,
        settings: EnsembleSettings | None = None,
        *,
        loaded: Loaded | None = None,
        weight_store: WeightStore | None = None,
    ) -> None:
        if isinstance(members, Config):
            raise TypeError("Ensemble(config) takes ready members; use Ensemble.from_config(config)")
        if members is None:
            config = load_config()
            loaded = load_members(config)
            members, settings = loaded.members, settings or config.ensemble
            weight_store = weight_store or WeightStore()
        if not members:
            raise SpecemError("an ensemble needs at least one model")
        if not can_draft_and_verify(list(members)):
            raise SpecemError("the models cannot both draft and verify; check the roles")
        self.members = list(members)
        self.settings = settings or EnsembleSettings()
        self.load_failures = loaded.failures if loaded else []
        self.warnings = loaded.warnings if loaded else []
        self.threads_per_model = loaded.threads_per_model if loaded else None
        self.model_files = loaded.files if loaded else {}  # name -> GGUF path, for models loaded from files
        self.weight_store = weight_store
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=len(self.members), thread_name_prefix="specem"
        )
        self._running = threading.Lock()  # held while engine code runs: a step of an answer
        self._state = threading.Lock()  # guards _open and _closed
        self._open: weakref.ref[AnswerStream] | None = None  # a dropped stream frees the ensemble
        self._closed = False
        self._in_step = threading.local()  # .active: this thread runs a step (or a part of one)

    @classmethod
    def from_config(
        cls,
        config: Config | None = None,
        *,
        progress: ProgressCallback | None = None,
        skip_failed: bool = False,
        n_seq_max: int | None = None,
        **overrides: object,
    ) -> Ensemble:
        """Load the configured models (``config``: ``load_config()`` when None).
        ``progress(name, fraction)`` reports loading; ``skip_failed`` goes on without models
        that fail to load (see ``.load_failures``); ``overrides`` are ``[ensemble]`` settings,
        load-time ones (``threads_per_model``) included."""
        config = config if config is not None else load_config()
        config, overrides = with_load_overrides(config, overrides)
        settings = with_overrides(config.ensemble, **overrides)  # checked before loading anything
        loaded = load_members(config, progress=progress, skip_failed=skip_failed, n_seq_max=n_seq_max)
        return cls(loaded.members, settings, loaded=loaded, weight_store=WeightStore())

    # -- lifetime ---------------------------------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        return [member.name for member in self.members]

    @property
    def plain_generation(self) -> bool:
        """One model: plain generation, no ensembling."""
        return len(self.members) == 1

    def close(self) -> None:
        """Free the models. Cancels the open answer and waits for its step in flight first."""
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

    def __enter__(self) -> Ensemble:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Stop the open answer, if any (safe from any thread); it ends with "cancelled"."""
        with self._state:
            answer = self._open() if self._open is not None else None
        if answer is not None:
            answer.cancel()

    # -- answers ----------------------------------------------------------------------------------
    def starting_weights(self, models: list[str] | None = None, **overrides: object) -> dict[str, float]:
        """The verifiers' weights the next answer starts from, as its ``StartEvent`` will say."""
        members = self._select(models)
        settings = with_overrides(self.settings, **overrides)
        return weights_dict(members, self._starting_weights(members, settings).weights)

    def weights_origin(self, models: list[str] | None = None, **overrides: object) -> str:
        """Where the next answer's starting weights come from, in words (as its ``StartEvent``)."""
        members = self._select(models)
        start = self._starting_weights(members, with_overrides(self.settings, **overrides))
        return origin_words(start.origin, start.answers, start.items, start.choices)

    def mix_advice(self) -> str | None:
        """Said once when a front end starts: the largest model is ``feedback.SIZE_GAP`` times
        the next or more and nothing calibrates the weights, so the ensemble is slow to follow
        it (docs/quality.md). None otherwise."""
        gap = feedback.size_gap({m.name: m.model.n_params for m in self.members if m.spec.verifies})
        if gap is None or self.weights_origin() != "the prior":
            return None
        largest, second, ratio = gap
        return (
            f"{largest} has {ratio:.1f}x the parameters of {second}: ensembles gain most from members of comparable "
            "strength; calibrate (specem calibrate TASKS.jsonl) so members known to lose stop drafting"
        )

    def reset_weights(self, models: list[str] | None = None) -> bool:
        """Forget the weights carried over for these models (default: all); the next answer
        starts from the prior. Returns whether there were any."""
        members = self._select(models)
        return self.weight_store is not None and self.weight_store.reset(key_of(members))

    def prepare(
        self,
        prompt: Prompt,
        *,
        models: list[str] | None = None,
        schema: Any = None,
        json: bool = False,
        grammar: str | None = None,
        regex: str | None = None,
        tools: Any = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool = True,
        output_format: Constraint | None = None,
        **overrides: object,
    ) -> AnswerRequest:
        """The request an answer runs from, checked once: the settings, the format (its
        grammar compiled), the conversation as the members read it, each member's prompt tokens
        (``PromptTooLong`` if one leaves no room to answer) and the starting weights. A bad
        value is a ``SpecemError`` (a ``SettingError`` names the field) and nothing runs.
        ``output_format``: a format already checked (``constraint_from``) instead of the
        keywords."""
        settings = with_overrides(self.settings, **overrides)
        if output_format is None:
            output_format = constraint_from(schema, json, grammar, regex, tools, tool_choice, parallel_tool_calls)
        messages = conversation(prompt, settings, output_format)
        members = self._select(models)
        start = self._starting_weights(members, settings)
        drafting = Roster(members, settings, start.weights, settings.model_exit and start.origin != "prior").drafters
        formatted = output_format is not None
        prompts = {m.name: prompt_tokens(m, messages, settings, len(drafting), formatted) for m in members}
        prefix = checked_prefix(messages, output_format, lambda text: AnswerFormat(output_format).accepts(text, False))
        stop_note = ("stop strings are not applied to an answer with a format: it ends when whole",)
        notes = (output_format.notes + (stop_note if settings.stop else ())) if output_format is not None else ()
        return AnswerRequest(
            messages=tuple(messages),
            settings=settings,
            output_format=output_format,
            members=tuple(members),
            prompts=prompts,
            start=start,
            weights_version=self.weights_version,
            prefix=prefix,
            notes=notes,
        )

    def stream(self, prompt: Prompt | AnswerRequest, **options: Any) -> AnswerStream:
        """Answer ``prompt`` (a string, a conversation, or a request from ``prepare``): iterate
        the returned stream for a StartEvent, a RoundEvent per round and a FinalEvent.
        ``options`` are ``prepare``'s: ``models`` picks which loaded models take part (default:
        all); ``[ensemble]`` settings for this answer; an answer a program can parse:
        ``schema`` (a JSON Schema dict or text, or a pydantic model class), ``json=True`` (any
        JSON object), ``grammar`` (Lark or GBNF) or ``regex``; or ``tools`` (JSON-Schema
        function specs or Python functions; ``tool_choice``, ``parallel_tool_calls`` as
        OpenAI's). Its final event then carries ``parsed`` (for tools a ``ToolReply``: calls,
        or a message). A conversation may hold earlier tool calls (``tool_calls`` on assistant
        messages) and results (``role: "tool"``)."""
        if isinstance(prompt, AnswerRequest):
            if options:
                raise TypeError("stream(request) takes no options: they are in the request")
            return AnswerStream(self, prompt)
        return AnswerStream(self, self.prepare(prompt, **options))

    def check_options(self, **options: Any) -> None:
        """What ``prepare`` checks of the options alone, for a request that asks for no answer
        (Ollama's load request): a bad value is a ``SpecemError``."""
        self.prepare("?", **options)

    def generate(self, prompt: Prompt, **overrides: object) -> FinalEvent:
        """Answer a prompt; return the final record."""
        return self.stream(prompt, **overrides).final()

    def chat(self, messages: list[Message] | list[dict[str, str]], **overrides: object) -> FinalEvent:
        """Answer the last user message of a conversation; each model renders the whole
        history with its own template."""
        return self.stream(messages, **overrides).final()

    @property
    def weights_version(self) -> int:
        """Changes whenever this process writes the weight store: starting weights read before
        are read again."""
        return self.weight_store.writes if self.weight_store is not None else 0

    def _select(self, names: list[str] | None) -> list[Member]:
        if self._closed:
            raise SpecemError("this ensemble has been closed")
        if names is None:
            return self.members
        unknown = sorted(set(names) - set(self.model_names))
        if unknown:
            raise SpecemError(f"unknown model {unknown[0]!r}; loaded models: {', '.join(self.model_names)}")
        chosen = [m for m in self.members if m.name in names]
        if not can_draft_and_verify(chosen):
            raise SpecemError("the chosen models cannot both draft and verify; pick at least one that does each")
        return chosen

    def _open_answer(self, answer: AnswerStream) -> None:
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

    def _release(self, answer: AnswerStream) -> None:
        with self._state:
            current = self._open() if self._open is not None else None
            if current is None or current is answer:
                self._open = None

    def _starting_weights(self, members: list[Member], settings: EnsembleSettings) -> StartingWeights:
        try:
            return starting_weights(self.weight_store, members, settings)
        except SpecemError as error:  # an unreadable store costs the kept weights, not the answer
            start = starting_weights(self.weight_store, members, settings, unreadable=True)
            fallback = "the built-in calibration" if start.origin == "built-in" else "the prior weights"
            self._warn(f"warning: {error}; starting from {fallback}")
            return start

    def _remember(
        self, members: list[Member], settings: EnsembleSettings, start: StartingWeights, final: FinalEvent
    ) -> None:
        if self.weight_store is None:
            return
        try:
            remember(self.weight_store, members, settings, start, final.weights)
        except SpecemError as error:
            self._warn(f"warning: {error}; the weights this answer learned were not kept")

    def _warn(self, message: str) -> None:
        """Say a warning once: the front ends ask for the starting weights, then answer."""
        if message not in self.warnings:
            self.warnings.append(message)
            warnings.warn(message, stacklevel=4)

    def _step(self, steps: Iterator[Event]) -> Event:
        """Run the answer to its next event, holding the engine while it runs."""
        with self._running:
            if self._closed:
                raise SpecemError("this ensemble was closed during the answer")
            self._in_step.active = True
            try:
                return next(steps)
            finally:
                self._in_step.active = False

    def _threaded(self, settings: EnsembleSettings) -> bool:
        """Threads, or round-robin: ``auto`` takes threads when a model runs on a GPU or on
        another machine (RPC), where the host mostly waits and they were 1.1-1.8x round-robin;
        on 2 CPU cores they are level without model exit and within about 10% either way with it
        (docs/performance.md)."""
        if settings.drafting == "auto":
            return any(m.model.placement.startswith(("GPU", "RPC")) for m in self.members)
        return settings.drafting == "threads"

    def _map(self, settings: EnsembleSettings, function: Callable, items: list) -> list:
        threaded = self._threaded(settings) and len(items) > 1 and self._executor is not None
        self._share_cores(len(items) if threaded else 1)
        if threaded:
            return self._in_workers(function, items)
        return [function(item) for item in items]

    def _in_workers(self, function: Callable, items: list) -> list:
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

    def _part_of_step(self, function: Callable) -> Callable:
        """``function`` run in a worker thread as part of the step (close() from it is an error)."""

        def part(item: object) -> object:
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


def threads_each(threads_per_model: int, at_once: int) -> int:
    """llama.cpp threads for each of ``at_once`` models decoding together."""
    return max(1, min(threads_per_model, available_cores() // at_once))


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
