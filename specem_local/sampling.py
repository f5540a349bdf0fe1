"""Token samplers: factories returning plain callables ``logits_row -> token id``.

Each model drafts with its own seeded generator, so a fixed seed reproduces an answer in
round-robin and in threaded drafting alike.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specem_local.config import EnsembleSettings

Sampler = Callable[[np.ndarray], int]


def greedy_sampler() -> Sampler:
    return lambda logits: int(np.argmax(logits))


def filtered_probabilities(
    logits: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids kept by top-k, then top-p, then min-p, and their renormalised probabilities."""
    if 0 < top_k < logits.size:
        ids = np.argpartition(logits, -top_k)[-top_k:]
    else:
        ids = np.arange(logits.size)
    scaled = logits[ids].astype(np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")
    ids, scaled = ids[order], scaled[order]
    probs = np.exp(scaled - scaled[0])
    probs /= probs.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), top_p) + 1)
        ids, probs = ids[:keep], probs[:keep]
    if min_p > 0.0:
        keep_mask = probs >= min_p * probs[0]
        ids, probs = ids[keep_mask], probs[keep_mask]
    return ids, probs / probs.sum()


def make_sampler(settings: EnsembleSettings, rng: np.random.Generator) -> Sampler:
    """The sampler the settings ask for: greedy, or temperature + top-k/top-p/min-p."""
    if settings.greedy or settings.temperature == 0:
        return greedy_sampler()

    def sample(logits: np.ndarray) -> int:
        ids, probs = filtered_probabilities(
            logits, settings.temperature, settings.top_k, settings.top_p, settings.min_p
        )
        return int(ids[rng.choice(ids.size, p=probs)])

    return sample
