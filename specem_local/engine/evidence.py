"""How sure an answer is (issue 55): the evidence the rounds already hold, turned into one
calibrated probability that the answer is right.

Each round gives, for the segment it committed: the author's own probability of each of its
tokens (the rows it drafted them with, in its own tokens), and, when the round was voted, how far
the winner led the runner-up in the weighted vote and the share of verifiers that ranked it
first. An answer's evidence aggregates those over its rounds with a minimum or a low quantile
(one unsure token is enough to be wrong), and a logistic ``Calibrator``, fitted on labelled items
(``fit``), maps it to a probability. Pure: plain functions over numbers.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specem_local.engine.drafted import Draft
from specem_local.engine.vote import Tally
from specem_local.events import TokenLogprob
from specem_local.labelled import extract_number

FEATURES = (
    "least_logprob",  # the least likely token of the answer (log-probability, the author's own)
    "low_logprob",  # the 10th percentile of its tokens' log-probabilities
    "mean_logprob",  # their mean
    "least_margin",  # the smallest lead of a voted round's winner over its runner-up
    "mean_agreement",  # the mean share of verifiers that ranked a voted round's winner first
    "voted",  # the share of rounds that were voted (the others had one candidate)
    "ended",  # 1 when the answer ended by itself, 0 when a limit cut it
    "log_tokens",  # log(1 + the answer's tokens)
    "witnesses",  # paid: the share of checking answers (other members, or samples) with the same final answer
)
FLOOR = -20.0  # a log-probability below this is taken as this (a token the author all but ruled out)


@dataclass(frozen=True)
class RoundEvidence:
    """What one round says of its segment: the author's log-probability of each of its tokens,
    and for a voted round the winner's lead and the verifiers' agreement (None otherwise)."""

    logprobs: tuple[float, ...]
    margin: float | None = None
    agreement: float | None = None


def token_logprobs(rows: Sequence[np.ndarray], tokens: Sequence[int], normalisers: np.ndarray) -> tuple[float, ...]:
    """Each token's log-probability in the row that predicted it (``rows[i]`` predicted
    ``tokens[i]``; ``normalisers[i]`` is that row's log-sum-exp)."""
    return tuple(max(float(rows[i][token] - normalisers[i]), FLOOR) for i, token in enumerate(tokens))


def segment_evidence(draft: Draft, tally: Tally | None) -> RoundEvidence:
    """A committed segment's evidence: its author's log-probability of each of its tokens (none
    when its text is not spelt by whole drafted tokens) and, for a voted round, the vote's."""
    tokens = draft.text_tokens or []
    logprobs = token_logprobs(draft.rows, tokens, draft.normalisers[: len(tokens)]) if tokens else ()
    if tally is None:
        return RoundEvidence(logprobs)
    margin, agreement = vote_evidence(
        tally.combined, tally.shares, tally.winner, tally.runner_up, tally.ranked_first_by
    )
    return RoundEvidence(logprobs, margin, agreement)


def shown_part(draft: Draft, shown: str, token_bytes: Callable[[int], bytes]) -> Draft:
    """The winning draft as far as the answer shows it (a stop string cut it short): its whole
    tokens within ``shown``, so that neither its log-probabilities nor its evidence speak of text
    the answer does not have."""
    if shown == draft.text or draft.text_tokens is None:
        return draft
    room, kept = len(shown.encode("utf-8")), 0
    for token in draft.text_tokens:
        room -= len(token_bytes(token))
        if room < 0:
            break
        kept += 1
    return dataclasses.replace(draft, text=shown, text_tokens=draft.text_tokens[:kept])


def token_choices(draft: Draft, top: int, token_bytes: Callable[[int], bytes]) -> tuple[TokenLogprob, ...]:
    """The segment's tokens as OpenAI's ``logprobs.content`` has them: each token's text, bytes
    and log-probability in its author's distribution, and the ``top`` most likely tokens there."""
    tokens = draft.text_tokens or []
    out = []
    for i, token in enumerate(tokens):
        row, normaliser = draft.rows[i], float(draft.normalisers[i])
        best = np.argpartition(row, -top)[-top:] if top > 0 else np.array([], dtype=np.int64)
        best = best[np.argsort(-row[best])]
        pieces = [(token_bytes(int(t)), float(row[t])) for t in best]  # each alternative's bytes read once
        alternatives = tuple((_text(raw), _floored(logit - normaliser), tuple(raw)) for raw, logit in pieces)
        piece = token_bytes(token)
        out.append(TokenLogprob(_text(piece), _floored(float(row[token]) - normaliser), tuple(piece), alternatives))
    return tuple(out)


