"""The SpecEM ensemble loop: draft, verify in-line, vote, broadcast, learn weights.

``Ensemble`` loads the configured models and yields one ``RoundEvent`` per round and a
``FinalEvent`` at the end. It knows nothing about front ends: the CLI, the TUI and scripts
consume the same stream.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from specem_local import feedback
from specem_local.backend import ContextFull, LlamaModel
from specem_local.config import PLAIN_TEMPLATE, Config, EnsembleSettings, ModelSpec, load_config, with_overrides
from specem_local.errors import SpecemError
from specem_local.events import Candidate, Event, FinalEvent, RoundEvent
from specem_local.member import Draft, Member, Scored
from specem_local.memory import available_memory_bytes, memory_warning
from specem_local.prompting import Message, PromptFormat, as_messages
from specem_local.sampling import make_sampler
from specem_local.sources import model_file
from specem_local.text import copied_fraction, find_stop

ProgressCallback = Callable[[str, float], None]


@dataclass(frozen=True)
class LoadFailure:
    model: str
    error: str


def prompt_format_for(spec: ModelSpec, model: LlamaModel) -> PromptFormat:
    """The model's own template, the models.toml override, or the plain format."""
    override = spec.chat_template
    if override == PLAIN_TEMPLATE:
        template = None
    else:
        template = override or model.chat_template()
    return PromptFormat(template, model.special_text(model.bos_token), model.special_text(model.eos_token))


class Ensemble:
    """Several llama.cpp models answering together. Use as a context manager to free them.

    >>> with Ensemble() as ensemble:               # the config from models.toml lookup
    ...     print(ensemble.generate("2+2?").text)
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        progress: ProgressCallback | None = None,
        skip_failed: bool = False,
        **overrides: object,
    ) -> None:
        self.config = config if config is not None else load_config()
        self.settings = with_overrides(self.config.ensemble, **overrides)
        self.load_failures: list[LoadFailure] = []
        self.warnings: list[str] = []
        self.members: list[Member] = []
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        paths = {}
        for spec in self.config.models:
            try:
                paths[spec.name] = model_file(spec, self.config)
            except SpecemError as error:
                if not skip_failed:
                    raise
                self.load_failures.append(LoadFailure(spec.name, str(error)))
        warning = memory_warning({name: path.stat().st_size for name, path in paths.items()}, available_memory_bytes())
        if warning:
            self.warnings.append(warning)
            warnings.warn(warning, stacklevel=2)
        n_seq_max = max(len(paths), 4) + 1  # seq 0 + one per candidate (room for 4 in benchmarks)
        try:
            for spec in self.config.models:
                if spec.name not in paths:
                    continue
                try:
                    self.members.append(self._load(spec, paths[spec.name], n_seq_max, progress))
                except SpecemError as error:
                    if not skip_failed:
                        raise
                    self.load_failures.append(LoadFailure(spec.name, str(error)))
            if not self.members:
                reasons = "; ".join(f"{f.model}: {f.error}" for f in self.load_failures)
                raise SpecemError(f"no model could be loaded ({reasons})")
            if not any(m.spec.drafts for m in self.members) or not any(m.spec.verifies for m in self.members):
                raise SpecemError("the models that loaded cannot both draft and verify; check the roles")
        except BaseException:
            self.close()
            raise
        self._executor = ThreadPoolExecutor(max_workers=len(self.members), thread_name_prefix="specem")

    def _load(self, spec: ModelSpec, path, n_seq_max: int, progress: ProgressCallback | None) -> Member:
        def report(fraction: float) -> None:
            if progress is not None:
                progress(spec.name, fraction)

        model = LlamaModel(
            path,
            n_ctx=spec.n_ctx,
            n_seq_max=n_seq_max,
            n_threads=self.settings.threads_per_model,
            n_gpu_layers=spec.n_gpu_layers,
            progress=report,
        )
        return Member(spec, model, prompt_format_for(spec, model))

    # -- lifetime ---------------------------------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        return [member.name for member in self.members]

    @property
    def plain_generation(self) -> bool:
        """One model: plain generation, no ensembling."""
        return len(self.members) == 1

    def close(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=True)
            self._executor = None
        for member in self.members:
            member.model.close()
        self.members = []

    def __enter__(self) -> Ensemble:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Stop the answer in progress (safe from any thread); it ends with "cancelled"."""
        self._cancel.set()

    # -- public API --------------------------------------------------------------------------------
    def stream(
        self,
        prompt: str | list[Message] | list[dict[str, str]],
        *,
        models: list[str] | None = None,
        **overrides: object,
    ) -> Iterator[Event]:
        """Answer ``prompt`` (a string or a conversation); yield a RoundEvent per round, then a
        FinalEvent. ``models`` picks which loaded models take part (default: all);
        ``overrides`` are ``[ensemble]`` settings for this answer only."""
        settings = with_overrides(self.settings, **overrides)
        messages = as_messages(prompt, settings.system_prompt)
        with self._lock:
            if not self.members:
                raise SpecemError("this ensemble has been closed")
            members = self._select(models)
            self._cancel.clear()
            yield from _Answer(self, members, settings, messages).run()

    def _select(self, names: list[str] | None) -> list[Member]:
        if names is None:
            return self.members
        unknown = sorted(set(names) - set(self.model_names))
        if unknown:
            raise SpecemError(f"unknown model {unknown[0]!r}; loaded models: {', '.join(self.model_names)}")
        chosen = [m for m in self.members if m.name in names]
        if not any(m.spec.drafts for m in chosen) or not any(m.spec.verifies for m in chosen):
            raise SpecemError("the chosen models cannot both draft and verify; pick at least one that does each")
        return chosen

    def generate(self, prompt: str, **overrides: object) -> FinalEvent:
        """Answer a single prompt; return the final record."""
        return _last(self.stream(prompt, **overrides))

    def chat(self, messages: list[Message] | list[dict[str, str]], **overrides: object) -> FinalEvent:
        """Answer the last user message of a conversation; each model renders the whole
        history with its own template."""
        return _last(self.stream(messages, **overrides))

    def _map(self, settings: EnsembleSettings, function: Callable, items: list) -> list:
        if settings.drafting == "threads" and len(items) > 1:
            return list(self._executor.map(function, items))
        return [function(item) for item in items]


