"""A round's verification: every verifier scores every distinct candidate, those it drafted
itself from the logits rows it drafted with, the others in one in-line batch
(``Member.score``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specem_local.engine.drafted import Draft, Scored
from specem_local.engine.member import Member
from specem_local.settings import EnsembleSettings


def verify(
    members: list[Member],
    verifiers: list[int],
    settings: EnsembleSettings,
    drafts: dict[int, Draft],
    groups: dict[int, list[int]],
    author: np.ndarray,
    run_each: Callable[[Callable, list], list],
) -> dict[int, Scored]:
    """Each verifier's scores (``Scored.scores``: representative candidate -> score), by verifier.
    ``groups``: the distinct candidates (a representative and the columns merged into it);
    ``author``: each column's drafter."""
    ending = frozenset(rep for rep in groups if drafts[rep].ended) if settings.verify_end else frozenset()

    def one(v: int) -> tuple[int, Scored]:
        member = members[v]
        mine = {  # representative -> its own aligned draft, scored from the rows it drafted with
            rep: drafts[c] for rep, merged in groups.items() for c in merged if author[c] == v and drafts[c].aligned
        }
        others = {rep: drafts[rep].text for rep in groups if rep not in mine}
        result = member.score(others, settings.scoring, ending)
        for rep, own in mine.items():
            result.scores[rep] = member.own_score(own, settings.scoring, with_end=rep in ending)
        return v, result

    return dict(run_each(one, verifiers))
