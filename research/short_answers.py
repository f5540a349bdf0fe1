"""Where the time of a short answer goes (issue 48): BFCL tool calls and GSM8K answers from the
default trio and from its best member alone, each split into reading the prompt (per member),
drafting, verifying and the rest (the vote, the format's masks, Python), with the rounds and
who drafted. Greedy; the first answer is a warm-up and is not counted. Every answer's text is
kept (``texts``), and ``same_answers`` counts, per set, the items the ensemble answered with the
very text its member alone wrote.

    python -m specem_research.short_answers [--items 10] [--ensemble NAME] [--member NAME]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from specem_local import Ensemble
from specem_local.commands import config_from_args
from specem_local.engine import Member
from specem_local.labelled import load_tasks

DATA = Path(__file__).parent / "data"


def timed_prompts(spent: dict[str, float]) -> Any:
    """Count the seconds each member spends reading its prompt (``Member.start``)."""
    original = Member.start

    def start(self: Member, prompt_tokens: list[int], reuse: bool = True) -> None:
        began = time.perf_counter()
        try:
            original(self, prompt_tokens, reuse)
        finally:
            spent[self.name] += time.perf_counter() - began

    Member.start = start  # type: ignore[method-assign]
    return original


def profile(ensemble: Ensemble, items: list[dict[str, Any]], models: list[str] | None) -> dict[str, Any]:
    prompt_seconds: dict[str, float] = defaultdict(float)
    original = timed_prompts(prompt_seconds)
    totals: dict[str, Any] = defaultdict(float)
    drafted: dict[str, float] = defaultdict(float)
    verified: dict[str, float] = defaultdict(float)
    texts: list[str] = []
    try:
        for item in items:
            started = time.perf_counter()
            stream = ensemble.stream(item["prompt"], models=models, greedy=True, **item["options"])
            for event in stream:
                for name, seconds in getattr(event, "draft_seconds", {}).items():
                    drafted[name] += seconds
                for name, seconds in getattr(event, "verify_seconds", {}).items():
                    verified[name] += seconds
            final = stream.final()
            texts.append(final.text)
            totals["seconds"] += time.perf_counter() - started
            totals["first_segment"] += final.first_segment_seconds or 0.0
            totals["rounds"] += final.rounds
            totals["tokens"] += final.tokens
            totals["drafters_per_round"] += final.drafters_per_round
    finally:
        Member.start = original  # type: ignore[method-assign]
    count = len(items)
    spent = sum(prompt_seconds.values()) + sum(drafted.values()) + sum(verified.values())
    return {
        "items": count,
        "seconds": round(totals["seconds"], 2),
        "first_segment_mean": round(totals["first_segment"] / count, 3),
        "rounds_mean": round(totals["rounds"] / count, 1),
        "tokens_mean": round(totals["tokens"] / count, 1),
        "drafters_per_round_mean": round(totals["drafters_per_round"] / count, 2),
        "prompt_seconds": {k: round(v, 2) for k, v in prompt_seconds.items()},
        "draft_seconds": {k: round(v, 2) for k, v in drafted.items()},
        "verify_seconds": {k: round(v, 2) for k, v in verified.items()},
        "other_seconds": round(totals["seconds"] - spent, 2),
        "texts": texts,
    }


def same_answers(report: dict[str, Any], sets: list[str], member: str) -> dict[str, dict[str, int]]:
    """Per set, of the items both answered, how many of the ensemble's answers are its member's
    text, character for character."""
    counts = {}
    for name in sets:
        ours, theirs = report[f"{name}/ensemble"]["texts"], report[f"{name}/{member}"]["texts"]
        counts[name] = {"same": sum(a == b for a, b in zip(ours, theirs)), "items": min(len(ours), len(theirs))}
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specem_research.short_answers", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--member", default="qwen2.5-coder-0.5b")
    parser.add_argument("--output", default="research/results/issue48-short-answers.json")
    parser.add_argument("--config")
    parser.add_argument("--ensemble")
    args = parser.parse_args()
    calls = load_tasks(DATA / "bfcl_simple_python_dev.jsonl")[: args.items + 1]
    maths = load_tasks(DATA / "gsm8k_train_dev120.jsonl")[: args.items + 1]
    sets = {
        "bfcl": [{"prompt": list(t.messages), "options": {"tools": list(t.tools), "max_tokens": 128}} for t in calls],
        "gsm8k": [{"prompt": t.question, "options": {"max_tokens": 320}} for t in maths],
    }
    report: dict[str, Any] = {}
    with Ensemble.from_config(config_from_args(args)) as ensemble:
        for name, items in sets.items():
            for system, models in (("ensemble", None), (args.member, [args.member])):
                profile(ensemble, items[:1], models)  # warm-up
                report[f"{name}/{system}"] = entry = profile(ensemble, items[1:], models)
                print(name, system, json.dumps({k: v for k, v in entry.items() if k != "texts"}), flush=True)
    report["same_answers"] = same_answers(report, list(sets), args.member)
    print("the same text as the member alone:", json.dumps(report["same_answers"]), flush=True)
    Path(args.output).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