def _floored(logprob: float) -> float:
    """A log-probability as reported: ``FLOOR`` at least, and ``FLOOR`` for a NaN (a row of
    infinities), never a number no client can read."""
    return logprob if logprob >= FLOOR else FLOOR


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def vote_evidence(combined: np.ndarray | None, shares: np.ndarray, winner: int, runner_up: int | None,
                  ranked_first_by: Sequence[int]) -> tuple[float | None, float | None]:  # fmt: skip
    """A voted round's (margin, agreement): the winner's combined vote less the runner-up's, and
    the share of the verifiers that scored the winner who ranked it first."""
    if combined is None:
        return None, None
    margin = float(combined[winner] - combined[runner_up]) if runner_up is not None else None
    judged = int(np.sum(~np.isnan(shares[:, winner])))
    return margin, (len(ranked_first_by) / judged if judged else None)


def answer_evidence(rounds: Sequence[RoundEvidence], ended: bool, tokens: int) -> dict[str, float]:
    """An answer's evidence (``FEATURES``), from its rounds; NaN where there is none (no token
    drafted, no round voted)."""
    logprobs = np.array([lp for r in rounds for lp in r.logprobs], dtype=np.float64)
    margins = [r.margin for r in rounds if r.margin is not None]
    agreements = [r.agreement for r in rounds if r.agreement is not None]
    nan = math.nan
    return {
        "least_logprob": float(logprobs.min()) if logprobs.size else nan,
        "low_logprob": float(np.quantile(logprobs, 0.1)) if logprobs.size else nan,
        "mean_logprob": float(logprobs.mean()) if logprobs.size else nan,
        "least_margin": min(margins) if margins else nan,
        "mean_agreement": float(np.mean(agreements)) if agreements else nan,
        "voted": sum(r.agreement is not None for r in rounds) / len(rounds) if rounds else 0.0,
        "ended": 1.0 if ended else 0.0,
        "log_tokens": math.log1p(tokens),
    }


def answer_confidence(
    calibrator: Calibrator | None, rounds: Sequence[RoundEvidence], ended: bool, tokens: int, abstain_below: float
) -> dict[str, Any]:
    """The final record's fields of how sure an answer is: the calibrator's reading of its rounds'
    evidence, what it was fitted on, the evidence itself, and whether it is below ``abstain_below``
    (the setting); none without a calibrator. An answer with nothing written (no round, or no
    token) is read as the least the calibrator can say: its evidence would be all fill-ins,
    which read as an ordinary answer."""
    if calibrator is None:
        return {}
    evidence = answer_evidence(rounds, ended, tokens)
    confidence = calibrator.probability(evidence) if rounds and tokens else calibrator.least()
    return {
        "confidence": confidence,
        "confidence_from": calibrator.fitted_on,
        "evidence": {name: value for name, value in evidence.items() if math.isfinite(value)},
        "unsure": confidence < abstain_below,
    }


def round_sureness(
    calibrator: Calibrator | None, evidence: RoundEvidence, winning: Draft, top: int,
    token_bytes: Callable[[int], bytes], tokens: int,
) -> dict[str, Any]:  # fmt: skip
    """A round event's fields of how sure it is: the calibrator's reading of its evidence alone,
    its least likely token, its margin and agreement, and, when asked (``top`` >= 0: the
    ``logprobs`` setting), its tokens' log-probabilities."""
    alone = answer_evidence([evidence], True, tokens)
    return {
        "sure": calibrator.probability(alone) if calibrator is not None and evidence.logprobs else None,
        "least_probability": math.exp(min(evidence.logprobs)) if evidence.logprobs else None,
        "margin": evidence.margin,
        "agreement": evidence.agreement,
        "logprobs": token_choices(winning, top, token_bytes) if top >= 0 else (),
    }


