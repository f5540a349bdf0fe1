"""The option weights an ensemble ships (``specem_local/data/option_weights.json``), checked on
confirm items from recorded scores (``option_eval run``, merged with ``option_shots merge``):
what a user of that ensemble gets naming the task (its own weights) and not naming it (the
``choices`` weights), against every source counting equally (what an ensemble with no weights
gets), against ``--old`` (the source the default followed before options were scored, issue 56),
and against the best (source, correction) chosen on the train items (``option_report``); and
the choice of ``choices`` as it was made, on the train items alone (``label_free_on_train``).

    python -m specem_research.option_shipped --train TRAIN --confirm CONFIRM --ensemble-key KEY \
        --old asked:qwen2.5-coder-1.5b --output report.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.engine import TaskWeights
from specem_research.option_report import best_source, by_task, fit, members_choices, mix, paired, read, right

SHIPPED = resources.files("specem_local").joinpath("data", "option_weights.json")
SYSTEMS = ("uniform", "old", "best", "task", "choices")
PAIRS = (("task", "uniform"), ("task", "old"), ("task", "best"), ("choices", "uniform"), ("choices", "old"))
FIVE = ("sst2", "boolq", "piqa", "arc_easy", "winogrande")  # the tasks the demo trio's choices is fitted on
LABEL_FREE = ("uniform", "old", "other_tasks", "members")


def shipped(key: str) -> dict[str, TaskWeights]:
    """The ensemble's shipped weights by task."""
    entries = json.loads(SHIPPED.read_text(encoding="utf-8"))
    return {e["task"]: TaskWeights(e["task"], e["weights"], e["priors"], e["items"], e["fitted_on"])
            for e in entries if e["key"] == key}  # fmt: skip


def task_marks(train: list[dict[str, Any]], confirm: list[dict[str, Any]], weights: dict[str, TaskWeights],
               task: str, old: str, labelled_items: int) -> dict[str, list[bool]]:  # fmt: skip
    """Each system's right/wrong on the task's confirm items."""
    sources = sorted(train[0]["scores"])
    corrections, (source, correction), _ = best_source(train[:labelled_items], sources)
    none = TaskWeights(task, {}, {}, 0, "")
    return {
        "uniform": right(confirm, mix(none)),
        "old": right(confirm, mix(none, {old: 1.0})),
        "best": right(confirm, mix(corrections[correction], {source: 1.0})),
        "task": right(confirm, mix(weights.get(task, weights["choices"]))),
        "choices": right(confirm, mix(weights["choices"])),
    }


def summary(marks: dict[str, list[bool]]) -> dict[str, Any]:
    return {
        "items": len(marks["uniform"]),
        "accuracy": {name: float(np.mean(marks[name])) for name in SYSTEMS},
        "paired": {f"{a} vs {b}": paired(marks[a], marks[b]) for a, b in PAIRS},
    }


def label_free_on_train(train: dict[str, list[dict[str, Any]]], key: str, old: str, labelled: int) -> dict[str, Any]:
    """The choice of ``choices`` made on the train items past the labelled ones (no confirm item
    seen): uniform, ``old``, weights fitted on the other tasks' labelled items (of ``FIVE``, as the
    trio's are) and the members' weights (``fit --choices members``), per task and pooled, paired."""
    none, members = TaskWeights("t", {}, {}, 0, ""), members_choices(key)
    found: dict[str, Any] = {}
    pooled: dict[str, list[bool]] = defaultdict(list)
    for task, records in sorted(train.items()):
        others = [r for name, rs in train.items() if name != task and name in FIVE for r in rs[:labelled]]
        held = records[labelled:]
        picks = {"uniform": mix(none), "old": mix(none, {old: 1.0}), "members": mix(members),
                 "other_tasks": mix(fit(others, 1.0, False, False))}  # fmt: skip
        marks = {name: right(held, pick) for name, pick in picks.items()}
        for name, each in marks.items():
            pooled[name] += each
        found[task] = _label_free(marks)
    found["pooled"] = _label_free(pooled)
    return found


def _label_free(marks: dict[str, list[bool]]) -> dict[str, Any]:
    pairs = [(a, b) for a in ("members", "other_tasks") for b in ("uniform", "old")] + [("members", "other_tasks")]
    return {"accuracy": {name: float(np.mean(marks[name])) for name in LABEL_FREE},
            "paired": {f"{a} vs {b}": paired(marks[a], marks[b]) for a, b in pairs}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.option_shipped", description=__doc__)
    parser.add_argument("--train", required=True, help="recorded train scores (the best source is chosen on them)")
    parser.add_argument("--confirm", required=True, help="recorded confirm scores")
    parser.add_argument("--ensemble-key", required=True)
    parser.add_argument("--old", required=True, help="the source the default followed before (asked:MEMBER)")
    parser.add_argument("--labelled", type=int, default=100)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    weights = shipped(args.ensemble_key)
    if "choices" not in weights:
        parser.error(f"no choices weights shipped for {args.ensemble_key!r}")
    train, confirm = by_task(read(args.train)), by_task(read(args.confirm))
    report: dict[str, Any] = {"tasks": {}}
    pooled: dict[str, list[bool]] = defaultdict(list)
    for task in sorted(set(train) & set(confirm)):
        marks = task_marks(train[task], confirm[task], weights, task, args.old, args.labelled)
        report["tasks"][task] = summary(marks)
        for name, each in marks.items():
            pooled[name] += each
    report["pooled"] = summary(pooled)
    report["label_free_on_train"] = label_free_on_train(train, args.ensemble_key, args.old, args.labelled)
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for task, entry in [*report["tasks"].items(), ("pooled", report["pooled"])]:
        cells = " ".join(f"{name} {100 * entry['accuracy'][name]:.1f}" for name in SYSTEMS)
        pairs = " ".join(f"[{name} +{p['ahead']}/-{p['behind']} p={p['p']:.2g}]" for name, p in entry["paired"].items())
        print(f"{task:<14} n={entry['items']} {cells} {pairs}")
    chosen = report["label_free_on_train"]["pooled"]
    print("label-free on train, pooled: " + " ".join(f"{n} {100 * a:.1f}" for n, a in chosen["accuracy"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
