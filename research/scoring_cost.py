"""Host-side cost of scoring candidate rows, per vocabulary size: the way before issue 16
(copy the rows out of llama.cpp's buffer, stack them again, log-sum-exp through float64
temporaries) against ``scoring.row_scores`` on the buffer itself (float32, in place, one copy
only of the row after each candidate). No model is loaded: random rows of each demo model's
vocabulary size stand in for llama.cpp's output.

    python -m specem_research.scoring_cost
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from specem_local.scoring import KEEP, row_scores

VOCABULARIES = {"smollm2-135m": 49_152, "qwen2.5-coder-0.5b": 151_936, "gemma-3-270m": 262_144}
ROWS = 20  # two foreign candidates of ten tokens: a verifier's batch in a three-model round


def copied_float64(buffer: np.ndarray, targets: np.ndarray) -> float:
    """The old path: copy, re-stack, then shifted exp and a float64 sum per row."""
    rows = buffer.copy()
    predicting = np.concatenate([rows[:1], rows[:-1]])
    picked = predicting[np.arange(len(targets)), targets].astype(np.float64)
    top = predicting.max(axis=1, keepdims=True)
    normalisers = np.log(np.exp(predicting - top).sum(axis=1, dtype=np.float64)) + top[:, 0]
    return float((picked - normalisers).mean())


def in_place(buffer: np.ndarray, targets: np.ndarray) -> float:
    wanted = [*targets[:-1].tolist(), KEEP]
    scores = row_scores(buffer, wanted, normalise=True, overwrite=True)
    return float(np.nanmean(scores.chosen - scores.normalisers))


def median_ms(function, rows: np.ndarray, targets: np.ndarray, repeats: int = 15) -> float:
    times = []
    for _ in range(repeats):
        buffer = rows.copy()  # a fresh "llama.cpp buffer" each time (in_place overwrites it)
        started = time.perf_counter()
        function(buffer, targets)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{ROWS} rows per batch; median ms of 15")
    print(f"{'model':20} {'vocab':>8} {'copied, float64':>16} {'in place':>9} {'ratio':>6}")
    for name, vocabulary in VOCABULARIES.items():
        rows = (rng.normal(size=(ROWS, vocabulary)) * 4).astype(np.float32)
        targets = rng.integers(0, vocabulary, ROWS)
        old, new = median_ms(copied_float64, rows, targets), median_ms(in_place, rows, targets)
        print(f"{name:20} {vocabulary:>8} {old:>16.1f} {new:>9.1f} {old / new:>5.1f}x")


if __name__ == "__main__":
    main()
