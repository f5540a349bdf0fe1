"""SpecEM's online feedback: the starting weights, rewards from the judges' shares, the Hedge
update, weights carried from answer to answer, a calibration from labelled items, and model
exit. Pure functions over numpy arrays, indexed by model as in ``vote``.
"""

from __future__ import annotations

import math

import numpy as np


def initial_weights(verifies: np.ndarray, sizes: np.ndarray, prior: str) -> np.ndarray:
    """Starting weights over the verifiers: equal (the paper), or in proportion to parameter
    count ("size"), the cheapest prior of which model judges best when nothing else is known."""
    base = np.where(verifies, sizes if prior == "size" else 1.0, 0.0).astype(np.float64)
    return base / base.sum()


def win_counts(
    normalised: np.ndarray,
    groups: dict[int, list[int]],
    judge_weights: np.ndarray | None = None,
    author: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate (keyed by its representative): how often a judge that did not draft it
    rated it at least as high as a rival (any other candidate, the judge's own included), and
    how many such comparisons there were. With ``judge_weights`` each comparison counts as
    much as its judge's weight. ``author[c]`` is the model that drafted candidate ``c``
    (default: candidate ``c`` is model ``c``'s draft)."""
    judges, candidates = normalised.shape
    weights = np.ones(judges) if judge_weights is None else judge_weights
    author = np.arange(candidates) if author is None else author
    wins = np.zeros(candidates)
    comparisons = np.zeros(candidates)
    for representative, drafted in groups.items():
        drafted_by = {int(author[c]) for c in drafted}
        for judge in range(judges):
            if judge in drafted_by or np.isnan(normalised[judge, representative]):
                continue
            for rival in groups:
                if rival == representative or np.isnan(normalised[judge, rival]):
                    continue
                comparisons[representative] += weights[judge]
                wins[representative] += weights[judge] * (normalised[judge, representative] >= normalised[judge, rival])
    return wins, comparisons


def rewards(
    normalised: np.ndarray,
    groups: dict[int, list[int]],
    judge_weights: np.ndarray | None = None,
    author: np.ndarray | None = None,
) -> np.ndarray:
    """Smoothed win rate ``(wins + 0.5) / (comparisons + 1)`` for every model, from its
    candidates (``author``: see ``win_counts``).

    The reference floors wins at 1 and divides by ``(K-1)^2``; with K = 2 that makes every
    reward 1 and the weights never move. Smoothing keeps rewards in (0, 1), distinct for
    different win counts at any K. Authors of the same merged text share its reward; a model
    with several candidates gets its best one's; models without a candidate this round get the
    mean reward of the others, so sitting out neither helps nor hurts them. ``judge_weights``
    (mean 1 over the judges) make a trusted judge's comparisons count for more.
    """
    wins, comparisons = win_counts(normalised, groups, judge_weights, author)
    per_candidate = (wins + 0.5) / (comparisons + 1.0)
    has_comparisons = comparisons > 0
    neutral = float(per_candidate[has_comparisons].mean()) if has_comparisons.any() else 0.5
    per_candidate = np.where(has_comparisons, per_candidate, neutral)
    author = np.arange(normalised.shape[1]) if author is None else author
    best: dict[int, float] = {}
    for representative, drafted in groups.items():
        for model in {int(author[c]) for c in drafted}:
            best[model] = max(best.get(model, -np.inf), float(per_candidate[representative]))
    out = np.full(normalised.shape[0], neutral)
    for model, value in best.items():
        out[model] = value
    return out


def draft_counts(weights: np.ndarray, drafters: list[int], budget: int) -> dict[int, int]:
    """A round's ``budget`` drafts shared out among ``drafters`` in proportion to their weights
    (largest remainders; ties to the heavier, then the earlier): a drafter whose share rounds
    to nothing does not draft this round (it still verifies), and the heaviest always drafts."""
    share = np.array([max(float(weights[i]), 0.0) for i in drafters])
    share = share / share.sum() * budget if share.sum() > 0 else np.full(len(drafters), budget / len(drafters))
    counts = np.floor(share).astype(int)
    order = sorted(range(len(drafters)), key=lambda k: (-(share[k] - counts[k]), -share[k], k))
    for k in order[: budget - int(counts.sum())]:  # the heaviest has the largest floor or remainder
        counts[k] += 1
    return {i: int(c) for i, c in zip(drafters, counts) if c > 0}


def learning_rate(base: float, n_models: int, round_number: int) -> float:
    """The paper's decaying rate: ``eta_k = base / sqrt(K * k)`` for round ``k`` (from 1)."""
    return base / math.sqrt(max(n_models, 1) * max(round_number, 1))


def hedge_update(weights: np.ndarray, reward: np.ndarray, eta: float) -> np.ndarray:
    """Multiplicative weights: ``w_i * exp(eta * r_i)``, renormalised to sum to 1."""
    updated = weights * np.exp(eta * (reward - reward.max()))
    return updated / updated.sum()


SIZE_GAP = 2.0  # the demo trio's two largest differ 2.35x, and from the prior it is no better than Qwen alone


def size_gap(sizes: dict[str, int]) -> tuple[str, str, float] | None:
    """The largest model, the next largest and how many times larger, when that is at least
    ``SIZE_GAP``: an ensemble helps most when its members are of comparable strength."""
    ranked = sorted(sizes.items(), key=lambda item: item[1], reverse=True)
    if len(ranked) < 2 or ranked[1][1] <= 0:
        return None
    (largest, big), (second, next_size) = ranked[:2]
    ratio = big / next_size
    return (largest, second, ratio) if ratio >= SIZE_GAP else None


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


def carried(log_weights: np.ndarray, anchor: np.ndarray, change: np.ndarray, memory: float) -> np.ndarray:
    """Hedge across answers, with forgetting: ``L <- anchor + (1 - 1/memory) (L - anchor) + change``.

    ``change`` is one answer's learning, ``log w_end - log w_start`` (its Hedge updates summed),
    so carrying on from ``w_end`` is the same Hedge run continued over the next answer. Old
    answers fade with weight ``(1 - 1/memory)`` each (about ``memory`` answers are remembered),
    back towards ``anchor``: the prior, or a calibration. Centred: only differences matter."""
    keep = 1.0 - 1.0 / memory
    out = anchor + keep * (log_weights - anchor) + change
    return out - out.mean()


def calibration(prior: np.ndarray, wrong: np.ndarray, items: int) -> np.ndarray:
    """Log-weights from labelled items: Hedge over the items, with each member's loss 1 when
    its own answer to an item was wrong (``wrong``: the count per member), starting from
    ``prior``, at ``eta = sqrt(8 ln K / T)``: the rate whose regret against the best member is
    smallest for T items and K members (Cesa-Bianchi and Lugosi, Theorem 2.2). Centred."""
    eta = math.sqrt(8 * math.log(max(len(prior), 2)) / max(items, 1))
    out = np.log(prior) - eta * wrong
    return out - out.mean()


def from_log_weights(log_weights: np.ndarray, verifies: np.ndarray) -> np.ndarray:
    """Weights over the verifiers from log-weights (0 for the other models)."""
    scaled = np.where(verifies, np.exp(log_weights - log_weights[verifies].max()), 0.0)
    return scaled / scaled.sum()
