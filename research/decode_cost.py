"""How fast the ensemble can be without model exit, from what decoding costs on this machine.

Per round, each of K members drafts L tokens (L single-token decodes, each row copied out and
sampled: what the member does alone) and scores the other K-1 candidates, about (K-1)·L
tokens in one batch whose every row is scored. The lockstep ideal counts only the drafting.
So even with nothing else to pay, the ratio to the ideal is at most

    Σ_m d_m / Σ_m (d_m + (K-1) · v_m)

with d_m a drafting step's time and v_m a batch row's time (the batch's time / its rows).
This script measures d_m and v_m per member, alternating them so a machine whose speed drifts
moves both, and prints that ceiling; then it runs one no-exit answer and splits its time into
drafting, verification and the rest, to check the model against the real loop. It assumes
every member drafts and verifies (the demo trio's roles).

    python -m specem_research.decode_cost [--threads N] [--config models.toml] [--output decode_cost.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.backend import KEEP, BatchRow
from specem_local.engine import Ensemble, Member, make_sampler, threads_each
from specem_local.events import FinalEvent, RoundEvent
from specem_local.models import load_config
from specem_research.bench import bench_prompts, speed_settings

PREFIX_TOKENS = 100
REPEATS = 9


def step_costs(member: Member, foreign: int, segment: int, settings, repeats: int = REPEATS) -> dict[str, Any]:
    """Median seconds of one drafting step and of one verification batch (``foreign``
    candidates of ``segment`` tokens, each in its own sequence), measured alternately."""
    model = member.model
    prompts = bench_prompts()
    prefix = (model.tokenize(prompts["summary"]) * (1 + PREFIX_TOKENS // 20))[:PREFIX_TOKENS]
    candidate = (model.tokenize(prompts["story"]) * (1 + segment))[:segment]
    sampler = make_sampler(settings, np.random.default_rng(0))
    draft_times, batch_times = [], []
    for _ in range(repeats):
        member.reset()
        member.start(prefix)
        started = time.perf_counter()
        for position, token in enumerate(candidate[:3], start=len(prefix)):  # three drafting steps
            sampler(model.decode([BatchRow(token, position, 0, True)])[0])
        draft_times.append((time.perf_counter() - started) / 3)
        model.seq_remove(0, len(prefix), -1)
        rows, targets = [], []
        for seq_id in range(1, foreign + 1):
            model.seq_copy(0, seq_id, 0, len(prefix))
            rows += [BatchRow(t, len(prefix) + i, seq_id, True) for i, t in enumerate(candidate)]
            targets += [*candidate[1:], KEEP]
        started = time.perf_counter()
        model.decode_scores(rows, targets, normalise=settings.scoring == "logprob")
        batch_times.append(time.perf_counter() - started)
        for seq_id in range(1, foreign + 1):
            model.seq_remove(seq_id, -1, -1)
    draft, batch = statistics.median(draft_times), statistics.median(batch_times)
    rows = foreign * segment
    return {
        "model": member.name,
        "draft_step_ms": 1000 * draft,
        "batch_rows": rows,
        "batch_ms": 1000 * batch,
        "row_ms": 1000 * batch / rows,
        "row_to_step": batch / rows / draft,
    }


def ceiling(costs: list[dict[str, Any]], foreign: int, shared: float = 0.0) -> float:
    """The no-exit ratio to the lockstep ideal these costs allow (per drafted token, each
    member decodes ``foreign`` batch rows); ``shared`` is the share of foreign tokens a
    verifier need not decode (the start it drafted itself)."""
    drafting = sum(c["draft_step_ms"] for c in costs)
    verifying = sum(foreign * (1 - shared) * c["row_ms"] for c in costs)
    return drafting / (drafting + verifying)


def answer_split(ensemble, tokens: int) -> dict[str, float]:
    """One no-exit, round-robin answer: seconds drafting, verifying, everything else in the
    rounds (vote, commit), and outside the rounds (reading the prompt, handing events over)."""
    stream = ensemble.stream(
        bench_prompts()["story"], **speed_settings(tokens), drafting="round-robin", model_exit=False
    )
    drafting = verifying = rounds = 0.0
    final = None
    for event in stream:
        if isinstance(event, RoundEvent):
            rounds += event.seconds
            drafting += sum(event.draft_seconds.values())
            verifying += sum(event.verify_seconds.values())
        elif isinstance(event, FinalEvent):
            final = event
    assert final is not None
    return {
        "tokens": final.tokens,
        "seconds": final.seconds,
        "drafting_seconds": drafting,
        "verification_seconds": verifying,
        "outside_rounds_seconds": final.seconds - rounds,
        "other_seconds": rounds - drafting - verifying,
        "verification_to_drafting": verifying / drafting,
    }


def measure(ensemble, tokens: int, repeats: int = REPEATS) -> dict[str, Any]:
    """Step costs, the ceiling they allow, and one answer's split, on a loaded ensemble."""
    settings = ensemble.settings
    foreign = len(ensemble.members) - 1
    threads = threads_each(ensemble.threads_per_model or 1, at_once=1)
    for member in ensemble.members:  # as a model decoding alone in an answer
        member.model.set_threads(threads)
    costs = [step_costs(m, foreign, settings.segment_tokens, settings, repeats) for m in ensemble.members]
    for member in ensemble.members:
        member.reset()
    return {
        "models": [c["model"] for c in costs],
        "segment_tokens": settings.segment_tokens,
        "threads_per_model": ensemble.threads_per_model,
        "costs": costs,
        "ceiling": ceiling(costs, foreign),
        "ceiling_with_shared_starts": ceiling(costs, foreign, shared=0.17),
        "repeats": repeats,
        "answer": answer_split(ensemble, tokens),
    }


