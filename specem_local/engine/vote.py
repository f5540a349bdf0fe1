"""The vote: which candidate segment wins a round, and why. Pure functions over numpy arrays.

Shapes: ``scores[v, c]`` is verifier ``v``'s score of candidate ``c`` (NaN where a verifier did
not score a candidate). Verifiers are indexed by model; model ``i``'s (first) draft is column
``i``, and a round with a drafting budget adds columns for models' extra drafts (``author[c]``
says whose). Identical drafts are merged into one candidate, kept in the column of its
representative (``groups``: representative -> the candidates merged into it).

The engine calls ``shortcut`` (no vote needed) or ``tally`` (the weighted vote); both return a
``Tally`` that says the winner and why, which goes into the round's event and the inspector's
explanation (``explain``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specem_local.events import Candidate, Decision, RoundEvent

DECISIONS: dict[Decision, str] = {
    "vote": "won the weighted vote",
    "contrast": "won the contrastive vote (the heaviest verifier against the others)",
    "fast-finish": "ended the answer first (fast finish: no vote)",
    "only-candidate": "was the only non-empty draft (no vote needed)",
    "confident": "was sure of every token (vote gate: the others did not draft)",
    "picked": "was picked by you over the vote's winner (the answer went on from it)",
    "forced": "was forced by the answer's format (a key, punctuation): no model drafted it",
    "options": "was the option the members' weighted beliefs favoured (every member scored every option, both ways)",
}


@dataclass(frozen=True)
class VoteRule:
    """The settings that shape the vote (a view of ``EnsembleSettings``)."""

    scoring: str = "logprob"  # "logit" or "logprob"
    segment_tokens: int = 10  # logprob rows are compared at this length with normalise = "segment"
    normalise: str = "segment"
    self_vote: bool = True
    pooling: str = "linear"
    contrast: float = 0.0  # beta: the heaviest verifier against the others (0: the weighted vote)


@dataclass(frozen=True)
class Tally:
    """The outcome of one round's selection."""

    winner: int
    decision: Decision  # a key of DECISIONS
    shares: np.ndarray  # normalised scores[verifier, candidate]; NaN: not scored
    combined: np.ndarray | None  # the weighted vote per candidate
    copied: np.ndarray | None = None  # per candidate: share of words repeating the answer (loop_guard)
    runner_up: int | None = None
    discounted: int | None = None  # would have won without the loop guard
    ranked_first_by: tuple[int, ...] = ()  # verifiers whose highest share went to the winner


# -- normalisation -------------------------------------------------------------------------------
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


