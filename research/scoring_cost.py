"""Host-side cost of scoring and sampling, per vocabulary size, before and after issue 16.

Scoring: copying the rows out of llama.cpp's buffer, stacking them again and a log-sum-exp
through float64 temporaries, against ``scoring.row_scores`` on the buffer itself (float32, in
place, one copy only of the row after each candidate). Sampling (once per drafted token): a
top-k partition of the whole vocabulary against ``sampling.top_k_ids`` (the few logits above
a threshold from a strided sample). Random rows of each demo model's vocabulary size stand in
for llama.cpp's output. ``--members`` also times each demo member answering alone with the
old and the new top-k, alternated (needs the models).

    python -m specem_research.scoring_cost [--members]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from specem_local.backend import KEEP, row_scores
from specem_local.engine import sampling
from specem_local.settings import EnsembleSettings

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


def whole_vocabulary_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """The top-k before issue 16: a partition of every logit."""
    return np.argpartition(logits, -k)[-k:]


def sampling_ms(top_k_ids, row: np.ndarray, repeats: int = 200) -> float:
    """Mean ms of one draw with the default settings and the given top-k."""
    original, sampling.top_k_ids = sampling.top_k_ids, top_k_ids
    try:
        sample = sampling.make_sampler(EnsembleSettings(), np.random.default_rng(0))
        started = time.perf_counter()
        for _ in range(repeats):
            sample(row)
        return 1000 * (time.perf_counter() - started) / repeats
    finally:
        sampling.top_k_ids = original


def members_alone_before_after(repeats: int = 4) -> None:
    """Each demo member answering alone (160 tokens, the bench's story prompt), the old and
    the new top-k alternated in one process; medians."""
    from specem_local.engine import Ensemble
    from specem_local.models import load_config
    from specem_research.bench import bench_prompts, members_alone, rotated, speed_settings

    prompt, common = bench_prompts()["story"], speed_settings(160)
    ways = {"whole vocabulary": whole_vocabulary_top_k, "sampled threshold": sampling.top_k_ids}
    speeds: dict[str, dict[str, list[float]]] = {way: {} for way in ways}
    with Ensemble.from_config(load_config(None)) as ensemble:
        ensemble.weight_store = None
        for repeat in range(repeats):
            for way in rotated(list(ways), repeat):
                sampling.top_k_ids = ways[way]
                for name, speed in members_alone(ensemble, prompt, common).items():
                    speeds[way].setdefault(name, []).append(speed)
    sampling.top_k_ids = ways["sampled threshold"]
    for name in speeds["whole vocabulary"]:
        old, new = (statistics.median(speeds[way][name]) for way in ways)
        print(f"{name} alone: {old:.1f} -> {new:.1f} tok/s ({new / old - 1:+.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(description="host-side cost of scoring and sampling")
    parser.add_argument("--members", action="store_true", help="also time each demo member alone, old vs new top-k")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{ROWS} rows per batch; median ms of 15")
    print(f"{'model':20} {'vocab':>8} {'copied, float64':>16} {'in place':>9} {'ratio':>6}")
    for name, vocabulary in VOCABULARIES.items():
        rows = (rng.normal(size=(ROWS, vocabulary)) * 4).astype(np.float32)
        targets = rng.integers(0, vocabulary, ROWS)
        old, new = median_ms(copied_float64, rows, targets), median_ms(in_place, rows, targets)
        print(f"{name:20} {vocabulary:>8} {old:>16.1f} {new:>9.1f} {old / new:>5.1f}x")
    print("\none draw (temperature 0.7, top-k 40, top-p 0.95, min-p 0.05); mean ms of 200")
    print(f"{'model':20} {'vocab':>8} {'whole vocabulary':>17} {'sampled threshold':>18} {'ratio':>6}")
    for name, vocabulary in VOCABULARIES.items():
        row = (rng.normal(size=vocabulary) * 4).astype(np.float32)
        old, new = sampling_ms(whole_vocabulary_top_k, row), sampling_ms(sampling.top_k_ids, row)
        print(f"{name:20} {vocabulary:>8} {old:>17.2f} {new:>18.2f} {old / new:>5.1f}x")
    if args.members:
        print()
        members_alone_before_after()


if __name__ == "__main__":
    main()
