"""What one answer's round loop has written so far (``Written``: its text, its counts, each
round's evidence) and what one voted round decided (``Voted``): the records ``rounds.py`` keeps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from specem_local.engine import vote
from specem_local.engine.drafted import Draft, Scored
from specem_local.engine.evidence import RoundEvidence
from specem_local.events import Switch


@dataclass
class Written:
    """What an answer has written so far, and the counts its final record reports."""

    wins: dict[str, int]
    text: str = ""  # the current phase's text (the answer, or the reasoning while it thinks)
    tokens: int = 0  # in both phases, each segment counted in its writer's tokens
    rounds: int = 0  # rounds drafted and voted on
    forced_rounds: int = 0  # rounds of text the format forced (no model drafted them)
    option_rounds: int = 0  # values chosen among a few options (choice_points.py): scored, not drafted
    drafters: int = 0  # drafters summed over the rounds
    confident_rounds: int = 0  # rounds the vote gate took unvoted
    drafted_tokens: int = 0
    predicted: int = 0  # a prediction's tokens drafted as predicted (prediction.py)
    read_ahead: int = 0  # a prediction's tokens read ahead, those drafted included
    contrast_changed: int = 0
    reasoning: str = ""  # what was thought first, once the answer's phase began
    reasoning_tokens: int = 0
    switched: Switch | None = None
    stop_sequence: str = ""  # the stop string that ended the answer (finish "stop")
    first_segment: float | None = None
    started: float = field(default_factory=time.perf_counter)
    evidence: list[RoundEvidence] = field(default_factory=list)  # each drafted round's (evidence.py)

    @property
    def all_rounds(self) -> int:
        """Every round so far: drafted, forced by the format, and chosen among options."""
        return self.rounds + self.forced_rounds + self.option_rounds


@dataclass(frozen=True)
class Voted:
    """A round's vote: the drafts that could win, the winner's tally, the verifiers' scores."""

    drafts: dict[int, Draft]
    groups: dict[int, list[int]]
    result: vote.Tally
    scores: np.ndarray
    scored: dict[int, Scored]
