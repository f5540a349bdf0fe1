"""The voting and online-feedback rule of SpecEM, as pure functions over numpy arrays.

Shapes: ``scores[v, c]`` is verifier ``v``'s score of candidate ``c`` (NaN where a verifier
did not score a candidate). Candidates and verifiers are both indexed by model, so the
candidate of model ``i`` is column ``i``.
"""

from __future__ import annotations

import math

import numpy as np


def normalise_logit_row(row: np.ndarray) -> np.ndarray:
    """Turn one verifier's mean raw logits into a distribution over candidates.

    All positive: ``s / sum(s)``, the paper's equation 3 (over candidates). Raw logits can be
    zero or negative, where that formula is undefined; then shift the row so its minimum
    sits at one mean gap above zero: order is kept, the result is a valid distribution, and
    equal scores give the uniform distribution.
    """
    row = np.asarray(row, dtype=np.float64)
    if row.size == 0:
        return row
    if np.all(row > 0):
        return row / row.sum()
    spread = float(row.max() - row.min())
    gap = spread / row.size if spread > 0 else 1.0
    shifted = row - row.min() + gap
    return shifted / shifted.sum()


def normalise_logprob_row(row: np.ndarray, tokens: float = 1.0) -> np.ndarray:
    """Mean log-probabilities -> softmax over candidates of ``tokens * mean``.

    ``tokens`` = 1 compares per-token geometric-mean probabilities, which is flat: a candidate
    the judge finds 0.75 nats per token less likely, over a 10-token segment, is 1800 times
    less likely as a whole but still gets half the share of the other. ``tokens`` = L compares
    the candidates as whole L-token segments (length-normalised sequence probabilities), the
    judge's actual preference between them.
    """
    return softmax(np.asarray(row, dtype=np.float64) * tokens)


def softmax(values: np.ndarray) -> np.ndarray:
    if values.size == 0:
        return values
    exp = np.exp(values - values.max())
    return exp / exp.sum()


def normalise(scores: np.ndarray, scoring: str, tokens: float = 1.0) -> np.ndarray:
    """Normalise each verifier's row over the candidates it scored (NaNs stay NaN);
    ``tokens`` is the length at which ``logprob`` rows are compared (see above)."""
    out = np.full(scores.shape, np.nan)
    for v, row in enumerate(scores):
        present = ~np.isnan(row)
        if present.any():
            values = row[present]
            out[v, present] = (
                normalise_logit_row(values) if scoring == "logit" else normalise_logprob_row(values, tokens)
            )
    return out