def _last(events: Iterator[Event]) -> FinalEvent:
    final = None
    for event in events:
        final = event
    assert isinstance(final, FinalEvent)
    return final


@dataclass(frozen=True)
class _Vote:
    """The outcome of one round's selection."""

    winner: int
    decision: str  # "vote", "fast-finish" or "only-candidate"
    scores: np.ndarray  # raw scores[verifier, candidate] (NaN: not scored)
    normalised: np.ndarray
    combined: np.ndarray | None
    scored: dict[int, Scored]
    copied: np.ndarray | None = None  # per candidate: share of words repeating the answer (loop_guard)


class _Answer:
    """The state of one answer: weights, the committed text, counters."""

    def __init__(
        self, ensemble: Ensemble, members: list[Member], settings: EnsembleSettings, messages: list[Message]
    ) -> None:
        self.ensemble = ensemble
        self.settings = settings
        self.messages = messages
        self.members = members
        self.names = [m.name for m in self.members]
        size = len(self.members)
        self.verifies = np.array([m.spec.verifies for m in self.members], dtype=bool)
        sizes = np.array([m.model.n_params for m in self.members], dtype=np.float64)
        self.weights = feedback.initial_weights(self.verifies, sizes, settings.weight_prior)
        self.active_drafters = [i for i, m in enumerate(self.members) if m.spec.drafts]
        self.share_totals = np.zeros(size)
        self.samplers = [make_sampler(settings, np.random.default_rng([settings.seed, index])) for index in range(size)]
        self.wins = dict.fromkeys(self.names, 0)
        self.text = ""
        self.tokens = 0
        self.rounds = 0
        self.drafter_count = 0

    def run(self) -> Iterator[Event]:
        started = time.perf_counter()
        first_segment: float | None = None
        cancel = self.ensemble._cancel
        for member in self.members:
            tokens = member.prompt_format.tokens(
                self.messages, member.model, bos_token=member.model.bos_token if member.model.adds_bos else None
            )
            if len(tokens) + self.settings.segment_tokens >= member.model.n_ctx:
                raise SpecemError(
                    f"the conversation ({len(tokens)} tokens for {member.name}) does not fit its context "
                    f"of {member.model.n_ctx}; raise n_ctx in models.toml or start a new chat"
                )
            member.start(tokens)
        finish = ""
        while not finish:
            if cancel.is_set():
                finish = "cancelled"
                break
            if self.tokens >= self.settings.max_tokens:
                finish = "length"
                break
            try:
                event, finish = self._round()
            except ContextFull:
                finish = "context"
                break
            if event is None:
                break
            if first_segment is None:
                first_segment = time.perf_counter() - started
            yield event
        yield FinalEvent(
            text=self.text,
            finish_reason=finish,
            rounds=self.rounds,
            tokens=self.tokens,
            seconds=time.perf_counter() - started,
            first_segment_seconds=first_segment,
            wins=self.wins,
            models_per_round=self.drafter_count / self.rounds if self.rounds else 0.0,
            weights=self._weights_dict(),
            plain_generation=len(self.members) == 1,
        )

    def _weights_dict(self) -> dict[str, float]:
        return {name: float(w) for name, w, verifies in zip(self.names, self.weights, self.verifies) if verifies}

    def _round(self) -> tuple[RoundEvent | None, str]:
        """One round: draft, vote, learn, broadcast. Returns the event (None if nothing was
        appended) and a finish reason ("" to go on)."""
        settings = self.settings
        round_started = time.perf_counter()
        cancel = self.ensemble._cancel
        left = settings.max_tokens - self.tokens
        budget = min(settings.segment_tokens, left)
        drafters = [i for i in self.active_drafters if self.members[i].room > budget + 8]
        if not drafters:
            return None, "context"

        def draft(i: int) -> Draft:
            return self.members[i].draft(budget, self.samplers[i], cancel, at_most=left, ignore_eos=settings.ignore_eos)

        drafts_list = self.ensemble._map(settings, draft, drafters)
        if cancel.is_set():
            return None, "cancelled"
        drafts: dict[int, Draft] = {i: d for i, d in zip(drafters, drafts_list) if d.text}
        if not drafts:
            return None, "eos" if any(d.ended for d in drafts_list) else "empty"
        self.rounds += 1
        self.drafter_count += len(drafters)

        groups = feedback.merge_identical({i: d.text for i, d in drafts.items()}, self.weights)
        vote = self._vote(drafts, groups)
        if vote.decision == "vote":
            self._learn(vote, groups)
        winner = vote.winner
        winning = drafts[winner]
        self.tokens += self._commit(winner, winning, drafts, vote.scored)
        self.wins[self.names[winner]] += 1
        segment, finish = self._append(winning)
        event = RoundEvent(
            index=self.rounds,
            text=segment,
            author=self.names[winner],
            decision=vote.decision,
            candidates=self._candidates(drafts, groups, vote),
            weights=self._weights_dict(),
            drafters=tuple(self.names[i] for i in drafters),
            draft_seconds={self.names[i]: d.seconds for i, d in zip(drafters, drafts_list)},
            draft_tokens={self.names[i]: d.sampled for i, d in zip(drafters, drafts_list)},
            verify_seconds={self.names[v]: s.seconds for v, s in vote.scored.items()},
            seconds=time.perf_counter() - round_started,
            answer_tokens=self.tokens,
        )
        return event, finish

    def _vote(self, drafts: dict[int, Draft], groups: dict[int, list[int]]) -> _Vote:
        """Pick the winning candidate: fast finish, the only candidate, or the weighted vote."""
        size = len(self.members)
        scores = np.full((size, size), np.nan)
        enders = [i for i in groups if drafts[i].ended]
        if self.settings.fast_finish and enders:
            return _Vote(max(enders, key=lambda i: self.weights[i]), "fast-finish", scores, scores, None, {})
        if len(groups) == 1:
            return _Vote(next(iter(groups)), "only-candidate", scores, scores, None, {})
        scored = self._verify(drafts, groups, scores)
        unit = self.settings.segment_tokens if self.settings.normalise == "segment" else 1
        normalised = feedback.normalise(scores, self.settings.scoring, unit)
        votes = normalised if self.settings.self_vote else feedback.mask_self_judgements(normalised, groups)
        pool = feedback.combine_log if self.settings.pooling == "log" else feedback.combine
        combined = pool(votes, self.weights)
        copied = None
        if self.settings.loop_guard:
            copied = np.zeros(size)
            for i in groups:
                copied[i] = copied_fraction(self.text, drafts[i].text)
        winner = feedback.pick_winner(list(groups), combined, copied)
        return _Vote(winner, "vote", scores, normalised, combined, scored, copied)

    def _learn(self, vote: _Vote, groups: dict[int, list[int]]) -> None:
        """Hedge update of the verifier weights, and model exit."""
        settings = self.settings
        candidates = list(groups)
        total = float(np.nansum(vote.combined[candidates]))
        for representative, authors in groups.items():
            self.share_totals[authors] += vote.combined[representative] / total if total > 0 else 0.0
        if settings.feedback:
            judges = self.weights / self.weights[self.verifies].mean() if settings.weighted_judges else None
            reward = feedback.rewards(vote.normalised, groups, judges)
            eta = feedback.learning_rate(settings.learning_rate, len(self.members), self.rounds)
            updated = np.where(self.verifies, feedback.hedge_update(self.weights, reward, eta), 0.0)
            self.weights = updated / updated.sum()
        if settings.model_exit:
            leaving = feedback.exiting_drafters(
                self.share_totals, self.active_drafters, self.rounds, settings.exit_warmup_rounds, settings.exit_share
            )
            self.active_drafters = [i for i in self.active_drafters if i not in leaving]

    def _append(self, winning: Draft) -> tuple[str, str]:
        """Add the winning text to the answer; apply stop strings. Returns the segment as
        shown (cut at a stop string) and the finish reason."""
        previous_length = len(self.text)
        self.text += winning.text
        if self.settings.stop:
            longest = max(len(stop) for stop in self.settings.stop)
            index = find_stop(self.text, self.settings.stop, previous_length - longest)
            if index is not None:
                self.text = self.text[:index]
                return self.text[previous_length:], "stop"
        return winning.text, "eos" if winning.ended else ""

    def _candidates(self, drafts: dict[int, Draft], groups: dict[int, list[int]], vote: _Vote) -> tuple[Candidate, ...]:
        """Every drafter's candidate for the event; merged duplicates share their scores."""
        representative_of = {author: rep for rep, authors in groups.items() for author in authors}

        def column(matrix: np.ndarray, c: int) -> dict[str, float]:
            return {self.names[v]: float(matrix[v, c]) for v in range(len(self.members)) if not np.isnan(matrix[v, c])}

        out = []
        for i, draft in drafts.items():
            rep = representative_of[i]
            out.append(
                Candidate(
                    model=self.names[i],
                    text=draft.text,
                    ended=draft.ended,
                    scores=column(vote.scores, rep),
                    shares=column(vote.normalised, rep) if vote.decision == "vote" else {},
                    combined=float(vote.combined[rep]) if vote.combined is not None else None,
                    same_as=self.names[rep] if rep != i else None,
                    copied=float(vote.copied[rep]) if vote.copied is not None else None,
                )
            )
        return tuple(out)

    def _verify(self, drafts: dict[int, Draft], groups: dict[int, list[int]], scores: np.ndarray) -> dict[int, Scored]:
        """Every verifier scores every distinct candidate: one it drafted itself from its
        drafting logits, the others in one in-line batch. Fills ``scores[verifier, candidate]``
        (candidate = the representative's index)."""
        settings = self.settings
        verifiers = [int(v) for v in np.flatnonzero(self.verifies)]
        ending = frozenset(rep for rep in groups if drafts[rep].ended) if settings.verify_end else frozenset()

        def verify(v: int) -> tuple[int, Scored]:
            member = self.members[v]
            own = drafts.get(v)
            mine = next((rep for rep, authors in groups.items() if v in authors and own.aligned), None)
            others = {rep: drafts[rep].text for rep in groups if rep != mine}
            result = member.score(others, settings.scoring, ending)
            if mine is not None:
                result.scores[mine] = member.own_score(own, settings.scoring, with_end=mine in ending)
            return v, result

        results = dict(self.ensemble._map(settings, verify, verifiers))
        for v, result in results.items():
            for i, value in result.scores.items():
                scores[v, i] = value
        return results

    def _commit(self, winner: int, winning: Draft, drafts: dict[int, Draft], scored: dict[int, Scored]) -> int:
        """Broadcast the winner to every model; return its length in the author's tokens."""

        def commit(index: int) -> int:
            own = drafts.get(index)
            own = own if own is not None and own.text == winning.text else None
            return self.members[index].commit(winner, winning.text, own, scored.get(index))

        added = self.ensemble._map(self.settings, commit, list(range(len(self.members))))
        return added[winner]
