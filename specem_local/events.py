"""The event stream every front end consumes: one ``RoundEvent`` per round, then a
``FinalEvent``. Small frozen records, JSON-ready through ``to_dict``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Candidate:
    """One model's draft in a round and what every verifier thought of it."""

    model: str
    text: str
    ended: bool  # the drafter ended the answer with this segment
    scores: dict[str, float]  # verifier -> raw score (mean logit or mean log-probability)
    shares: dict[str, float]  # verifier -> normalised score (its row sums to 1)
    combined: float | None  # weighted vote; None when no vote was needed
    same_as: str | None = None  # drafted the same text as this model (scored once, as one candidate)
    copied: float | None = None  # share of its words that repeat the answer so far (with loop_guard)


@dataclass(frozen=True)
class RoundEvent:
    index: int  # 1-based round number
    text: str  # the winning segment, appended to the answer
    author: str
    decision: str  # "vote", "fast-finish" or "only-candidate"
    candidates: tuple[Candidate, ...]
    weights: dict[str, float]  # verifier weights after this round's update
    drafters: tuple[str, ...]  # models that drafted this round
    draft_seconds: dict[str, float]
    draft_tokens: dict[str, int]  # tokens each drafter sampled this round (for its tok/s)
    verify_seconds: dict[str, float]
    seconds: float
    answer_tokens: int  # answer length so far, in the authors' tokens
    type: str = "round"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FinalEvent:
    text: str
    finish_reason: str  # "eos", "length", "stop", "context", "cancelled" or "empty"
    rounds: int
    tokens: int
    seconds: float
    first_segment_seconds: float | None
    wins: dict[str, int]
    models_per_round: float
    weights: dict[str, float]
    plain_generation: bool  # one model: no ensembling took place
    type: str = "final"

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["tokens_per_second"] = round(self.tokens_per_second, 3)
        return data


Event = RoundEvent | FinalEvent
