"""What a member drafted and what it scored: a segment after post-processing (``Draft``), with
the rows it was drafted from, and a verifier's in-line scores of a round's candidates
(``Scored``), kept until the winner is known (``member.py`` makes both)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from specem_local.backend.scoring import end_score, least_probability, log_normalisers


@dataclass
class Draft:
    """A drafted segment after post-processing."""

    text: str
    ended: bool
    text_tokens: list[int] | None  # the leading drafted tokens that spell ``text`` exactly, or None
    rows: list[np.ndarray] = field(repr=False)  # rows[i] predicted drafted token i; one more at the end
    seconds: float = 0.0
    tokens: list[int] = field(default_factory=list)  # every token drafting decoded into sequence 0
    contrast_changed: int | None = None  # token-level contrast: tokens whose top choice it changed
    predicted: tuple[int, int] = (0, 0)  # a prediction's tokens drafted as predicted, and read ahead

    @property
    def sampled(self) -> int:
        """Tokens decoded while drafting (before any trimming)."""
        return len(self.rows) - 1

    @functools.cached_property
    def normalisers(self) -> np.ndarray:
        """Each row's log-normaliser, computed once when a log-probability first needs it."""
        return log_normalisers(np.stack(self.rows), overwrite=True)

    def scores(self, tokens: list[int], scoring: str) -> tuple[np.ndarray, np.ndarray]:
        """Chosen logits and normalisers for ``tokens[i]`` as ``rows[i]`` predicts it; every
        token but the last must be the drafted one (a row follows the drafted tokens before it)."""
        chosen = np.array([self.rows[i][token] for i, token in enumerate(tokens)], dtype=np.float64)
        return chosen, self.normalisers[: len(tokens)] if scoring == "logprob" else np.zeros(len(tokens))

    def end(self, after: int, end_tokens: np.ndarray, scoring: str) -> float:
        """The end score of the row after ``after`` drafted tokens."""
        normaliser = float(self.normalisers[after]) if scoring == "logprob" else None
        return end_score(self.rows[after], end_tokens, scoring, normaliser)

    def least_probability(self) -> float:
        """How sure the drafter was of this segment: its least likely token's probability."""
        tokens = self.text_tokens if self.text_tokens is not None else self.tokens
        chosen, normalisers = self.scores(tokens, "logprob")
        return least_probability(chosen, normalisers)

    @property
    def aligned(self) -> bool:
        """Whether ``text`` is exactly some leading drafted tokens (whose cells can be kept)."""
        return self.text_tokens is not None


@dataclass
class Scored:
    """A verifier's in-line scores for a set of candidates, kept until the winner is known."""

    candidate_tokens: dict[int, list[int]]  # candidate index -> this model's tokens
    scores: dict[int, float]
    seq_of: dict[int, int]  # candidate index -> sequence id holding its cells
    last_rows: dict[int, np.ndarray]  # candidate index -> logits after its last token
    seconds: float = 0.0
