"""Weak members as a contrast, token by token, where they share the strong member's vocabulary.

O'Brien & Lewis ("Contrastive Decoding Improves Reasoning in Large Language Models") choose each
next token by ``(1 + beta) * expert - beta * amateur`` over the tokens the expert finds plausible
(at least ``PLAUSIBLE`` of its favourite's probability); it works step by step, not by reranking
whole answers. When members share one vocabulary (Qwen2.5-Coder 1.5B and 0.5B) the contrast can
be exactly that: the expert drafts, and every amateur reads each drafted token along with it
(one more single-token decode each), so its next row is always there to contrast with. Members
with other tokenizers can only be contrasted per segment, in the vote (``vote.combine_contrast``).

Logits and log-probabilities differ by one constant per row, which neither the plausibility
test nor the choice sees, so the contrast works on raw logits and needs no softmax.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from specem_local.engine.drafted import Draft
from specem_local.engine.member import Member
from specem_local.engine.sampling import Sampler
from specem_local.engine.vote import PLAUSIBLE
from specem_local.settings import EnsembleSettings


def plausible(expert: np.ndarray) -> np.ndarray:
    """The tokens the expert gives at least ``PLAUSIBLE`` of its top probability (NaN: never)."""
    return np.asarray(expert) >= np.nanmax(expert) + math.log(PLAUSIBLE)


def contrast_logits(expert: np.ndarray, amateurs: list[np.ndarray], weights: np.ndarray, beta: float) -> np.ndarray:
    """The contrasted row: ``(1 + beta) * expert - beta * pooled amateurs`` (the amateurs' logits
    averaged by ``weights``: a weighted geometric mean of their distributions) for the tokens the
    expert gives at least ``PLAUSIBLE`` of its top probability, ``-inf`` for the rest. Rows of
    float logits; NaN entries of the expert count as implausible."""
    expert = np.asarray(expert, dtype=np.float64)
    kept = plausible(expert)
    if not amateurs or beta == 0:
        return np.where(kept, expert, -np.inf)
    shares = np.asarray(weights, dtype=np.float64)
    shares = shares / shares.sum() if shares.sum() > 0 else np.full(len(amateurs), 1.0 / len(amateurs))
    pooled = sum(share * np.asarray(row, dtype=np.float64) for share, row in zip(shares, amateurs))
    with np.errstate(invalid="ignore"):
        contrasted = (1.0 + beta) * expert - beta * pooled
    contrasted = np.where(np.isnan(contrasted), expert, contrasted)  # an amateur without a value: the expert's
    return np.where(kept, contrasted, -np.inf)


class TokenContrast:
    """One answer's token-level contrast: the expert's drafts are contrasted, token by token,
    with the amateurs (members of the same vocabulary, which read every drafted token along)."""

    def __init__(self, expert: int, amateurs: list[int], beta: float) -> None:
        self.expert = expert
        self.amateurs = amateurs
        self.beta = beta
        self.read_tokens = 0  # tokens the amateurs decoded reading along, all together

    def draft(
        self,
        members: list[Member],
        weights: np.ndarray,
        tokens: int,
        sampler: Sampler,
        cancel: threading.Event,
        at_most: int,
        settings: EnsembleSettings,
    ) -> Draft:
        """The expert's draft of up to ``tokens`` tokens, each chosen by ``sampler`` from the
        contrasted row (the plain row where only one token is plausible). Afterwards every
        amateur's sequence 0 holds the same tokens (its own draft of the same text, as far as its
        KV memory is concerned). ``Draft.contrast_changed`` counts the tokens whose most likely
        choice the contrast changed."""
        readers = [members[a] for a in self.amateurs]
        for reader in readers:
            reader.begin_reading()
        amateur_weights = np.asarray([max(float(weights[a]), 0.0) for a in self.amateurs])
        changed = False  # whether the contrast changed the top choice of the token being chosen
        count = 0

        def choose(row: np.ndarray) -> int:
            nonlocal changed
            kept = plausible(row)
            if np.count_nonzero(kept) == 1:  # nothing to contrast: the amateurs need not catch up
                changed = False
                return sampler(np.where(kept, row, -np.inf))
            contrasted = contrast_logits(row, [r.read_row for r in readers], amateur_weights, self.beta)
            changed = int(np.argmax(contrasted)) != int(np.nanargmax(row))
            return sampler(contrasted)

        def read(token: int) -> None:
            nonlocal count
            count += changed
            for reader in readers:
                reader.read(token)
            self.read_tokens += len(readers)

        drafted = members[self.expert].draft(
            tokens, choose, cancel, at_most=at_most, ignore_eos=settings.ignore_eos, on_token=read
        )
        for reader in readers:
            reader.end_reading(drafted)
        drafted.contrast_changed = count
        return drafted