def final_answer(text: str, parsed: object = None) -> str | None:
    """What two answers must share to agree: a parsed answer (a format's value) as JSON, else
    the final number of the text (``labelled.extract_number``), else its last non-empty line,
    its case and spacing ignored; None for an empty answer."""
    if parsed is not None:
        return json.dumps(parsed, sort_keys=True, default=str)
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.dumps(json.loads(text), sort_keys=True)
        except ValueError:
            pass
    number = extract_number(text)
    if number is not None:
        return repr(round(number, 6))
    lines = [" ".join(line.split()).lower() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def answer_agreement(first: object, second: object) -> float:
    """1 when two final answers are the same (neither missing), else 0."""
    return 1.0 if first is not None and first == second else 0.0


@dataclass(frozen=True)
class Calibrator:
    """A logistic map from an answer's evidence to the probability that it is right.
    ``fill``: the value a missing feature takes (its mean where it was present, when fitted);
    ``fitted_on``: what it was fitted on, in words. A fitted one also keeps each feature's range
    (``low``, ``high``) and how many answers it saw (``answers``): evidence outside the range is
    read at its edge, for a logistic map extrapolates without bound (a two-token answer scored by
    a map fitted on 150-token ones came out 1 - 1e-10 sure), and no probability is surer than
    ``answers`` can show (rule of succession: within [1/(n+2), (n+1)/(n+2)])."""

    weights: tuple[float, ...]  # one per FEATURES
    intercept: float
    fill: tuple[float, ...]
    fitted_on: str
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    answers: int | None = None

    def probability(self, evidence: Mapping[str, float]) -> float:
        values = [evidence.get(name, math.nan) for name in FEATURES]
        x = [fill if not math.isfinite(v) else v for v, fill in zip(values, self.fill)]
        if self.low is not None and self.high is not None:
            x = [min(max(v, low), high) for v, low, high in zip(x, self.low, self.high)]
        z = self.intercept + sum(w * v for w, v in zip(self.weights, x))
        p = 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))
        if self.answers is None:
            return p
        return min(max(p, self.least()), (self.answers + 1) / (self.answers + 2))

    def least(self) -> float:
        """The least it says of any answer: 1/(n+2) for one fitted on n answers, else 0."""
        return 0.0 if self.answers is None else 1 / (self.answers + 2)

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "weights": list(self.weights), "intercept": self.intercept, "fill": list(self.fill),
            "fitted_on": self.fitted_on, "features": list(FEATURES),
        }  # fmt: skip
        if self.low is not None and self.high is not None:
            data.update(low=list(self.low), high=list(self.high))
        if self.answers is not None:
            data["answers"] = self.answers
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Calibrator:
        features = data.get("features")
        if features != list(FEATURES):
            raise ValueError(f"a calibrator of other features: {features}")
        weights, fill, intercept = data["weights"], data["fill"], data["intercept"]
        assert isinstance(weights, list) and isinstance(fill, list) and isinstance(intercept, (int, float))
        low, high, answers = data.get("low"), data.get("high"), data.get("answers")
        assert (low is None or isinstance(low, list)) and (high is None or isinstance(high, list))
        assert (low is None) == (high is None) and (answers is None or isinstance(answers, int))
        return cls(
            tuple(map(float, weights)), float(intercept), tuple(map(float, fill)), str(data["fitted_on"]),
            None if low is None else tuple(map(float, low)), None if high is None else tuple(map(float, high)),
            answers,
        )  # fmt: skip


def fit(evidence: Sequence[Mapping[str, float]], right: Sequence[bool], fitted_on: str, l2: float = 1.0) -> Calibrator:
    """The logistic calibrator of ``evidence`` for ``right`` (Newton's method with an L2 penalty
    ``l2`` on the weights of standardised features, so that a few dozen items give a stable fit)."""
    if len(evidence) != len(right) or len(set(right)) < 2:
        raise ValueError("fitting needs labelled answers, both right and wrong ones")
    raw = np.array([[e.get(name, math.nan) for name in FEATURES] for e in evidence], dtype=np.float64)
    raw[~np.isfinite(raw)] = np.nan
    present = ~np.isnan(raw)
    fill = np.where(
        present.any(axis=0), np.where(present, raw, 0.0).sum(axis=0) / np.maximum(present.sum(axis=0), 1), 0.0
    )
    x = np.where(present, raw, fill)
    centre, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - centre) / scale])
    y = np.asarray(right, dtype=np.float64)
    beta = np.zeros(z.shape[1])
    penalty = np.diag([0.0] + [l2] * (z.shape[1] - 1))
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -40, 40)))
        gradient = z.T @ (p - y) + penalty @ beta
        hessian = z.T @ (z * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian + 1e-9 * np.eye(len(beta)), gradient)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = beta[1:] / scale
    intercept = float(beta[0] - np.sum(beta[1:] * centre / scale))
    return Calibrator(tuple(map(float, weights)), intercept, tuple(map(float, fill)), fitted_on,
                      tuple(map(float, x.min(axis=0))), tuple(map(float, x.max(axis=0))), len(x))  # fmt: skip
