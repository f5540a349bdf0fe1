"""What the reserve member's answer costs when it reads the ensemble's answer ahead (predicted
outputs, ``specem_local/engine/prediction.py``; issue 55's escalation), paired item by item.

For each item, in one process and one after the other, so that a machine whose speed drifts
moves every system alike: the demo trio's answer as shipped, then the reserve member alone
without a prediction and with the trio's answer as its prediction, in an order that alternates
from item to item. Every answer reads its prompt afresh (``reuse_prompt`` false): the reserve's
second answer would otherwise find the whole prompt decoded by its first. Written as ``specem
eval`` items (systems ``ensemble``, the reserve's name, and its name with ``+prediction``),
resumable, for ``confidence escalation`` and the report below: the seconds of each system, how
often the two reserve answers are the same text, and their accuracy, paired.

    python -m specem_research.prediction_cost research/data/bfcl_simple_python_confirm.jsonl \\
        --max-tokens 128 --output research/results/issue55-bfcl-confirm-predicted
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from specem_local.engine import Ensemble
from specem_local.labelled import Task, load_tasks
from specem_local.models import load_config
from specem_research.stats import mcnemar_exact_p

RESERVE, RESERVE_ENSEMBLE = "qwen2.5-coder-1.5b", "demo-1.5b"
PREDICTED = f"{RESERVE}+prediction"


def answered(ensemble: Ensemble, task: Task, models: list[str] | None, settings: dict[str, Any]) -> dict[str, Any]:
    """One system's answer to ``task`` as ``specem eval`` records it (the fields read here)."""
    started = time.perf_counter()
    final = ensemble.generate(task.prompt, models=models, **settings, **task.options)
    extracted, correct = task.grade(final.text, final.finish_reason)
    return {"text": final.text, "extracted": extracted, "correct": correct, "tokens": final.tokens,
            "seconds": round(time.perf_counter() - started, 3), "finish_reason": final.finish_reason,
            "confidence": final.confidence, "evidence": final.evidence,
            "predicted_tokens": final.predicted_tokens, "unpredicted_tokens": final.unpredicted_tokens}  # fmt: skip


def run(tasks: list[Task], items_path: Path, max_tokens: int) -> None:
    done = {json.loads(line)["id"] for line in items_path.read_text().splitlines()} if items_path.exists() else set()
    settings = {"greedy": True, "max_tokens": max_tokens, "reuse_prompt": False}  # each prompt read afresh
    with Ensemble.from_config(load_config(None, "demo")) as trio, \
            Ensemble.from_config(load_config(None, RESERVE_ENSEMBLE)) as big, items_path.open("a") as sink:  # fmt: skip
        for number, task in enumerate(tasks):
            if task.id in done:
                continue
            record: dict[str, Any] = {"id": task.id, "prompt": task.prompt, "systems": {}}
            ours = record["systems"]["ensemble"] = answered(trio, task, None, settings)
            order = [None, ours["text"]] if number % 2 == 0 else [ours["text"], None]
            for prediction in order:
                asked = settings if prediction is None else {**settings, "prediction": prediction}
                record["systems"][RESERVE if prediction is None else PREDICTED] = answered(big, task, [RESERVE], asked)
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            print(f"{number + 1}/{len(tasks)}", file=sys.stderr, flush=True)


def report(items_path: Path) -> dict[str, Any]:
    records = [json.loads(line) for line in items_path.read_text().splitlines()]
    systems = ("ensemble", RESERVE, PREDICTED)
    seconds = {name: sum(r["systems"][name]["seconds"] for r in records) for name in systems}
    plain = [r["systems"][RESERVE] for r in records]
    read = [r["systems"][PREDICTED] for r in records]
    gained = sum(b["correct"] and not a["correct"] for a, b in zip(plain, read))
    lost = sum(a["correct"] and not b["correct"] for a, b in zip(plain, read))
    return {
        "items": len(records),
        "seconds": seconds,
        "predicted_over_plain": seconds[PREDICTED] / seconds[RESERVE],
        "trio_over_plain": seconds["ensemble"] / seconds[RESERVE],
        "accuracy": {name: sum(r["systems"][name]["correct"] for r in records) / len(records) for name in systems},
        "same_text": sum(a["text"] == b["text"] for a, b in zip(plain, read)),
        "predicted_vs_plain": {"gained": gained, "lost": lost, "p": mcnemar_exact_p(gained, lost)},
        "predicted_tokens": sum(b["predicted_tokens"] for b in read),
        "unpredicted_tokens": sum(b["unpredicted_tokens"] for b in read),
        "tokens": sum(b["tokens"] for b in read),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.prediction_cost", description=__doc__)
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--output", type=Path, required=True, help="a folder: items.jsonl and report.json")
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    items_path = args.output / "items.jsonl"
    run(load_tasks(args.tasks)[: args.limit], items_path, args.max_tokens)
    said = report(items_path)
    (args.output / "report.json").write_text(json.dumps(said, indent=1) + "\n")
    print(json.dumps(said, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
