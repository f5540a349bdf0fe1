"""An answer chosen from options, in one step (issue 56): every member scores every option both
ways (``options.py``), in one batched pass per prompt, and the weighted mix of their corrected
beliefs picks the answer. It streams as any answer does: a ``StartEvent``, one ``RoundEvent``
whose candidates are the options (each source's summed log-probability in ``scores``, its
corrected belief in ``shares``, the mix in ``combined``), and a ``FinalEvent`` whose confidence
is the mix's probability of the option it gave.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from specem_local.backend.protocol import MemberLost, StepAbandoned
from specem_local.engine import options as opt
from specem_local.engine.formats import OutputFormat
from specem_local.engine.member import Member, Scored
from specem_local.engine.phases import RunEach
from specem_local.engine.prompting import Message
from specem_local.engine.request import AnswerRequest, PromptTooLong
from specem_local.engine.task_weights import DEFAULT_TASK, task_weights
from specem_local.errors import NoMemberLeft
from specem_local.events import Candidate, Event, FinalEvent, FinishReason, RoundEvent, StartEvent, TokenLogprob
from specem_local.settings import EnsembleSettings

CONFIDENCE_FROM = "the weighted mix of the members' beliefs over the options"


@dataclass(frozen=True)
class OptionPlan:
    """How an answer among options is scored: the options, each member's plain-text prompt
    (the scored way), and the task's weights and priors by source (``options.source``)."""

    options: opt.Options
    plain: dict[str, tuple[int, ...]]  # member -> the scored way's prompt tokens
    weights: dict[str, float]
    priors: dict[str, np.ndarray] = field(default_factory=dict)
    task: str = "choices"
    weights_from: str = "uniform: no weights kept for this task"
    fitted_items: int | None = None  # the labelled items the task's weights were fitted on (None: none kept)
    cells: int = 0  # KV cells the scoring may hold in any member: its longer prompt and every option at once


def choice_among(
    output_format: OutputFormat | None, settings: EnsembleSettings, begun: bool, thinks: bool
) -> opt.Options | None:
    """The options an answer is chosen from, when it is a choice: its schema allows a few values,
    ``score_options`` is on, nothing of it is written yet and no thinking was asked for (an answer
    asked to think first is thought through, then drafted under the format, as before)."""
    if output_format is None or not settings.score_options or begun or thinks:
        return None
    return opt.options_in(output_format.schema)  # None for a format that is not a schema


def option_plan(
    options: opt.Options,
    members: list[Member],
    asked: list[Message],
    settings: EnsembleSettings,
    prompts: dict[str, tuple[int, ...]],
) -> OptionPlan:
    """How these members score these options: each one's plain-text prompt (the prompts checked to
    leave room for the longest option), the task's weights and priors (``task_weights.py``)."""
    text = opt.plain_text(asked)
    plain = {m.name: tuple(plain_tokens(m, text)) for m in members}
    lengths = {m.name: [len(m.model.tokenize(option)) for option in options.texts] for m in members}
    cells = max(max(len(prompts[name]), len(plain[name])) + sum(each) for name, each in lengths.items())
    for member in members:  # the plain prompt is the shorter: it has neither a template nor the options listed
        room = max(lengths[member.name])
        if len(prompts[member.name]) + room > member.model.n_ctx:
            raise PromptTooLong(
                f"the conversation with the options listed ({len(prompts[member.name])} tokens for {member.name}) "
                f"leaves no room for its longest option in its context of {member.model.n_ctx} tokens; raise n_ctx "
                "in models.toml or shorten the conversation or the options"
            )
    task = settings.task or DEFAULT_TASK
    weights, priors, said, items = source_weights(members, task, options, opt.WAYS)
    return OptionPlan(options, plain, weights, priors, task, said, items, cells)


def source_weights(
    members: list[Member], task: str, options: opt.Options, ways: tuple[str, ...]
) -> tuple[dict[str, float], dict[str, np.ndarray], str, int | None]:
    """The task's weights of these members' sources of these ``ways`` and their priors over the
    options (``task_weights.py``), where they came from in words, and how many labelled items
    they were fitted on (0: kept without labels); every source equally (None) when none are kept."""
    sources = [opt.source(m.name, way) for m in members for way in ways]
    kept = task_weights(members, task)
    weights = {name: kept.weights.get(name, 0.0) for name in sources} if kept is not None else {}
    if kept is None or sum(weights.values()) <= 0:
        return {name: 1.0 / len(sources) for name in sources}, {}, f"uniform: none kept for the task {task!r}", None
    priors = {name: prior for name, prior in kept.priors_for(options).items() if name in weights or name == opt.LABELS}
    return weights, priors, f"{kept.task!r}, fitted on {kept.fitted_on}", kept.items


