"""One answer's round loop: draft, verify in-line, vote, learn the weights, broadcast.

``Answer.run()`` yields a ``StartEvent``, one ``RoundEvent`` per round and a ``FinalEvent``.
The engine (``engine.py``) owns the threads and lifetimes around it; this module owns what a
round does, through the members (``member.py``), the vote (``vote.py``) and the feedback rule
(``feedback.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from specem_local.backend.protocol import ContextFull, MemberLost, StepAbandoned
from specem_local.engine import feedback, thinking, vote
from specem_local.engine.drafting import Drafting, round_candidates
from specem_local.engine.formats import FormatMatcher, member_matcher
from specem_local.engine.learned import StartingWeights
from specem_local.engine.member import Draft, Member, Scored
from specem_local.engine.request import AnswerRequest, PromptTooLong, prompt_tokens
from specem_local.engine.roster import Roster
from specem_local.engine.sampling import Sampler
from specem_local.engine.segments import copied_fraction, find_stop
from specem_local.engine.verifying import verify
from specem_local.errors import NoMemberLeft
from specem_local.events import Event, FinalEvent, FinishReason, Phase, RoundEvent, StartEvent, Switch
from specem_local.settings import EnsembleSettings

RunEach = Callable[[EnsembleSettings, Callable, list], list]  # AnswerRunner.run_each: a function over items


def weights_dict(members: list[Member], weights: np.ndarray) -> dict[str, float]:
    return {m.name: float(w) for m, w in zip(members, weights) if m.spec.verifies}


class RoundLoop:
    """The state of one answer: weights, the committed text, counters."""

    def __init__(
        self,
        request: AnswerRequest,
        members: list[Member],
        start: StartingWeights,
        cancel: threading.Event,
        run_each: RunEach,
        absent: dict[str, str] | None = None,
    ) -> None:
        settings, constraint = request.settings, request.output_format
        self.request = request
        self.settings = settings
        self.absent = absent or {}  # lost members that could not be brought back: name -> why
        self.constraint = constraint
        # An answer with a format may think first (thinking.py): no matcher until the switch.
        self.phase: Phase = "reasoning" if request.think.budget else "answer"
        self.reasoning, self.reasoning_tokens = "", 0
        self.switched: Switch | None = None
        self.format = FormatMatcher(constraint) if constraint is not None and self.phase == "answer" else None
        # The start of an answer to continue is part of the format's text: the reply is the rest.
        self.prefix = request.prefix
        if self.format is not None and self.prefix:
            self.format.commit(self.prefix)
        self.start = start
        self.members = members
        self.cancel = cancel
        self._run_each = run_each
        self.names = [m.name for m in self.members]
        self.weights = start.weights
        self.roster = Roster(members, settings, self.weights, settings.model_exit and start.origin != "prior")
        self.lost_since: dict[str, str] = {}  # members lost since the last event, for the next one
        self.share_totals = np.zeros(len(members))
        self.drafting = Drafting(len(members), settings, cancel)
        self.rule = vote.VoteRule(
            settings.scoring,
            settings.segment_tokens,
            settings.normalise,
            settings.self_vote,
            settings.pooling,
            settings.loop_guard,
            settings.contrast,
        )
        self.wins = dict.fromkeys(self.names, 0)
        self.text = ""
        self.tokens = 0
        self.rounds = 0  # rounds drafted and voted on
        self.forced_rounds = 0  # rounds of text the constraint forced (no model drafted them)
        self.drafter_count = 0
        self.confident_rounds = 0
        self.drafted_tokens = 0
        self.contrast_changed = 0
        self.started = time.perf_counter()  # set again when the answer runs
        self.first_segment: float | None = None

    def run_each(self, function: Callable, items: list, *, losses_raise: bool = True) -> list:
        """``function`` over members' indices (or items that hold them). Every item runs even
        when a member is lost in one: ``MemberLost`` is raised after all of them, so no member
        is left half way through a step that the round then repeats (``losses_raise=False``:
        the lost member's result is None, and the others' stand)."""
        lost: list[MemberLost] = []

        def guarded(item: object) -> object:
            try:
                return function(item)
            except MemberLost as error:
                lost.append(error)
                return None

        results = self._run_each(self.settings, guarded, items)
        if lost and losses_raise:
            raise lost[0]
        if lost:
            self._take_losses()
        return results

    @property
    def contrast_read(self) -> int:
        contrast = self.roster.contrast
        return contrast.read_tokens if contrast is not None else 0

    def _take_losses(self) -> None:
        """Take the members lost since the last look out of the answer (``SpecemError`` when
        no member is left that can draft, or none that can verify)."""
        found = self.roster.newly_lost()
        if not found:
            raise RuntimeError("a member already out of the answer was asked for a step (a bug in specem)")
        self.lost_since.update({self.names[i]: reason for i, reason in found.items()})
        self.weights = self.roster.weights_without_lost(self.weights)
        if not self.roster.can_answer:
            said = "; ".join(f"{self.names[i]}: {reason}" for i, reason in self.roster.lost.items())
            raise NoMemberLeft(f"the answer cannot go on: every member that could {self._missing} was lost ({said})")

    @property
    def _missing(self) -> str:
        return "verify" if self.roster.drafters else "draft"

    def run(self) -> Iterator[Event]:
        self.started = time.perf_counter()
        prompts = [list(self.request.prompts[member.name]) for member in self.members]
        yield StartEvent(
            models=tuple(self.names),
            drafters=tuple(self.names[i] for i in self.roster.drafters),
            weights=weights_dict(self.members, self.weights),
            prompt_tokens={m.name: len(tokens) for m, tokens in zip(self.members, prompts)},
            plain_generation=len(self.members) == 1,
            weights_from=self.start.origin,
            learned_answers=self.start.answers,
            calibrated_items=self.start.items,
            choices=self.start.choices,
            absent=self.absent,
            notes=self.request.notes,
        )
        finish: FinishReason | None = None
        try:
            if not self.cancel.is_set():
                try:
                    reuse = self.settings.reuse_prompt
                    self.run_each(lambda i: self.members[i].start(prompts[i], reuse), self.roster.following)
                except MemberLost:
                    self._take_losses()
            if self.phase == "answer":
                self._give_matchers()
            while not finish:
                if self.cancel.is_set():
                    finish = "cancelled"
                    break
                try:
                    if self.phase == "reasoning" and self.tokens >= self.request.think.budget:
                        self._switch("budget")
                        continue
                    if self.tokens >= self.settings.max_tokens:
                        finish = "length"
                        break
                    event, finish = self._round()
                    if self.phase == "reasoning" and finish in ("eos", "empty"):  # the members ended their thinking
                        finish = None
                        self._switch("eos")
                except ContextFull:  # a round, or the format's phase after the reasoning, found no room
                    finish = "context"
                    break
                except MemberLost:  # the round again without it: the others' tails are dropped as it drafts
                    self._take_losses()
                    continue
                if event is None and finish is None:
                    continue
                if event is None:
                    break
                if self.first_segment is None:
                    self.first_segment = time.perf_counter() - self.started
                yield event
        except StepAbandoned:  # a cancel or Ctrl-C stopped waiting for a remote step
            finish = "cancelled"
        finally:
            for member in self.members:
                member.matcher = None
        yield self.final_event(finish if finish is not None else "empty")  # a round without one: nothing appended

    def _switch(self, why: Switch) -> None:
        """The reasoning ends (the members ended it, or its budget ran out): the format's phase
        begins, after a bridge every following member reads (``think_bridge``: a new short user
        turn asking for the format, or text in the same assistant turn)."""
        assert self.constraint is not None
        self.reasoning, self.reasoning_tokens, self.switched = self.text, self.tokens, why
        self.text, self.phase = "", "answer"
        following = self.roster.following
        if self.settings.think_bridge == "same-turn":
            bridge = thinking.same_turn_bridge(why)
            self.run_each(lambda i: self.members[i].commit(-1, bridge, None, None), following, losses_raise=False)
        else:
            messages = thinking.answer_messages(list(self.request.asked), self.reasoning, self.constraint, why)
            try:
                drafters, settings = len(self.roster.drafters), self.settings
                prompts = {i: prompt_tokens(self.members[i], messages, settings, drafters, True) for i in following}
            except PromptTooLong as error:  # the reasoning filled a context: it ends there
                raise ContextFull(str(error)) from None
            # A member lost here leaves the answer (the others go on in the format) rather than end it.
            self.run_each(lambda i: self.members[i].start(list(prompts[i]), True), following, losses_raise=False)
        self.format = FormatMatcher(self.constraint)
        self._give_matchers()

    def _give_matchers(self) -> None:
        """Under a constraint, each member drafts with a matcher over its own tokens."""
        if self.constraint is None:
            return
        for member in self.members:
            member.matcher = member_matcher(member.model.grammar_tokenizer(), self.constraint)
            if self.prefix:
                member.matcher.consume_tokens(member.model.tokenize(self.prefix))

    def final_event(self, finish: FinishReason) -> FinalEvent:
        """The answer's final record, as it stands."""
        reasoning = self.reasoning if self.phase == "answer" else self.text  # stopped while it thought: all reasoning
        return FinalEvent(
            text=self.text if self.phase == "answer" else "",
            finish_reason=finish,
            rounds=self.rounds + self.forced_rounds,
            tokens=self.tokens,
            seconds=time.perf_counter() - self.started,
            first_segment_seconds=self.first_segment,
            wins=self.wins,
            drafters_per_round=self.drafter_count / self.rounds if self.rounds else 0.0,
            weights=weights_dict(self.members, self.weights),
            plain_generation=len(self.members) == 1,
            confident_rounds=self.confident_rounds,
            drafted_tokens=self.drafted_tokens + self.contrast_read,
            contrast_changed=self.contrast_changed,
            lost={self.names[i]: reason for i, reason in self.roster.lost.items()},
            reasoning=reasoning,
            reasoning_tokens=self.reasoning_tokens if self.phase == "answer" else self.tokens,
            switched=self.switched,
        )

    def _news(self) -> dict[str, str]:
        """The members lost since the last event (said once, in the next event)."""
        news, self.lost_since = self.lost_since, {}
        return news

    def _round(self) -> tuple[RoundEvent | None, FinishReason | None]:
        """One round: draft, vote, learn, broadcast. Returns the event (None if nothing was
        appended) and a finish reason (None to go on)."""
        settings = self.settings
        round_started = time.perf_counter()
        forced = self.format.forced() if self.format is not None else ""
        if forced:
            return self._forced_round(forced, round_started)
        counts = self.drafting.counts(self.weights, self.roster.drafters)
        # Every verifier holds its own draft and the others' tails in its KV memory at once,
        # so near the end of the context the segments shrink until they fit.
        following = self.roster.following  # as the round starts: model exit may change it by its end
        contrast = self.roster.contrast
        room = min(self.members[i].room for i in following)
        cap = min(settings.max_tokens - self.tokens, (room - 1) // sum(counts.values()))
        if cap < 1:
            return None, "context"
        budget = min(settings.segment_tokens, cap)

        def draft(i: int, sampler: Sampler) -> Draft:
            if contrast is not None and i == contrast.expert:
                return contrast.draft(self.members, self.weights, budget, sampler, self.cancel, cap, settings)
            return self.members[i].draft(budget, sampler, self.cancel, at_most=cap, ignore_eos=settings.ignore_eos)

        round_drafts = self.drafting.draft_round(counts, self.weights, draft, self.run_each)
        if self.cancel.is_set():
            return None, "cancelled"
        drafts, author = round_drafts.written, round_drafts.author
        if self.format is not None:  # a candidate the constraint does not allow can never win
            drafts = {c: d for c, d in drafts.items() if self.format.accepts(d.text, d.ended)}
        if not drafts:
            return None, "eos" if any(d.ended for d in round_drafts.drafts.values()) else "empty"
        drafters = round_drafts.drafters
        self.drafted_tokens += sum(d.sampled for d in round_drafts.drafts.values())
        self.rounds += 1
        self.drafter_count += len(drafters)

        priority = self.weights[author]
        groups = vote.merge_identical({c: d.text for c, d in drafts.items()}, priority)
        scores = np.full((len(self.members), len(author)), np.nan)
        enders = [c for c in groups if drafts[c].ended]
        result = vote.shortcut(groups, enders, priority, settings.fast_finish, len(self.members))
        if round_drafts.gated and result is not None and result.decision == "only-candidate":
            result = vote.Tally(result.winner, "confident", result.shares, None)  # the gate held the others back
            self.confident_rounds += 1
        scored: dict[int, Scored] = {}
        if result is None:
            scored = verify(self.members, self.roster.verifiers, self.settings, drafts, groups, author, self.run_each)
            for v, verdict in scored.items():
                for c, value in verdict.scores.items():
                    scores[v, c] = value
            copied = self._copied(drafts, groups, len(author)) if settings.loop_guard else None
            result = vote.tally(scores, self.weights, groups, self.rule, copied, author)
            self._learn(result, groups, author)
        winner, writer = result.winner, int(author[result.winner])
        winning = drafts[winner]
        self.tokens += self._commit(winner, writer, winning, scored, following)
        self.wins[self.names[writer]] += 1
        self.contrast_changed += winning.contrast_changed or 0
        segment, finish = self._append(winning)
        spent = {self.names[i]: 0.0 for i in drafters}
        sampled = dict.fromkeys(spent, 0)
        for column, done in round_drafts.drafts.items():
            spent[self.names[author[column]]] += done.seconds
            sampled[self.names[author[column]]] += done.sampled
        event = RoundEvent(
            index=self.rounds + self.forced_rounds,
            text=segment,
            author=self.names[writer],
            decision=result.decision,
            candidates=round_candidates(self.names, drafts, groups, scores, result, round_drafts, self._amateur_names),
            weights=weights_dict(self.members, self.weights),
            drafters=tuple(self.names[i] for i in drafters),
            draft_seconds=spent,
            draft_tokens=sampled,
            verify_seconds={self.names[v]: s.seconds for v, s in scored.items()},
            seconds=time.perf_counter() - round_started,
            answer_tokens=self.tokens,
            runner_up=self._name(result.runner_up, author),
            ranked_first_by=tuple(self.names[v] for v in result.ranked_first_by),
            discounted=self._name(result.discounted, author),
            confidence=round_drafts.confidence,
            lost=self._news(),
            phase=self.phase,
        )
        return event, finish

    @property
    def _amateur_names(self) -> tuple[str, ...]:
        contrast = self.roster.contrast
        return tuple(self.names[i] for i in contrast.amateurs) if contrast is not None else ()

    def _name(self, column: int | None, author: np.ndarray) -> str | None:
        return None if column is None else self.names[author[column]]

    def _copied(self, drafts: dict[int, Draft], groups: dict[int, list[int]], columns: int) -> np.ndarray:
        copied = np.zeros(columns)
        for c in groups:
            copied[c] = copied_fraction(self.text, drafts[c].text)
        return copied

    def _learn(self, result: vote.Tally, groups: dict[int, list[int]], author: np.ndarray) -> None:
        """Hedge update of the verifier weights, and model exit."""
        settings = self.settings
        assert result.combined is not None
        total = float(np.nansum(result.combined[list(groups)]))
        for representative, merged in groups.items():
            writers = sorted({int(author[c]) for c in merged})
            self.share_totals[writers] += result.combined[representative] / total if total > 0 else 0.0
        if settings.feedback:
            verifies = self.roster.verifies
            judges = self.weights / self.weights[verifies].mean() if settings.weighted_judges else None
            reward = feedback.rewards(result.shares, groups, judges, author)
            eta = feedback.learning_rate(settings.learning_rate, len(self.members), self.rounds)
            updated = np.where(verifies, feedback.hedge_update(self.weights, reward, eta), 0.0)
            self.weights = updated / updated.sum()
        if settings.model_exit:
            drafters, warmup = self.roster.drafters, settings.exit_warmup_rounds
            self.roster.exit(
                feedback.exiting_drafters(self.share_totals, drafters, self.rounds, warmup, settings.exit_share)
            )

    def _forced_round(self, text: str, started: float) -> tuple[RoundEvent, FinishReason | None]:
        """Text the constraint forces (a key, punctuation): committed to every member that
        follows the answer without a round of drafting or a vote."""
        following = self.roster.following
        added = self.run_each(lambda i: self.members[i].commit(-1, text, None, None), following, losses_raise=False)
        self.tokens += max(n for n in added if n is not None)
        self.forced_rounds += 1
        segment, finish = self._append(Draft(text, False, None, []))
        event = RoundEvent(
            index=self.rounds + self.forced_rounds,
            text=segment,
            author="",
            decision="forced",
            candidates=(),
            weights=weights_dict(self.members, self.weights),
            drafters=(),
            draft_seconds={},
            draft_tokens={},
            verify_seconds={},
            seconds=time.perf_counter() - started,
            answer_tokens=self.tokens,
            lost=self._news(),
        )
        return event, finish

    def _append(self, winning: Draft) -> tuple[str, FinishReason | None]:
        """Add the winning text to the answer (and to the constraint's matcher); apply stop
        strings. Returns the segment as shown (cut at a stop string) and the finish reason:
        "eos" also when the constraint allows nothing more."""
        previous_length = len(self.text)
        self.text += winning.text
        if self.format is not None:
            self.format.commit(winning.text)
            if self.format.complete:
                return winning.text, "eos"
        if self.settings.stop and self.constraint is None:  # a stop string never cuts an answer with a format
            longest = max(len(stop) for stop in self.settings.stop)
            index = find_stop(self.text, self.settings.stop, previous_length - longest)
            if index is not None:
                self.text = self.text[:index]
                return self.text[previous_length:], "stop"
        return winning.text, "eos" if winning.ended else None

    def _commit(
        self,
        winner: int,
        writer: int,
        winning: Draft,
        scored: dict[int, Scored],
        following: list[int],
    ) -> int:
        """Broadcast the winner to every model that followed this round (a drafter that model exit
        removed in it may be its writer); return its length in the writer's tokens. A model whose
        pending draft (the one its KV memory holds: its last, or the one it read along) is the
        winning text keeps its cells."""

        def commit(index: int) -> int:
            own = self.members[index].pending_draft
            own = own if own is not None and own.text == winning.text else None
            return self.members[index].commit(winner, winning.text, own, scored.get(index))

        added = self.run_each(commit, following, losses_raise=False)  # the others have the winner: no going back
        mine = added[following.index(writer)]
        return mine if mine is not None else max(n for n in added if n is not None)
