"""Segment scores from logits rows, as plain functions over arrays.

A verifier scores a candidate by the logit (``logit``) or log-probability (``logprob``) its
rows give the candidate's tokens. A row has one entry per vocabulary token (262,144 for Gemma
3), so what costs is touching whole rows: ``row_scores`` reads the chosen token's logit and
the row's log-normaliser in one vectorised pass over a batch, in float32, and may overwrite
the rows it is given (the backend hands it llama.cpp's own output buffer, so nothing is copied
but the few rows a caller keeps whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

KEEP = -1  # a target that asks for the whole row instead of one token's logit


@dataclass(frozen=True)
class RowScores:
    """What scoring needs from a batch of rows: per row, the logit of its target token (NaN
    for rows kept whole), its log-normaliser (NaN when not asked for), and copies of the rows
    whose target was ``KEEP``, by row index."""

    chosen: np.ndarray
    normalisers: np.ndarray
    kept: dict[int, np.ndarray] = field(default_factory=dict)

    @staticmethod
    def join(parts: Sequence[RowScores]) -> RowScores:
        """One ``RowScores`` for consecutive batches."""
        kept: dict[int, np.ndarray] = {}
        offset = 0
        for part in parts:
            kept.update({offset + index: row for index, row in part.kept.items()})
            offset += len(part.chosen)
        chosen = np.concatenate([p.chosen for p in parts]) if parts else np.empty(0)
        normalisers = np.concatenate([p.normalisers for p in parts]) if parts else np.empty(0)
        return RowScores(chosen, normalisers, kept)


def log_normalisers(rows: np.ndarray, *, overwrite: bool = False) -> np.ndarray:
    """``log Σ exp`` of each row, shifted by the row's maximum (float64 out). ``overwrite``
    lets it use ``rows`` as its scratch space instead of allocating a copy."""
    top = rows.max(axis=1)
    shifted = np.subtract(rows, top[:, None], out=rows if overwrite else None)
    np.exp(shifted, out=shifted)
    return np.log(shifted.sum(axis=1).astype(np.float64)) + top


def row_scores(rows: np.ndarray, targets: Sequence[int], *, normalise: bool, overwrite: bool = False) -> RowScores:
    """The chosen logit of ``targets[i]`` in ``rows[i]`` (``KEEP``: copy the row instead) and,
    if ``normalise``, every row's log-normaliser. ``overwrite`` may scribble over ``rows``."""
    wanted = np.asarray(targets, dtype=np.intp)
    picks = np.flatnonzero(wanted >= 0)
    kept = {int(i): rows[i].copy() for i in np.flatnonzero(wanted < 0)}
    chosen = np.full(len(wanted), np.nan)
    chosen[picks] = rows[picks, wanted[picks]]
    normalisers = log_normalisers(rows, overwrite=overwrite) if normalise else np.full(len(wanted), np.nan)
    return RowScores(chosen, normalisers, kept)


def end_score(row: np.ndarray, end_tokens: np.ndarray, scoring: str, normaliser: float | None = None) -> float:
    """How strongly ``row`` predicts that the answer ends here: the log-probability of any
    end-of-generation token (``logprob``; ``normaliser`` is the row's, if already known), or
    the highest such raw logit (``logit``)."""
    ends = row[end_tokens].astype(np.float64)
    if scoring == "logit":
        return float(ends.max())
    if normaliser is None:
        normaliser = float(log_normalisers(row[None, :])[0])
    return float(log_normalisers(ends[None, :])[0] - normaliser)


def mean_score(chosen: np.ndarray, normalisers: np.ndarray, scoring: str, end: float | None = None) -> float:
    """A segment's score: the mean token score, the end of the answer counting as one more
    token when ``end`` is given."""
    values = chosen - normalisers if scoring == "logprob" else np.asarray(chosen, dtype=np.float64)
    if end is not None:
        values = np.append(values, end)
    return float(values.mean())


def least_probability(chosen: np.ndarray, normalisers: np.ndarray) -> float:
    """The probability of a segment's least likely token (1.0 for no tokens): how sure the
    model that sampled it was at its most doubtful step."""
    if len(chosen) == 0:
        return 1.0
    return float(np.exp(np.min(np.asarray(chosen, dtype=np.float64) - normalisers)))


def segment_score(
    rows: np.ndarray, tokens: list[int], scoring: str, end: tuple[np.ndarray, np.ndarray] | None = None
) -> float:
    """A segment's score from its whole rows (``rows[i]`` predicts ``tokens[i]``); ``end`` =
    (the row after the last token, the end tokens) scores ending the answer there too. The
    straightforward form, for callers that hold the rows anyway."""
    scores = row_scores(rows, tokens, normalise=scoring == "logprob")
    last = end_score(end[0], end[1], scoring) if end is not None else None
    return mean_score(scores.chosen, scores.normalisers, scoring, last)
