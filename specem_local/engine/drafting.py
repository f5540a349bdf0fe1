"""A round's drafting: who drafts how many candidates, in what order, and the vote gate.

By default every active drafter drafts one candidate. With ``draft_budget`` the round's drafts
are shared out by the weights (``feedback.draft_counts``): a member holding most of the weight
drafts several (its first with its own sampler, the others sampled at ``extra_temperature``,
each from a stream of its own), a light one none (it still verifies). With ``vote_gate`` the
heaviest drafter drafts first, and when it was sure of every token its segment is the round's
only candidate.

Candidates are columns: model ``i``'s first draft is column ``i``, extra drafts follow the
models (column ``len(members)`` on), and ``author[c]`` is the model that drafted column ``c``;
``round_candidates`` turns them into the round event's records.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specem_local.engine import feedback
from specem_local.engine.drafted import Draft
from specem_local.engine.sampling import Sampler, make_sampler
from specem_local.engine.vote import Tally
from specem_local.events import Candidate
from specem_local.settings import EnsembleSettings


@dataclass
class RoundDrafts:
    """What a round drafted: every draft by column (empty ones included), who wrote each, and
    the leading draft's least token probability when the vote gate is on."""

    drafts: dict[int, Draft]
    author: np.ndarray  # column -> model
    sample: dict[int, int]  # column -> which of its model's drafts this round (0: the first)
    confidence: float | None = None
    gated: bool = False  # the vote gate took the leading draft alone: the others did not draft

    @property
    def drafters(self) -> list[int]:
        """The models that drafted, in model order."""
        return sorted({int(self.author[c]) for c in self.drafts})

    @property
    def written(self) -> dict[int, Draft]:
        """The drafts with text: the round's candidates."""
        return {c: d for c, d in self.drafts.items() if d.text}


class Drafting:
    """One answer's drafting plan: the samplers, and each round's drafts."""

    def __init__(self, models: int, settings: EnsembleSettings, cancel: threading.Event) -> None:
        self.models = models  # how many members: the first extra draft's column
        self.settings = settings
        self.cancel = cancel
        self.samplers: dict[tuple[int, int], Sampler] = {
            (i, 0): make_sampler(settings, np.random.default_rng([settings.seed, i])) for i in range(models)
        }
        self.extra_settings = dataclasses.replace(settings, temperature=settings.extra_temperature, greedy=False)

    def counts(self, weights: np.ndarray, active: list[int]) -> dict[int, int]:
        """How many drafts each active drafter writes this round."""
        budget = self.settings.draft_budget
        weighted = [i for i in active if weights[i] > 0]
        if budget == 0 or not weighted:
            return dict.fromkeys(active, 1)
        counts = feedback.draft_counts(weights, weighted, budget)
        counts.update({i: 1 for i in active if weights[i] <= 0})  # draft-only members: one each, beside the budget
        return {i: counts[i] for i in active if i in counts}

    def sampler(self, model: int, sample: int) -> Sampler:
        key = (model, sample)
        if key not in self.samplers:  # a stream of its own, the same for the same seed
            rng = np.random.default_rng([self.settings.seed, model, sample])
            self.samplers[key] = make_sampler(self.extra_settings, rng)
        return self.samplers[key]

    def draft_round(
        self,
        counts: dict[int, int],
        weights: np.ndarray,
        draft: Callable[[int, Sampler], Draft],
        run_each: Callable[[Callable, list], list],
    ) -> RoundDrafts:
        """Draft this round's candidates (``draft(model, sampler)`` drafts one); with the
        vote gate, the heaviest drafter first, and the rest only if it was unsure."""
        columns = {(model, 0): model for model in counts}
        extras = [(model, k) for model, count in sorted(counts.items()) for k in range(1, count)]
        columns.update({key: self.models + n for n, key in enumerate(extras)})
        author = np.zeros(self.models + len(extras), dtype=int)
        for (model, _), column in columns.items():
            author[column] = model
        sample_of = {column: sample for (_, sample), column in columns.items()}

        def drafts_of(model: int, first: int = 0) -> list[tuple[int, Draft]]:
            return [(columns[(model, k)], draft(model, self.sampler(model, k))) for k in range(first, counts[model])]

        done: dict[int, Draft] = {}
        confidence = None
        todo = {model: 0 for model in counts}
        if self.settings.vote_gate > 0 and sum(counts.values()) > 1:
            leader = max(counts, key=lambda i: weights[i])
            lead = draft(leader, self.sampler(leader, 0))
            confidence = lead.least_probability()
            done[leader] = lead
            if (confidence >= self.settings.vote_gate and lead.text) or self.cancel.is_set():
                return RoundDrafts(done, author, sample_of, confidence, gated=True)
            todo[leader] = 1
        models = [model for model in sorted(counts) if todo[model] < counts[model]]
        for found in run_each(lambda model: drafts_of(model, todo[model]), models):
            done.update(found)
        return RoundDrafts(dict(sorted(done.items())), author, sample_of, confidence)


def round_candidates(
    names: list[str],
    drafts: dict[int, Draft],
    groups: dict[int, list[int]],
    scores: np.ndarray,
    result: Tally,
    round_drafts: RoundDrafts,
    amateurs: tuple[str, ...],
) -> tuple[Candidate, ...]:
    """Every candidate of a round, for its event: who drafted it, what each verifier thought,
    how the vote combined it; merged duplicates share their representative's scores."""
    representative_of = {c: rep for rep, merged in groups.items() for c in merged}
    author, sample = round_drafts.author, round_drafts.sample

    def column(matrix: np.ndarray, c: int) -> dict[str, float]:
        return {names[v]: float(matrix[v, c]) for v in range(len(names)) if not np.isnan(matrix[v, c])}

    out = []
    for c, draft in drafts.items():
        rep = representative_of[c]
        out.append(
            Candidate(
                model=names[author[c]],
                text=draft.text,
                ended=draft.ended,
                scores=column(scores, rep),
                shares=column(result.shares, rep),
                combined=float(result.combined[rep]) if result.combined is not None else None,
                same_as=names[author[rep]] if rep != c else None,
                copied=float(result.copied[rep]) if result.copied is not None else None,
                sample=sample[c],
                same_as_sample=sample[rep] if rep != c else None,
                contrasted_with=amateurs if draft.contrast_changed is not None else (),
                contrast_changed=draft.contrast_changed,
            )
        )
    return tuple(out)