def plain_tokens(member: Member, text: str) -> list[int]:
    """``text`` as the member reads a plain-text prompt: its BOS token first when it adds one."""
    model = member.model
    return ([model.bos_token] if model.adds_bos and model.bos_token >= 0 else []) + model.tokenize(text)


def option_log_probabilities(
    member: Member, prompt: tuple[int, ...], continuations: tuple[str, ...], reuse: bool
) -> tuple[list[float], list[int]]:
    """Each continuation's summed token log-probability after ``prompt``, and its length in
    tokens, in one batched pass (``Member.score``: each in its own sequence on the prompt's
    shared cells); ``reuse``: the ``reuse_prompt`` setting (``Member.start``)."""
    member.start(list(prompt), reuse)
    summed, lengths, _ = scored_here(member, continuations)
    return summed, lengths


def scored_here(member: Member, continuations: tuple[str, ...]) -> tuple[list[float], list[int], Scored]:
    """Each continuation's summed token log-probability after what the member holds now, its
    length in tokens, and the ``Scored`` a commit of one of them adopts."""
    scored = member.score(dict(enumerate(continuations)), "logprob")
    lengths = [len(scored.candidate_tokens[i]) for i in range(len(continuations))]
    return [scored.scores[i] * lengths[i] for i in range(len(continuations))], lengths, scored


def option_logprobs(chosen: OptionVote, top: int) -> tuple[TokenLogprob, ...]:
    """An answer among options as ``logprobs.content`` has it, when asked (``top`` 0 or more):
    one entry, the option chosen, whole (it is scored whole, not written token by token), with
    the log of its probability in the mix, and the ``top`` likeliest options beside it."""
    if top < 0:
        return ()

    def entry(candidate: Candidate) -> tuple[str, float, tuple[int, ...]]:
        return candidate.text, math.log(max(candidate.combined or 0.0, opt.FLOOR)), tuple(candidate.text.encode())

    ranked = sorted(chosen.candidates, key=lambda candidate: -(candidate.combined or 0.0))[:top]
    text, logprob, raw = entry(chosen.candidates[chosen.best])
    return (TokenLogprob(text, logprob, raw, tuple(entry(candidate) for candidate in ranked)),)


@dataclass(frozen=True)
class OptionVote:
    """The options weighed: the chosen one (``best``, and its probability in the mix), the member
    whose sources argued most for it, each option as a ``Candidate``, and the round's evidence."""

    best: int
    confidence: float
    author: str
    candidates: tuple[Candidate, ...]
    runner_up: int
    ranked_first_by: tuple[str, ...]
    margin: float
    agreement: float


def option_vote(
    texts: tuple[str, ...], scores: dict[str, list[float]], priors: dict[str, np.ndarray], weights: dict[str, float]
) -> OptionVote:
    """The weighted mix of the sources' corrected beliefs (``scores``: each source's summed
    log-probability of each option) and what it chose."""
    beliefs = opt.believed(scores, priors)
    mix = opt.mixed(beliefs, weights)
    best = int(np.argmax(mix))

    def champion(option: int) -> str:  # the member whose sources argued most for it
        return opt.split_source(max(beliefs, key=lambda name: weights.get(name, 0.0) * beliefs[name][option]))[0]

    candidates = tuple(
        Candidate(
            model=champion(i),
            text=text,
            ended=True,
            scores={name: float(s[i]) for name, s in scores.items()},
            shares={name: float(b[i]) for name, b in beliefs.items()},
            combined=float(mix[i]),
            option=True,
        )
        for i, text in enumerate(texts)
    )
    ranked = tuple(opt.split_source(n)[0] for n, b in beliefs.items() if int(np.argmax(b)) == best)
    runner_up = int(np.argmax(np.where(np.arange(len(mix)) == best, -np.inf, mix)))  # on a tie, the other one
    return OptionVote(
        best,
        float(mix[best]),
        champion(best),
        candidates,
        runner_up,
        tuple(dict.fromkeys(ranked)),
        float(mix[best] - mix[runner_up]),
        len(ranked) / len(beliefs),
    )