def print_report(report: dict[str, Any]) -> None:
    threads = report["threads_per_model"]
    print(f"segment L = {report['segment_tokens']}, {threads} threads per model; median of {report['repeats']}")
    print(f"{'model':20} {'draft step':>11} {'batch':>14} {'per row':>8} {'row/step':>9}")
    for c in report["costs"]:
        batch = f"{c['batch_ms']:.0f} ms/{c['batch_rows']}"
        print(
            f"{c['model']:20} {c['draft_step_ms']:>8.1f} ms {batch:>14} {c['row_ms']:>5.1f} ms {c['row_to_step']:>8.2f}"
        )
    print(
        f"no-exit ceiling: {report['ceiling']:.2f}x the lockstep ideal "
        f"(at most {report['ceiling_with_shared_starts']:.2f}x: 17% of foreign tokens shared starts, the most seen)"
    )
    a = report["answer"]
    print(
        f"one no-exit answer ({a['tokens']} tokens, {a['seconds']:.1f} s): drafting {a['drafting_seconds']:.1f} s, "
        f"verification {a['verification_seconds']:.1f} s ({a['verification_to_drafting']:.2f} of drafting), "
        f"other {a['other_seconds']:.2f} s, outside the rounds (mostly the prompt) {a['outside_rounds_seconds']:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="models.toml (default: the usual lookup)")
    parser.add_argument("--tokens", type=int, default=160, help="length of the no-exit answer")
    parser.add_argument("--output", default="decode_cost.json")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="measurements per cost (the median is kept)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads per model (default: threads_per_model)")
    args = parser.parse_args()
    overrides = {"threads_per_model": args.threads} if args.threads else {}
    with Ensemble.from_config(load_config(args.config), **overrides) as ensemble:
        ensemble.weight_store = None  # every answer from the prior: the runs must not teach each other
        report = measure(ensemble, args.tokens, args.repeats)
    Path(args.output).write_text(json.dumps(report, indent=2))
    print_report(report)


if __name__ == "__main__":
    main()