def combine(normalised: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted vote ``y_c = sum_v w_v * s^[v, c]``, over the verifiers that scored ``c``,
    re-weighted so a candidate is not penalised for a verifier that did not score it."""
    present = ~np.isnan(normalised)
    weighted = np.where(present, normalised, 0.0) * weights[:, None]
    mass = (present * weights[:, None]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, weighted.sum(axis=0) / mass, np.nan)


def pick_winner(candidates: list[int], combined: np.ndarray, copied: np.ndarray | None = None) -> int:
    """The candidate with the highest vote; with ``copied`` (each candidate's share of words
    that only repeat the answer so far), the vote is first scaled by ``1 - copied``.

    Repeating is what every member predicts best once a loop has started, so the plain vote
    keeps choosing it. The discount lets a candidate that says something new win, while a
    loop that every candidate continues still goes to the vote (ties on the discounted vote
    fall back to the plain one).
    """
    if copied is None:
        return max(candidates, key=lambda c: combined[c])
    return max(candidates, key=lambda c: (combined[c] * (1.0 - copied[c]), combined[c]))


def initial_weights(verifies: np.ndarray, sizes: np.ndarray, prior: str) -> np.ndarray:
    """Starting weights over the verifiers: equal (the paper), or in proportion to parameter
    count ("size"), the cheapest prior of which model judges best when nothing else is known."""
    base = np.where(verifies, sizes if prior == "size" else 1.0, 0.0).astype(np.float64)
    return base / base.sum()


def merge_identical(texts: dict[int, str], priority: np.ndarray) -> dict[int, list[int]]:
    """Group drafters whose drafts are the same text: ``{representative: [authors...]}``.

    The same text is one candidate. Scoring copies separately would split every verifier's
    normalised mass between them (measured on the demo trio: two weak models drafting the same
    wrong step outvoted the strong model's right one). The representative is the author with
    the highest ``priority`` (current weight), ties to the lower index.
    """
    groups: dict[str, list[int]] = {}
    for index, text in texts.items():
        groups.setdefault(text, []).append(index)
    merged = {}
    for authors in groups.values():
        ordered = sorted(authors, key=lambda i: (-priority[i], i))
        merged[ordered[0]] = ordered
    return merged


def mask_self_judgements(normalised: np.ndarray, groups: dict[int, list[int]]) -> np.ndarray:
    """Remove each verifier's score of a candidate it drafted itself (alone or together with
    others). Models rank their own draft first about half the time against a chance of 1/K
    (SPECEM.md §4)."""
    out = normalised.copy()
    for representative, authors in groups.items():
        out[authors, representative] = np.nan
    return out


def combine_log(normalised: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Log-linear pooling: ``y_c ∝ exp(Σ_v w_v log ŝ[v, c] / Σ_v w_v)`` over the verifiers
    that scored ``c``, then normalised over the candidates. A weighted geometric mean: a
    trusted verifier that finds a candidate very unlikely can veto it, which the linear vote
    (a weighted arithmetic mean, where a "no" costs at most that verifier's weight) cannot."""
    present = ~np.isnan(normalised)
    logs = np.log(np.clip(np.where(present, normalised, 1.0), 1e-12, None))
    mass = (present * weights[:, None]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = np.where(mass > 0, (logs * present * weights[:, None]).sum(axis=0) / mass, np.nan)
    out = np.full(pooled.shape, np.nan)
    scored = ~np.isnan(pooled)
    out[scored] = softmax(pooled[scored])
    return out


def win_counts(
    normalised: np.ndarray, groups: dict[int, list[int]], judge_weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate (keyed by its representative): how often a judge that did not draft it
    rated it at least as high as a rival (any other candidate, the judge's own included), and
    how many such comparisons there were. With ``judge_weights`` each comparison counts as
    much as its judge's weight."""
    size = normalised.shape[0]
    weights = np.ones(size) if judge_weights is None else judge_weights
    wins = np.zeros(size)
    comparisons = np.zeros(size)
    for author, drafted_by in groups.items():
        for judge in range(size):
            if judge in drafted_by or np.isnan(normalised[judge, author]):
                continue
            for rival in groups:
                if rival == author or np.isnan(normalised[judge, rival]):
                    continue
                comparisons[author] += weights[judge]
                wins[author] += weights[judge] * (normalised[judge, author] >= normalised[judge, rival])
    return wins, comparisons


def rewards(
    normalised: np.ndarray, groups: dict[int, list[int]], judge_weights: np.ndarray | None = None
) -> np.ndarray:
    """Smoothed win rate ``(wins + 0.5) / (comparisons + 1)`` for every author of a candidate.

    The reference floors wins at 1 and divides by ``(K-1)^2``; with K = 2 that makes every
    reward 1 and the weights never move. Smoothing keeps rewards in (0, 1), distinct for
    different win counts at any K. Authors of the same merged text share its reward; models
    without a candidate this round get the mean reward of the others, so sitting out neither
    helps nor hurts them. ``judge_weights`` (mean 1 over the judges) make a trusted judge's
    comparisons count for more.
    """
    wins, comparisons = win_counts(normalised, groups, judge_weights)
    out = (wins + 0.5) / (comparisons + 1.0)
    has_comparisons = comparisons > 0
    neutral = float(out[has_comparisons].mean()) if has_comparisons.any() else 0.5
    out = np.where(has_comparisons, out, neutral)
    for representative, authors in groups.items():
        out[authors] = out[representative]
    return out


def learning_rate(base: float, n_models: int, round_number: int) -> float:
    """The paper's decaying rate: ``eta_k = base / sqrt(K * k)`` for round ``k`` (from 1)."""
    return base / math.sqrt(max(n_models, 1) * max(round_number, 1))


def hedge_update(weights: np.ndarray, reward: np.ndarray, eta: float) -> np.ndarray:
    """Multiplicative weights: ``w_i * exp(eta * r_i)``, renormalised to sum to 1."""
    updated = weights * np.exp(eta * (reward - reward.max()))
    return updated / updated.sum()


def exiting_drafters(
    share_totals: np.ndarray, active: list[int], rounds: int, warmup: int, exit_share: float
) -> list[int]:
    """SpecFuse's model exit: after ``warmup`` rounds, drafters whose cumulative share of the
    combined score is below ``exit_share / len(active)`` stop drafting. The best drafter is
    never removed, so at least one always drafts."""
    if rounds < warmup or len(active) <= 1:
        return []
    shares = share_totals[active] / max(float(share_totals[active].sum()), 1e-12)
    best = active[int(np.argmax(shares))]
    threshold = exit_share / len(active)
    return [model for model, share in zip(active, shares) if share < threshold and model != best]
