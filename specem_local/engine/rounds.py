"""One answer's round loop: draft, verify in-line, vote, learn the weights, broadcast.

``RoundLoop.run()`` yields a ``StartEvent``, one ``RoundEvent`` per round and a ``FinalEvent``.
The ``AnswerStream`` (``answer_stream.py``) and the ``AnswerRunner`` (``runner.py``) own the
threads and lifetimes around it; this module owns what a round does: each round drafts, votes
and commits, through the members (``member.py``), the vote (``vote.py``) and the feedback rule
(``feedback.py``), in the answer's phase (``phases.py``: thinking first, then the answer).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from specem_local.backend.protocol import ContextFull, MemberLost, StepAbandoned
from specem_local.engine import feedback, vote
from specem_local.engine import options as opt
from specem_local.engine.answer_events import final_event, start_event, weights_dict
from specem_local.engine.choice_points import ChoicePoint, choices_ahead
from specem_local.engine.drafted import Draft, Scored
from specem_local.engine.drafting import Drafting, RoundDrafts, round_candidates
from specem_local.engine.evidence import RoundEvidence, round_sureness, segment_evidence, shown_part
from specem_local.engine.learned import StartingWeights
from specem_local.engine.member import Member
from specem_local.engine.option_answers import option_vote, scored_here, source_weights
from specem_local.engine.phases import Reasoning, Writing, first_phase, unarm
from specem_local.engine.prediction import predicted_rest
from specem_local.engine.request import AnswerRequest
from specem_local.engine.roster import Roster
from specem_local.engine.sampling import Sampler
from specem_local.engine.segments import copied_fraction, find_stop, fitting_start
from specem_local.engine.task_weights import DEFAULT_TASK
from specem_local.engine.verifying import verify
from specem_local.engine.written import Voted, Written
from specem_local.errors import NoMemberLeft
from specem_local.events import Candidate, Event, FinalEvent, FinishReason, RoundEvent, Switch
from specem_local.settings import EnsembleSettings

RunEach = Callable[[EnsembleSettings, Callable, list], list]  # AnswerRunner.run_each: a function over items


class RoundLoop:
    """One answer: its members and their weights, its phase, and what it has written."""

    def __init__(
        self,
        request: AnswerRequest,
        members: list[Member],
        start: StartingWeights,
        cancel: threading.Event,
        run_each: RunEach,
        absent: dict[str, str] | None = None,
    ) -> None:
        settings = request.settings
        self.request, self.settings = request, settings
        self.members, self.names = members, [m.name for m in members]
        self.start, self.weights = start, start.weights
        self.cancel = cancel
        self._run_each = run_each
        self.absent = absent or {}  # lost members that could not be brought back: name -> why
        self.phase: Writing | Reasoning = first_phase(request)
        self.written = Written(dict.fromkeys(self.names, 0))
        exit_now = settings.model_exit and start.origin != "prior"
        self.roster = Roster(members, settings, self.weights, exit_now, choices_ahead(request))
        self.lost_since: dict[str, str] = {}  # members lost since the last event, for the next one
        self.share_totals = np.zeros(len(members))
        self.drafting = Drafting(len(members), settings, cancel)
        self.rule = vote.VoteRule(
            settings.scoring,
            settings.segment_tokens,
            settings.normalise,
            settings.self_vote,
            settings.pooling,
            settings.contrast,
        )

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

    def _take_losses(self) -> None:
        """Take the members lost since the last look out of the answer (``NoMemberLeft`` when
        no member is left that can draft, or none that can verify)."""
        found = self.roster.newly_lost()
        if not found:
            raise RuntimeError("a member already out of the answer was asked for a step (a bug in specem)")
        self.lost_since.update({self.names[i]: reason for i, reason in found.items()})
        self.weights = self.roster.weights_without_lost(self.weights)
        if not self.roster.can_answer:
            said = "; ".join(f"{self.names[i]}: {reason}" for i, reason in self.roster.lost.items())
            missing = "verify" if self.roster.drafters else "draft"
            raise NoMemberLeft(f"the answer cannot go on: every member that could {missing} was lost ({said})")

    # -- the answer --------------------------------------------------------------------------------
    def run(self) -> Iterator[Event]:
        written = self.written
        written.started = time.perf_counter()
        prompts = [list(self.request.prompts[member.name]) for member in self.members]
        yield start_event(self.request, self.members, self.roster, self.weights, self.start, self.absent, prompts)
        finish: FinishReason | None = None
        try:
            if not self.cancel.is_set():
                try:
                    reuse = self.settings.reuse_prompt
                    self.run_each(lambda i: self.members[i].start(prompts[i], reuse), self.roster.following)
                except MemberLost:
                    self._take_losses()
            if isinstance(self.phase, Writing):
                self.phase.arm(self.members)
            while not finish:
                if self.cancel.is_set():
                    finish = "cancelled"
                    break
                try:
                    if isinstance(self.phase, Reasoning) and self.phase.over(written.tokens):
                        self._switch("budget")
                        continue
                    if written.tokens >= self.settings.max_tokens:
                        finish = "length"
                        break
                    event, finish = self._round()
                    if isinstance(self.phase, Reasoning) and finish in ("eos", "empty"):  # they ended their thinking
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
                if written.first_segment is None:
                    written.first_segment = time.perf_counter() - written.started
                yield event
        except StepAbandoned:  # a cancel or Ctrl-C stopped waiting for a remote step
            finish = "cancelled"
        finally:
            unarm(self.members)
        yield self.final_event(finish if finish is not None else "empty")  # a round without one: nothing appended

    def _switch(self, why: Switch) -> None:
        """The reasoning ends (the members ended it, or its budget ran out): the format's phase
        begins (``phases.Reasoning.switch``)."""
        assert isinstance(self.phase, Reasoning)
        written = self.written
        written.reasoning, written.reasoning_tokens, written.switched = written.text, written.tokens, why
        written.text = ""
        drafters, following = len(self.roster.drafters), self.roster.following
        self.phase = self.phase.switch(self.request, self.members, following, written.reasoning, why, drafters,
                                       self.run_each)  # fmt: skip

    def final_event(self, finish: FinishReason) -> FinalEvent:
        """The answer's final record, as it stands."""
        return final_event(self.request, self.members, self.roster, self.weights, self.written, self.phase, finish)

    # -- a round: draft, vote, commit --------------------------------------------------------------
    def _round(self) -> tuple[RoundEvent | None, FinishReason | None]:
        """One round: draft, vote (and learn), commit the winner. Returns the event (None if
        nothing was appended) and a finish reason (None to go on)."""
        started = time.perf_counter()
        forced = self.phase.forced()
        if forced:
            return self._forced_round(forced, started)
        point = self.phase.choices(self.written.text) if self.roster.choices_ahead else None
        if point is not None:
            return self._option_round(point, started)
        following = self.roster.following  # as the round starts: model exit may change it by its end
        drafted = self._draft()
        if not isinstance(drafted, RoundDrafts):
            return None, drafted
        voted = self._vote(drafted)
        if voted is None:
            return None, "eos" if any(d.ended for d in drafted.drafts.values()) else "empty"
        winner, writer = voted.result.winner, int(drafted.author[voted.result.winner])
        winning = voted.drafts[winner]
        self.written.tokens += self._commit(winner, writer, winning, voted.scored, following)
        self.written.wins[self.names[writer]] += 1
        self.written.contrast_changed += winning.contrast_changed or 0
        segment, finish = self._append(winning)
        winning = shown_part(winning, segment, self.members[writer].model.token_bytes)  # a stop string's cut
        evidence = segment_evidence(winning, voted.result if voted.result.combined is not None else None)
        self.written.evidence.append(evidence)
        candidates = round_candidates(
            self.names, voted.drafts, voted.groups, voted.scores, voted.result, drafted, self._amateur_names
        )
        spent = {self.names[i]: 0.0 for i in drafted.drafters}
        sampled = dict.fromkeys(spent, 0)
        for column, done in drafted.drafts.items():
            spent[self.names[drafted.author[column]]] += done.seconds
            sampled[self.names[drafted.author[column]]] += done.sampled
        event = self._event(
            segment,
            started,
            author=self.names[writer],
            decision=voted.result.decision,
            candidates=candidates,
            drafters=tuple(self.names[i] for i in drafted.drafters),
            draft_seconds=spent,
            draft_tokens=sampled,
            verify_seconds={self.names[v]: s.seconds for v, s in voted.scored.items()},
            runner_up=self._name(voted.result.runner_up, drafted.author),
            ranked_first_by=tuple(self.names[v] for v in voted.result.ranked_first_by),
            discounted=self._name(voted.result.discounted, drafted.author),
            confidence=drafted.confidence,
            **self._sureness(evidence, winning, writer),
        )
        return event, finish

    def _sureness(self, evidence: RoundEvidence, winning: Draft, writer: int) -> dict[str, Any]:
        """A round's own evidence for its event (``evidence.round_sureness``)."""
        token_bytes = self.members[writer].model.token_bytes
        return round_sureness(self.request.calibrator, evidence, winning, self.settings.logprobs, token_bytes,
                              self.written.tokens)  # fmt: skip

    def _draft(self) -> RoundDrafts | FinishReason:
        """Every drafter's candidates for this round, or why there can be none. Every verifier
        holds its own draft and the others' tails in its KV memory at once, so near the end of
        the context the segments shrink until they fit."""
        settings = self.settings
        counts = self.drafting.counts(self.weights, self.roster.drafters)
        contrast = self.roster.contrast
        room = min(self.members[i].room for i in self.roster.following)
        cap = min(settings.max_tokens - self.written.tokens, (room - 1) // sum(counts.values()))
        if cap < 1:
            return "context"
        budget = min(settings.segment_tokens, cap)

        rest = predicted_rest(self.request.prediction, self.written.text) if isinstance(self.phase, Writing) else ""

        def draft(i: int, sampler: Sampler) -> Draft:
            if contrast is not None and i == contrast.expert:
                return contrast.draft(self.members, self.weights, budget, sampler, self.cancel, cap, settings)
            return self.members[i].draft(budget, sampler, self.cancel, at_most=cap, ignore_eos=settings.ignore_eos,
                                         predicted=rest)  # fmt: skip

        drafted = self.drafting.draft_round(counts, self.weights, draft, self.run_each)
        return "cancelled" if self.cancel.is_set() else drafted

    def _vote(self, drafted: RoundDrafts) -> Voted | None:
        """The winner among the candidates the phase allows (None when it allows none): taken
        at once where a shortcut applies (one candidate, a fast finish), else every verifier
        scores every candidate and the weighted vote picks it; the weights learn from it."""
        drafts = {c: d for c, d in drafted.written.items() if self.phase.allows(d.text, d.ended)}
        if not drafts:
            return None
        author, settings, written = drafted.author, self.settings, self.written
        written.drafted_tokens += sum(d.sampled for d in drafted.drafts.values())
        written.predicted += sum(d.predicted[0] for d in drafted.drafts.values())
        written.read_ahead += sum(d.predicted[1] for d in drafted.drafts.values())
        written.rounds += 1
        written.drafters += len(drafted.drafters)
        priority = self.weights[author]
        groups = vote.merge_identical({c: d.text for c, d in drafts.items()}, priority)
        scores = np.full((len(self.members), len(author)), np.nan)
        enders = [c for c in groups if drafts[c].ended]
        result = vote.shortcut(groups, enders, priority, settings.fast_finish, len(self.members))
        if drafted.gated and result is not None and result.decision == "only-candidate":
            result = vote.Tally(result.winner, "confident", result.shares, None)  # the gate held the others back
            written.confident_rounds += 1
        scored: dict[int, Scored] = {}
        if result is None:
            scored = verify(self.members, self.roster.verifiers, settings, drafts, groups, author, self.run_each)
            for v, verdict in scored.items():
                for c, value in verdict.scores.items():
                    scores[v, c] = value
            copied = self._copied(drafts, groups, len(author)) if settings.loop_guard else None
            result = vote.tally(scores, self.weights, groups, self.rule, copied, author)
            self._learn(result, groups, author)
        return Voted(drafts, groups, result, scores, scored)

    def _event(self, segment: str, started: float, **facts: object) -> RoundEvent:
        """A round's event: what it appended, and ``facts`` of how it was chosen."""
        return RoundEvent(
            index=self.written.all_rounds,
            text=segment,
            weights=weights_dict(self.members, self.weights),
            seconds=time.perf_counter() - started,
            answer_tokens=self.written.tokens,
            lost=self._news(),
            phase=self.phase.name,
            **facts,  # type: ignore[arg-type]
        )

    def _news(self) -> dict[str, str]:
        """The members lost since the last event (said once, in the next event)."""
        news, self.lost_since = self.lost_since, {}
        return news

    @property
    def _amateur_names(self) -> tuple[str, ...]:
        contrast = self.roster.contrast
        return tuple(self.names[i] for i in contrast.amateurs) if contrast is not None else ()

    def _name(self, column: int | None, author: np.ndarray) -> str | None:
        return None if column is None else self.names[author[column]]

    def _copied(self, drafts: dict[int, Draft], groups: dict[int, list[int]], columns: int) -> np.ndarray:
        copied = np.zeros(columns)
        for c in groups:
            copied[c] = copied_fraction(self.written.text, drafts[c].text)
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
            eta = feedback.learning_rate(settings.learning_rate, len(self.members), self.written.rounds)
            updated = np.where(verifies, feedback.hedge_update(self.weights, reward, eta), 0.0)
            self.weights = updated / updated.sum()
        if settings.model_exit:
            drafters, warmup = self.roster.drafters, settings.exit_warmup_rounds
            self.roster.exit(
                feedback.exiting_drafters(self.share_totals, drafters, self.written.rounds, warmup, settings.exit_share)
            )

    def _forced_round(self, text: str, started: float) -> tuple[RoundEvent, FinishReason | None]:
        """Text the format forces (a key, punctuation): committed to every member that follows
        the answer without a round of drafting or a vote; cut where it would pass ``max_tokens``
        (in the tokenizer that counts it longest), which then ends the answer."""
        following = self.roster.following
        room = self.settings.max_tokens - self.written.tokens
        fits = fitting_start(text, lambda t: max(len(self.members[i].model.tokenize(t)) for i in following), room)
        if fits:
            added = self.run_each(lambda i: self.members[i].commit(-1, fits, None, None), following, losses_raise=False)
            self.written.tokens += max(n for n in added if n is not None)
        self.written.forced_rounds += 1
        segment, finish = self._append(Draft(fits, False, None, []))
        finish = "length" if fits != text else finish
        none: tuple[Candidate, ...] = ()
        event = self._event(segment, started, author="", decision="forced", candidates=none, drafters=(),
                            draft_seconds={}, draft_tokens={}, verify_seconds={})  # fmt: skip
        return event, finish

    def _option_round(self, point: ChoicePoint, started: float) -> tuple[RoundEvent, FinishReason | None]:
        """A value the schema allows only a few of (``choice_points.py``): every verifier scores
        every option in context, the task's weights for the asked way pick one (no drafting, no
        Hedge update), and every member that follows the answer commits it."""
        task = self.settings.task or DEFAULT_TASK
        weights, priors, _, _ = source_weights(self.members, task, point.options, ("asked",))
        found = dict(self.run_each(lambda v: (v, scored_here(self.members[v], point.rests)), self.roster.verifiers))
        scores = {opt.source(self.names[v], "asked"): summed for v, (summed, _, _) in found.items()}
        chosen = option_vote(point.rests, scores, priors, weights)
        text, writer = point.rests[chosen.best], self.names.index(chosen.author)
        self.run_each(lambda i: self.members[i].commit(chosen.best, text, None, found[i][2] if i in found else None),
                      self.roster.following, losses_raise=False)  # fmt: skip
        self.written.tokens += found[writer][1][chosen.best]
        self.written.wins[chosen.author] += 1
        self.written.option_rounds += 1
        segment, finish = self._append(Draft(text, False, None, []))
        self.written.evidence.append(RoundEvidence((math.log(chosen.confidence),), chosen.margin, chosen.agreement))
        event = self._event(segment, started, author=chosen.author, decision="options", candidates=chosen.candidates,
                            drafters=(), draft_seconds={}, draft_tokens={},
                            verify_seconds={self.names[v]: scored.seconds for v, (_, _, scored) in found.items()},
                            runner_up=point.rests[chosen.runner_up], ranked_first_by=chosen.ranked_first_by,
                            sure=chosen.confidence, margin=chosen.margin, agreement=chosen.agreement)  # fmt: skip
        return event, finish

    def _append(self, winning: Draft) -> tuple[str, FinishReason | None]:
        """Add the winning text to the answer (and to the format's matcher); apply stop
        strings. Returns the segment as shown (cut at a stop string) and the finish reason:
        "eos" also when the format allows nothing more."""
        written = self.written
        previous_length = len(written.text)
        written.text += winning.text
        if self.phase.commit(winning.text):
            return winning.text, "eos"
        if self.settings.stop and not self.phase.formatted:  # a stop string never cuts an answer with a format
            longest = max(len(stop) for stop in self.settings.stop)
            index = find_stop(written.text, self.settings.stop, previous_length - longest)
            if index is not None:
                written.stop_sequence = next(s for s in self.settings.stop if s and written.text.startswith(s, index))
                written.text = written.text[:index]
                return written.text[previous_length:], "stop"
        return winning.text, "eos" if winning.ended else None

    def _commit(self, winner: int, writer: int, winning: Draft, scored: dict[int, Scored], following: list[int]) -> int:
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
