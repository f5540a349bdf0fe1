"""Who takes part in one answer, round by round: the members drafting now (model exit takes
drafters out), those that verify, the token-level contrast, and the members lost on the way.

A member is lost when its model can no longer compute (a worker whose remote machine stalled
or died: ``LanguageModel.lost``). It leaves the answer as a drafter that model exit stopped
does, and more: it neither drafts, nor verifies, nor follows the answer, and its weight goes
to the others. The answer goes on while some member can still draft and some can verify.
"""

from __future__ import annotations

import numpy as np

from specem_local.engine import feedback
from specem_local.engine.contrastive import TokenContrast
from specem_local.engine.member import Member
from specem_local.settings import EnsembleSettings


class Roster:
    """The members' parts in one answer. ``exit_now``: weights known to lose send their
    drafters out from the first round (model exit with learned weights)."""

    def __init__(
        self, members: list[Member], settings: EnsembleSettings, weights: np.ndarray, exit_now: bool,
        choices_ahead: bool = False,
    ) -> None:  # fmt: skip
        self.members = members
        self.settings = settings
        self.choices_ahead = choices_ahead  # the answer may reach a choice point: every verifier keeps up
        self.verifies = np.array([m.spec.verifies for m in members], dtype=bool)
        self.drafters = [i for i, m in enumerate(members) if m.spec.drafts]
        if exit_now:
            judged = [i for i in self.drafters if self.verifies[i]]
            self.exit(feedback.exiting_drafters(weights, judged, 1, 0, settings.exit_share))
        self.contrast = self._token_contrast(weights)
        if self.contrast is not None:  # the amateurs read the expert's drafts along instead of drafting
            self.drafters = [i for i in self.drafters if i not in self.contrast.amateurs]
        self.lost: dict[int, str] = {}  # member index -> why

    @property
    def following(self) -> list[int]:
        """The members that keep up with the answer: all of them (but the lost) while a vote
        can still happen (two drafters or more, or a drafting budget of two drafts or more);
        after that only the drafter, since no one will judge again (model exit with one
        drafter left costs little more than that drafter alone). An answer that may reach a choice
        point (``choice_points.py``) keeps every member up with it: each verifier scores its options
        in context."""
        if len(self.drafters) > 1 or self.settings.draft_budget > 1 or self.choices_ahead:
            return [i for i in range(len(self.members)) if i not in self.lost]
        readers = self.contrast.amateurs if self.contrast is not None else []
        return sorted({*self.drafters, *readers})

    @property
    def verifiers(self) -> list[int]:
        return [int(v) for v in np.flatnonzero(self.verifies)]

    def _token_contrast(self, weights: np.ndarray) -> TokenContrast | None:
        """With ``contrast``: the heaviest drafting verifier is the expert, and the other
        verifiers of its vocabulary are its amateurs, contrasted token by token as it drafts."""
        if self.settings.contrast <= 0:
            return None
        judged = [i for i in self.drafters if self.verifies[i]]
        if not judged:
            return None
        expert = max(judged, key=lambda i: weights[i])
        strong = self.members[expert]
        amateurs = [
            i
            for i, member in enumerate(self.members)
            if i != expert
            and self.verifies[i]
            and member.model.n_vocab == strong.model.n_vocab
            and member.vocabulary == strong.vocabulary
        ]
        return TokenContrast(expert, amateurs, self.settings.contrast) if amateurs else None

    def exit(self, leaving: list[int]) -> None:
        """Model exit: these drafters stop drafting (they go on verifying)."""
        self.drafters = [i for i in self.drafters if i not in leaving]

    def newly_lost(self) -> dict[int, str]:
        """Members whose models were lost since the last look (each is taken out here)."""
        found = {i: m.model.lost for i, m in enumerate(self.members) if m.model.lost and i not in self.lost}
        for index, reason in found.items():
            self.lost[index] = reason
            self.verifies[index] = False
            self.drafters = [i for i in self.drafters if i != index]
            contrast = self.contrast
            if contrast is not None and (index == contrast.expert or index in contrast.amateurs):
                self.contrast = None  # contrast no more: its readers draft again, as members of their own
                back = [contrast.expert, *contrast.amateurs]
                self.drafters = sorted({*self.drafters, *(i for i in back if self._can_draft(i))})
        if found and not self.drafters:  # model exit had sent the others out: they come back
            self.drafters = [i for i in range(len(self.members)) if self._can_draft(i)]
        return found

    def _can_draft(self, index: int) -> bool:
        return index not in self.lost and self.members[index].spec.drafts

    def weights_without_lost(self, weights: np.ndarray) -> np.ndarray:
        """The weights with the lost members' shares given to the other verifiers."""
        kept = np.where(self.verifies, weights, 0.0)
        if kept.sum() <= 0:  # the lost held all the weight: the others start level
            kept = self.verifies.astype(float)
        return kept / kept.sum() if kept.sum() > 0 else kept

    @property
    def can_answer(self) -> bool:
        """Some member can still draft and some can verify."""
        return bool(self.drafters) and bool(self.verifies.any())