class OptionsLoop:
    """One answer among options: the ``RoundLoop``'s face (``run``, ``final_event``,
    ``members``, ``start``), one scoring step instead of rounds."""

    def __init__(
        self,
        request: AnswerRequest,
        members: list[Member],
        cancel: threading.Event,
        run_each: RunEach,
        absent: dict[str, str] | None = None,
    ) -> None:
        assert request.options is not None
        self.request, self.plan = request, request.options
        self.members, self.start = members, request.start
        self.cancel, self._run_each = cancel, run_each
        self.absent = absent or {}
        self.lost: dict[str, str] = {}
        self.started = time.perf_counter()
        self.chosen: RoundEvent | None = None
        self.confidence: float | None = None
        self.lengths: dict[str, list[int]] = {}  # member -> each option's length in its tokens (the asked way)
        self.member_weights = self._member_weights()

    def _member_weights(self) -> dict[str, float]:
        """Each member's weight in the mix: the sum of its sources'."""
        total = sum(self.plan.weights.values()) or 1.0
        weights = {m.name: 0.0 for m in self.members}
        for name, weight in self.plan.weights.items():
            member, _ = opt.split_source(name)
            if member in weights:
                weights[member] += weight / total
        return weights

    def run(self) -> Iterator[Event]:
        yield StartEvent(
            models=tuple(m.name for m in self.members),
            drafters=(),
            weights=self.member_weights,
            prompt_tokens={m.name: len(self.request.prompts[m.name]) for m in self.members},
            plain_generation=len(self.members) == 1,
            weights_from="uniform" if self.plan.fitted_items is None else "task",
            calibrated_items=self.plan.fitted_items or 0,
            absent=self.absent,
            notes=(
                *self.request.notes,
                f"every member scored every option (task {self.plan.task!r}; weights: {self.plan.weights_from})",
            ),
        )
        finish: FinishReason = "cancelled"
        try:
            if not self.cancel.is_set():
                scores = self._scores()
                if not self.cancel.is_set():
                    self.chosen = self._event(scores)
                    finish = "eos"
                    yield self.chosen
        except StepAbandoned:
            finish = "cancelled"
        yield self.final_event(finish)

    def _scores(self) -> dict[str, list[float]]:
        """Each source's summed log-probability of each option; a member lost is left out."""
        texts, words = self.plan.options.texts, tuple(" " + word for word in self.plan.options.words)
        reuse = self.request.settings.reuse_prompt

        def both(member: Member) -> dict[str, list[float]]:
            try:
                asked, self.lengths[member.name] = option_log_probabilities(
                    member, self.request.prompts[member.name], texts, reuse
                )
                plain, _ = option_log_probabilities(member, self.plan.plain[member.name], words, reuse)
            except MemberLost as lost:
                self.lost[member.name] = str(lost)
                return {}
            return {opt.source(member.name, "asked"): asked, opt.source(member.name, "scored"): plain}

        found: dict[str, list[float]] = {}
        for part in self._run_each(self.request.settings, both, list(self.members)):
            found.update(part)
        if not found:
            said = "; ".join(f"{name}: {why}" for name, why in self.lost.items())
            raise NoMemberLeft(f"the answer cannot go on: every member was lost ({said})")
        return found

    def _event(self, scores: dict[str, list[float]]) -> RoundEvent:
        plan = self.plan
        chosen = option_vote(plan.options.texts, scores, plan.priors, plan.weights)
        self.confidence = chosen.confidence
        return RoundEvent(
            index=1,
            text=plan.options.texts[chosen.best],
            author=chosen.author,
            decision="options",
            candidates=chosen.candidates,
            weights=self.member_weights,
            drafters=(),
            draft_seconds={},
            draft_tokens={},
            verify_seconds={m.name: 0.0 for m in self.members},
            seconds=time.perf_counter() - self.started,
            answer_tokens=self._tokens(chosen.author, chosen.best),
            runner_up=plan.options.texts[chosen.runner_up],
            ranked_first_by=chosen.ranked_first_by,
            lost=dict(self.lost),
            sure=chosen.confidence,
            margin=chosen.margin,
            agreement=chosen.agreement,
            logprobs=option_logprobs(chosen, self.request.settings.logprobs),
        )

    def _tokens(self, member: str, option: int) -> int:
        lengths = self.lengths.get(member)
        return lengths[option] if lengths else 1

    def final_event(self, finish: FinishReason) -> FinalEvent:
        chosen = self.chosen
        unsure = self.confidence is not None and self.confidence < self.request.settings.abstain_below
        return FinalEvent(
            text=chosen.text if chosen is not None and finish == "eos" else "",
            finish_reason=finish,
            rounds=1 if chosen is not None else 0,
            tokens=chosen.answer_tokens if chosen is not None else 0,
            seconds=time.perf_counter() - self.started,
            first_segment_seconds=chosen.seconds if chosen is not None else None,
            wins={chosen.author: 1} if chosen is not None else {},
            drafters_per_round=0.0,
            weights=self.member_weights,
            plain_generation=len(self.members) == 1,
            lost=dict(self.lost),
            confidence=self.confidence if finish == "eos" else None,
            confidence_from=CONFIDENCE_FROM if finish == "eos" else "",
            unsure=unsure and finish == "eos",
        )