# -- pooling -------------------------------------------------------------------------------------
def combine(normalised: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted vote ``y_c = sum_v w_v * s^[v, c]``, over the verifiers that scored ``c``,
    re-weighted so a candidate is not penalised for a verifier that did not score it."""
    present = ~np.isnan(normalised)
    weighted = np.where(present, normalised, 0.0) * weights[:, None]
    mass = (present * weights[:, None]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, weighted.sum(axis=0) / mass, np.nan)


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


PLAUSIBLE = 0.1  # contrast: candidates the strong verifier finds at least this share of its favourite's


def combine_contrast(normalised: np.ndarray, weights: np.ndarray, beta: float) -> np.ndarray:
    """Contrastive vote: the heaviest verifier (the expert) against the others (the amateurs,
    pooled by their weights as a weighted geometric mean), ``(1 + beta) log expert - beta log
    amateur`` per candidate, over the candidates the expert finds plausible (at least
    ``PLAUSIBLE`` of its favourite's share); returned as a distribution over them (0 for the
    rest, NaN where no verifier scored). O'Brien & Lewis's contrastive decoding, per segment:
    where the models' tokenizers differ, the segment is the unit all of them can score. A
    candidate no amateur scored is judged by the expert alone; when the expert scored no
    candidate (its own, with self-votes masked), the weighted vote decides."""
    expert = int(np.argmax(weights))
    strong = normalised[expert]
    judged = ~np.isnan(strong)
    if not judged.any():
        return combine(normalised, weights)
    plausible = judged & (np.nan_to_num(strong) >= PLAUSIBLE * np.nanmax(strong))
    log_strong = np.log(np.clip(np.nan_to_num(strong), 1e-12, None))
    amateurs = [v for v in range(len(weights)) if v != expert and weights[v] > 0]
    pooled = combine_log(normalised[amateurs], weights[amateurs]) if amateurs else np.full(len(strong), np.nan)
    log_weak = np.where(np.isnan(pooled), log_strong, np.log(np.clip(np.nan_to_num(pooled), 1e-12, None)))
    out = np.where(np.isnan(normalised).all(axis=0), np.nan, 0.0)
    out[plausible] = softmax(((1.0 + beta) * log_strong - beta * log_weak)[plausible])
    return out


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


def mask_self_judgements(
    normalised: np.ndarray, groups: dict[int, list[int]], author: np.ndarray | None = None
) -> np.ndarray:
    """Remove each verifier's score of a candidate it drafted itself (alone or together with
    others; ``author[c]``: the model that drafted candidate ``c``, default model ``c``). Models
    rank their own draft first about half the time against a chance of 1/K."""
    author = np.arange(normalised.shape[1]) if author is None else author
    out = normalised.copy()
    for representative, drafted in groups.items():
        out[sorted({int(author[c]) for c in drafted}), representative] = np.nan
    return out


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


# -- one round -----------------------------------------------------------------------------------
def shortcut(
    groups: dict[int, list[int]], enders: list[int], priority: np.ndarray, fast_finish: bool, verifiers: int
) -> Tally | None:
    """A winner without a vote: with ``fast_finish`` the candidate that ends the answer whose
    author is heaviest (``priority``, per candidate), or the only candidate there is. None when
    a vote is needed."""
    unscored = np.full((verifiers, len(priority)), np.nan)
    if fast_finish and enders:
        return Tally(max(enders, key=lambda i: priority[i]), "fast-finish", unscored, None)
    if len(groups) == 1:
        return Tally(next(iter(groups)), "only-candidate", unscored, None)
    return None


def tally(
    scores: np.ndarray,
    weights: np.ndarray,
    groups: dict[int, list[int]],
    rule: VoteRule,
    copied: np.ndarray | None = None,
    author: np.ndarray | None = None,
) -> Tally:
    """The weighted vote over the candidates in ``groups``: normalise each verifier's row,
    pool with the weights (without self-votes unless ``rule.self_vote``; ``author``: see
    ``mask_self_judgements``), discount copies (``copied``, with the loop guard) and pick the
    winner."""
    unit = rule.segment_tokens if rule.normalise == "segment" else 1
    shares = normalise(scores, rule.scoring, unit)
    votes = shares if rule.self_vote else mask_self_judgements(shares, groups, author)
    if rule.contrast > 0:
        combined = combine_contrast(votes, weights, rule.contrast)
    else:
        combined = (combine_log if rule.pooling == "log" else combine)(votes, weights)
    candidates = list(groups)
    winner = pick_winner(candidates, combined, copied)
    plain_winner = pick_winner(candidates, combined)
    others = [c for c in candidates if c != winner]
    runner_up = max(others, key=lambda c: combined[c]) if others else None
    ranked_first_by = tuple(
        v
        for v in range(len(weights))
        if not np.isnan(shares[v, winner])
        and all(shares[v, winner] >= shares[v, c] for c in candidates if not np.isnan(shares[v, c]))
    )
    return Tally(
        winner,
        "contrast" if rule.contrast > 0 else "vote",
        shares,
        combined,
        copied,
        runner_up,
        plain_winner if plain_winner != winner else None,
        ranked_first_by,
    )


def explain(event: RoundEvent) -> str:
    """One or two sentences on why a round's winner won, from its event."""
    if not event.candidates:  # forced by the constraint: no candidate, no vote
        return f"Round {event.index}: {event.text!r} {DECISIONS.get(event.decision, event.decision)}."
    won = winning_candidate(event)
    decided = DECISIONS.get(event.decision, event.decision)
    if event.decision == "only-candidate" and not set(event.drafters) - {won.model}:
        decided = "was the only draft: no other model drafted this round (no vote needed)"
    text = f"Round {event.index}: {candidate_label(won)} {decided}"
    rivals = [c for c in event.candidates if c is not won and c.combined is not None]
    if event.decision == "options" and won.combined is not None and rivals:
        rival = max(rivals, key=lambda c: c.combined or 0.0)
        text += f", {won.combined:.3f} against {rival.combined:.3f} for {rival.text}."
        if event.ranked_first_by:
            text += f" Believed most by: {', '.join(event.ranked_first_by)}."
    if event.decision in ("vote", "contrast") and won.combined is not None and rivals:
        rival = max(rivals, key=lambda c: c.combined or 0.0)
        text += f" with {won.combined:.3f} against {rival.combined:.3f} ({candidate_label(rival)})."
        discounted = next((c for c in event.candidates if c.model == event.discounted), None)
        if discounted is not None and discounted.copied:
            text += f" The loop guard discounted {discounted.model}: {discounted.copied:.0%} of it repeats the answer."
        if event.ranked_first_by:
            text += f" Ranked first by: {', '.join(event.ranked_first_by)}."
    if won.contrasted_with:
        text = text if text.endswith(".") else text + "."
        text += (
            f" Drafted against {', '.join(won.contrasted_with)} token by token (contrast): its top choice changed"
            f" on {won.contrast_changed} token{'' if won.contrast_changed == 1 else 's'}."
        )
    if event.confidence is not None:
        text = text if text.endswith(".") else text + "."
        text += f" Its leading draft's least likely token had p = {event.confidence:.2f}."
    weights = ", ".join(f"{name} {weight:.2f}" for name, weight in event.weights.items())
    return f"{text}\nWeights after this round: {weights}."


def candidate_label(candidate: Candidate) -> str:
    """A candidate's name: its model, and which of its drafts (``#2``...) when the drafting
    budget gave the model several; an option, its text."""
    if candidate.option:
        return candidate.text
    return candidate.model if candidate.sample == 0 else f"{candidate.model} #{candidate.sample + 1}"


def winning_candidate(event: RoundEvent) -> Candidate:
    """The candidate that won a round: its author's, the one the vote liked best."""
    own = [c for c in event.candidates if c.model == event.author]
    return max(own, key=lambda c: (c.text == event.text, c.combined or 0.0))
