"""The ensemble: several models answering together.

``Ensemble`` takes members ready to answer (``Ensemble.from_config`` loads them from
models.toml, ``Ensemble()`` from the usual lookup), prepares each answer's request once
(``prepare``: ``request.py``) and streams it (``stream``: a ``StartEvent``, one ``RoundEvent`` per
round and a ``FinalEvent``; the round loop is ``rounds.py``). Running answers is the
``AnswerRunner``'s (``runner.py``): places, threads, cancel, close. It knows nothing about front
ends: the CLI, the chat app, the server and scripts consume the same stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from specem_local.engine import feedback, thinking
from specem_local.engine.answer_events import weights_dict
from specem_local.engine.answer_stream import AnswerStream
from specem_local.engine.ask import Ask, ask_from
from specem_local.engine.formats import FormatMatcher, OutputFormat, with_instruction
from specem_local.engine.learned import confidence_calibrator, key_of
from specem_local.engine.loading import Loaded, ProgressCallback, load_members
from specem_local.engine.many import Answered, answer_many, start_for
from specem_local.engine.member import Member, can_draft_and_verify
from specem_local.engine.option_answers import choice_among, option_plan
from specem_local.engine.prompting import Message, split_partial_answer
from specem_local.engine.request import (
    AnswerRequest,
    Prompt,
    checked_prefix,
    conversation,
    fitted_thinking,
    prompt_tokens,
    round_cells,
)
from specem_local.engine.roster import Roster
from specem_local.engine.runner import AnswerRunner
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, origin_words
from specem_local.models.config import Config, load_config, with_load_overrides
from specem_local.settings import EnsembleSettings, with_overrides
from specem_local.storage.weights import WeightStore


@dataclass(frozen=True)
class MemberFacts:
    """One member as a front end shows it: its name, where its layers run ("CPU", "GPU 25/25
    layers", "RPC host:port"), its parameters, and why it was lost (None: it is not)."""

    name: str
    placement: str
    parameters: int
    lost: str | None


class Ensemble:
    """Several models answering together. Use as a context manager to free them.

    >>> with Ensemble() as ensemble:               # the models.toml lookup
    ...     print(ensemble.generate("2+2?").text)

    ``Ensemble(members, settings)`` takes members that are ready (and closes their models when
    it is closed); ``Ensemble.from_config(config)`` loads them. ``weight_store`` keeps the
    weights learned from answer to answer (``Ensemble()`` and ``from_config`` use the one in the
    user data dir; None: every answer starts from the prior). ``parallel``: answers that may
    run at once, for members made by the caller with ``parallel`` times the sequences one answer
    needs (``from_config`` reads the ``parallel`` load setting).
    """

    def __init__(
        self,
        members: Sequence[Member] | None = None,
        settings: EnsembleSettings | None = None,
        *,
        loaded: Loaded | None = None,
        weight_store: WeightStore | None = None,
        parallel: int = 1,
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
        if not can_draft_and_verify([m for m in members if not m.spec.reserve]):
            raise SpecemError("the models cannot both draft and verify; check the roles")
        self.settings = settings or EnsembleSettings()
        self.load_failures = loaded.failures if loaded else []
        self.warnings = loaded.warnings if loaded else []
        self.threads_per_model = loaded.threads_per_model if loaded else None
        self.model_files = loaded.files if loaded else {}  # name -> GGUF path, for models loaded from files
        places = loaded.parallel if loaded else parallel
        self.runner = AnswerRunner(list(members), self.threads_per_model, weight_store, self.warnings, places)
        # the first place's (views of the models when there are several); a reserve member answers only when
        # the ensemble is unsure (escalate_below)
        self.members = [m for m in self.runner.members if not m.spec.reserve]
        self.reserve = [m for m in self.runner.members if m.spec.reserve]
        if self.settings.drafting == "threads" and self.runner.parallel > 1:
            self.runner.warn(
                f'warning: drafting = "threads" takes effect only with parallel = 1: the {self.runner.parallel} places '
                "decode through one thread that batches every answer's rows, so each answer drafts round-robin"
            )

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

    def member_facts(self) -> list[MemberFacts]:
        """What a front end shows of each member: where it runs, its size, whether it is lost."""
        return [MemberFacts(m.name, m.model.placement, m.model.n_params, m.model.lost) for m in self.members]

    @property
    def plain_generation(self) -> bool:
        """One model: plain generation, no ensembling."""
        return len(self.members) == 1

    def close(self) -> None:
        """Free the models. Cancels the open answer and waits for its step in flight first."""
        self.runner.close()

    @property
    def weight_store(self) -> WeightStore | None:
        """Where the weights learned from answer to answer are kept (None: none are)."""
        return self.runner.weight_store

    @weight_store.setter
    def weight_store(self, store: WeightStore | None) -> None:
        self.runner.weight_store = store

    def __enter__(self) -> Ensemble:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Stop the open answer, if any (safe from any thread); it ends with "cancelled"."""
        self.runner.cancel()

    # -- answers ----------------------------------------------------------------------------------
    def starting_weights(self, models: list[str] | None = None, **overrides: object) -> dict[str, float]:
        """The verifiers' weights the next answer starts from, as its ``StartEvent`` will say."""
        members = self._select(models)
        settings = with_overrides(self.settings, **overrides)
        return weights_dict(members, self.runner.starting_weights(members, settings).weights)

    def weights_origin(self, models: list[str] | None = None, **overrides: object) -> str:
        """Where the next answer's starting weights come from, in words (as its ``StartEvent``)."""
        members = self._select(models)
        start = self.runner.starting_weights(members, with_overrides(self.settings, **overrides))
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

    def prepare(self, ask: Ask | Prompt, **options: Any) -> AnswerRequest:
        """The request an answer runs from, checked once: the settings, the format (its
        grammar compiled), the conversation as the members read it, each member's prompt tokens
        (``PromptTooLong`` if one leaves no room to answer), the room it needs in both phases
        when it thinks first, and the starting weights. A bad value is a ``SpecemError`` (a
        ``SettingError`` names the field) and nothing runs. ``ask``: an ``Ask`` (what every
        front end builds), or a prompt with ``options``, the keywords ``stream`` takes
        (``ask.ask_from`` sorts them). ``think``: whether an answer with a format is thought
        through first (None: the ``reasoning_budget`` setting; True / False; "low", "medium",
        "high" or "none"; a number of tokens): ``thinking.py``."""
        if isinstance(ask, Ask):
            if options:
                raise TypeError("prepare(ask) takes no options: they are in the ask")
        else:
            ask = ask_from(ask, options)
        prompt, think = ask.prompt, ask.think
        settings = with_overrides(self.settings, **ask.settings)
        output_format = ask.compiled_format()
        asked = conversation(prompt, settings, output_format)
        default = settings.reasoning_budget if output_format is None or output_format.kind != "tools" else 0
        think_plan = thinking.plan(think, settings.max_tokens, default, output_format is not None)
        begun = bool(split_partial_answer(asked)[1])
        among = choice_among(output_format, settings, begun, think is not None and think_plan.budget > 0)
        if begun or among is not None:
            think_plan = thinking.ThinkPlan(0)  # begun: it goes on in its format; options: scored at once
        if output_format is None:
            messages = asked
        elif think_plan.budget:
            messages = thinking.reasoning_messages(asked, output_format, settings.think_bridge)
        else:
            messages = with_instruction(asked, output_format)
        members = self._select(list(ask.models) if ask.models is not None else None)
        start = self.runner.starting_weights(members, settings)
        drafting = Roster(members, settings, start.weights, settings.model_exit and start.origin != "prior").drafters
        drafters, formatted = len(drafting), output_format is not None
        prompts = {m.name: prompt_tokens(m, messages, settings, drafters, formatted) for m in members}
        switched = 0  # the format's phase after thinking: its longest prompt, reasoning included
        if think_plan.budget and output_format is not None:
            think_plan, switched = fitted_thinking(think_plan, members, asked, output_format, settings, drafters)
            if not think_plan.budget:  # no room to think: the format from the first token
                messages = with_instruction(asked, output_format)
                prompts = {m.name: prompt_tokens(m, messages, settings, drafters, formatted) for m in members}
        longest = max([len(tokens) for tokens in prompts.values()] + [switched])
        plan = option_plan(among, members, asked, settings, prompts) if among is not None else None  # no max_tokens
        prefix = checked_prefix(messages, output_format, lambda text: _accepts(output_format, text))
        stop_note = ("stop strings are not applied to an answer with a format: it ends when whole",)
        notes = (output_format.notes + (stop_note if settings.stop else ())) if output_format is not None else ()
        return AnswerRequest(
            messages=tuple(messages),
            settings=settings,
            output_format=output_format,
            members=tuple(members),
            prompts=prompts,
            start=start,
            weights_version=self.runner.weights_version,
            prefix=prefix,
            notes=notes,
            think=think_plan,
            asked=tuple(asked),
            cells=plan.cells if plan is not None else longest + settings.max_tokens + round_cells(settings, drafters),
            calibrator=confidence_calibrator(members, settings.confidence_check),
            reserve=self.reserve[0] if self.reserve and settings.escalate_below > 0 and among is None else None,
            options=plan,
            prediction=ask.prediction,
        )

    def stream(self, prompt: Ask | Prompt | AnswerRequest, **options: Any) -> AnswerStream:
        """Answer ``prompt`` (a string, a conversation, an ``Ask``, or a request from
        ``prepare``): iterate the returned stream for a StartEvent, a RoundEvent per round and a
        FinalEvent. ``options`` are the ask's, as keywords: ``models`` picks which loaded models
        take part (default: all); ``[ensemble]`` settings for this answer; an answer a program
        can parse: ``schema`` (a JSON Schema dict or text, or a pydantic model class),
        ``json=True`` (any JSON object), ``grammar`` (Lark or GBNF) or ``regex``; or ``tools``
        (JSON-Schema function specs or Python functions; ``tool_choice``,
        ``parallel_tool_calls`` as OpenAI's); ``think``. Its final event then carries ``parsed``
        (for tools a ``ToolReply``: calls, or a message). A conversation may hold earlier tool
        calls (``tool_calls`` on assistant messages) and results (``role: "tool"``)."""
        if isinstance(prompt, AnswerRequest):
            if options:
                raise TypeError("stream(request) takes no options: they are in the request")
            return AnswerStream(self.runner, prompt)
        return AnswerStream(self.runner, self.prepare(prompt, **options))

    def check_options(self, ask: Ask) -> None:
        """What ``prepare`` checks of an ask's options alone, for a request that asks for no
        answer (Ollama's load request): a bad value is a ``SpecemError``."""
        self.prepare(dataclasses.replace(ask, prompt="?"))

    def answers(
        self,
        items: Iterable[Any],
        *,
        ordered: bool = False,
        started: Callable[[int, AnswerStream], None] | None = None,
        **options: Any,
    ) -> Iterator[Answered]:
        """Answer many prompts, up to ``parallel`` at once (the load setting): yields an
        ``Answered`` (``index``, ``final``, or ``error``) for each as it finishes (``ordered``: in
        the order given). An item is a prompt, a conversation, a request from ``prepare``, or a
        dict of ``prepare``'s keywords with its ``prompt`` (its own schema, tools, settings);
        ``options`` apply to every prompt and dict item (an ``Ask`` or a request is taken as it
        is). A bad item is handed back with its error and the
        others go on; leaving the loop early cancels the answers still running.
        ``started(index, stream)`` is told of each answer as it starts (``stream.log_to(record)``
        records it in the history)."""
        return answer_many(items, start_for(self, options), self.runner.parallel, ordered, started)

    def generate(self, prompt: Prompt, **overrides: object) -> FinalEvent:
        """Answer a prompt; return the final record."""
        return self.stream(prompt, **overrides).final()

    def chat(self, messages: list[Message] | list[dict[str, str]], **overrides: object) -> FinalEvent:
        """Answer the last user message of a conversation; each model renders the whole
        history with its own template."""
        return self.stream(messages, **overrides).final()

    def _select(self, names: list[str] | None) -> list[Member]:
        if self.runner.closed:
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


def _accepts(output_format: OutputFormat | None, text: str) -> bool:
    """Whether ``text`` may start an answer of this format."""
    return output_format is None or FormatMatcher(output_format).accepts(text, False)
