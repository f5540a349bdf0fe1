"""The systems of issue 56 computed from recorded option scores (``option_eval.py``), with the
engine's own functions (``specem_local.engine.options``), so what is reported is what the
product computes.

Per task, on the confirm items, each system's accuracy: each source (a member asked, or scoring
the options as plain text) raw and with its label prior divided out; ``best``: the corrected
source that was best on the labelled train items (the baseline to beat: one member asked the best
way, its own bias corrected); ``today``: Qwen asked, raw (the shipped default follows it; the
``drafted`` run checks that); the uniform mix; ``fitted``: the weights fitted on the labelled
train items (EM), their smoothing and whether to divide out the priors chosen on the other train
items; ``choices``: the weights fitted on the other tasks' labelled items, no priors (what the
product does for a task it has no weights for). Paired counts and McNemar's exact p against
``best`` and ``today``, per task and pooled.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.engine import fit_task
from specem_local.engine import options as opt
from specem_research.stats import mcnemar_exact_p

SMOOTHING = (0.25, 1.0, 4.0, 16.0)
TODAY = "asked:qwen2.5-coder-0.5b"
Beliefs = dict[str, np.ndarray]
Priors = dict[str, dict[int, np.ndarray]]  # source -> number of options -> prior


def read(folder: str | Path) -> list[dict[str, Any]]:
    path = Path(folder) / "items.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def by_task(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        tasks[record["task"]].append(record)
    return dict(tasks)


def priors_from(records: Sequence[Mapping[str, Any]]) -> Priors:
    """Each source's mean belief by number of options: its lean, whatever the question."""
    seen: dict[str, dict[int, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        for name, scores in record["scores"].items():
            seen[name][len(scores)].append(opt.distribution(scores))
    return {name: {n: opt.mean_prior(found) for n, found in kept.items()} for name, kept in seen.items()}


def beliefs(record: Mapping[str, Any], priors: Priors | None = None) -> Beliefs:
    found = {}
    for name, scores in record["scores"].items():
        prior = (priors or {}).get(name, {}).get(len(scores))
        found[name] = opt.corrected(opt.distribution(scores), prior)
    return found


def right(records: Sequence[Mapping[str, Any]], pick: Callable[[Mapping[str, Any]], int]) -> list[bool]:
    return [pick(record) == record["answer"] for record in records]


def alone(name: str, priors: Priors | None) -> Callable[[Mapping[str, Any]], int]:
    return lambda record: int(np.argmax(beliefs(record, priors)[name]))


def mix(weights: Mapping[str, float], priors: Priors | None) -> Callable[[Mapping[str, Any]], int]:
    return lambda record: int(np.argmax(opt.mixed(beliefs(record, priors), weights)))


def fitted(labelled: Sequence[Mapping[str, Any]], smoothing: float, correct: bool) -> tuple[dict[str, float], Priors]:
    """Weights (EM) and priors from labelled items; the priors from the same items."""
    priors = priors_from(labelled) if correct else {}
    weights = opt.fitted_weights([beliefs(r, priors) for r in labelled], [r["answer"] for r in labelled], smoothing)
    return weights, priors


def chosen_fit(train: Sequence[Mapping[str, Any]], labelled: int) -> tuple[dict[str, float], Priors, dict[str, Any]]:
    """The fit on the first ``labelled`` train items, its smoothing and correction chosen by
    accuracy on the rest of the train items (ties: less smoothing, then no correction)."""
    fit_on, held = train[:labelled], train[labelled:]
    best: tuple[float, dict[str, float], Priors, dict[str, Any]] | None = None
    for correct in (False, True):
        for smoothing in SMOOTHING:
            weights, priors = fitted(fit_on, smoothing, correct)
            score = float(np.mean(right(held, mix(weights, priors)))) if held else 0.0
            if best is None or score > best[0]:
                best = (score, weights, priors, {"smoothing": smoothing, "priors": correct, "held_accuracy": score})
    assert best is not None
    return best[1], best[2], best[3]


def paired(first: list[bool], second: list[bool]) -> dict[str, Any]:
    only_first = sum(a and not b for a, b in zip(first, second))
    only_second = sum(b and not a for a, b in zip(first, second))
    return {"ahead": only_first, "behind": only_second, "p": mcnemar_exact_p(only_first, only_second)}


def task_systems(
    train: list[dict[str, Any]], confirm: list[dict[str, Any]], others: list[dict[str, Any]], labelled: int
) -> tuple[dict[str, list[bool]], dict[str, Any]]:
    """Each system's right/wrong on the confirm items, and what was chosen on train."""
    sources = sorted(train[0]["scores"])
    label_priors = priors_from(train[:labelled])
    systems: dict[str, list[bool]] = {}
    for name in sources:
        systems[name] = right(confirm, alone(name, None))
        systems[f"{name}+prior"] = right(confirm, alone(name, label_priors))
    on_train = {name: float(np.mean(right(train[:labelled], alone(name, label_priors)))) for name in sources}
    best = max(sources, key=lambda name: (on_train[name], -sources.index(name)))
    systems["best"] = systems[f"{best}+prior"]
    systems["today"] = systems[TODAY] if TODAY in sources else systems[sources[0]]
    uniform = {name: 1.0 for name in sources}
    systems["uniform"] = right(confirm, mix(uniform, None))
    systems["uniform+prior"] = right(confirm, mix(uniform, label_priors))
    weights, priors, settings = chosen_fit(train, labelled)
    systems["fitted"] = right(confirm, mix(weights, priors))
    pooled, _ = fitted(others, 1.0, False) if others else (uniform, {})
    systems["choices"] = right(confirm, mix(pooled, None))
    chosen = {"best": best, "best_train_accuracy": on_train[best], "fit": settings, "weights": weights,
              "choices_weights": pooled}  # fmt: skip
    return systems, chosen


def cmd_report(args: argparse.Namespace) -> int:
    train, confirm = by_task(read(args.train)), by_task(read(args.confirm))
    drafted = by_task(read(args.drafted)) if args.drafted else {}
    report: dict[str, Any] = {"labelled": args.labelled, "tasks": {}}
    pooled: dict[str, list[bool]] = defaultdict(list)
    for task in sorted(confirm):
        others = [r for name, records in train.items() if name != task for r in records[: args.labelled]]
        systems, chosen = task_systems(train[task], confirm[task], others, args.labelled)
        for name, marks in systems.items():
            pooled[name] += marks
        entry = {
            "items": len(confirm[task]),
            "accuracy": {name: float(np.mean(marks)) for name, marks in systems.items()},
            "against_best": {name: paired(systems[name], systems["best"]) for name in ("fitted", "choices", "uniform")},
            "against_today": {name: paired(systems[name], systems["today"]) for name in ("fitted", "choices", "best")},
            **chosen,
        }
        if task in drafted:
            entry["drafted"] = drafted_check(drafted[task], confirm[task])
        report["tasks"][task] = entry
    report["pooled"] = {
        "items": len(pooled["best"]),
        "accuracy": {name: float(np.mean(marks)) for name, marks in pooled.items() if not name.count(":")},
        "against_best": {name: paired(pooled[name], pooled["best"]) for name in ("fitted", "choices", "uniform")},
        "against_today": {name: paired(pooled[name], pooled["today"]) for name in ("fitted", "choices", "best")},
    }
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print_report(report)
    return 0


def drafted_check(drafted: list[dict[str, Any]], scored: list[dict[str, Any]]) -> dict[str, Any]:
    """How the drafted answers (the product before issue 56) agree with Qwen asked, scored."""
    scores = {r["id"]: r for r in scored}
    both = [(d, scores[d["id"]]) for d in drafted if d["id"] in scores]
    qwen = [int(np.argmax(s["scores"][TODAY])) if TODAY in s["scores"] else -1 for _, s in both]
    return {
        "items": len(both),
        "accuracy": float(np.mean([d["pick"] == d["answer"] for d, _ in both])) if both else None,
        "same_as_qwen_asked": float(np.mean([d["pick"] == q for (d, _), q in zip(both, qwen)])) if both else None,
        "seconds_per_item": float(np.mean([d["seconds"] for d, _ in both])) if both else None,
        "scored_seconds_per_item": float(np.mean([s["seconds"] for _, s in both])) if both else None,
    }


def print_report(report: dict[str, Any]) -> None:
    shown = ("today", "best", "uniform", "uniform+prior", "fitted", "choices")
    print(f"{'task':<14}" + "".join(f"{name:>14}" for name in shown) + "  fitted vs best    choices vs today")
    rows = [*report["tasks"].items(), ("pooled", report["pooled"])]
    for task, entry in rows:
        cells = "".join(f"{100 * entry['accuracy'][name]:>14.1f}" for name in shown)
        vs_best, vs_today = entry["against_best"]["fitted"], entry["against_today"]["choices"]
        print(f"{task:<14}{cells}  +{vs_best['ahead']}/-{vs_best['behind']} p={vs_best['p']:.3g}"
              f"   +{vs_today['ahead']}/-{vs_today['behind']} p={vs_today['p']:.3g}")  # fmt: skip


def cmd_fit(args: argparse.Namespace) -> int:
    """Task weights for the product (``data/option_weights.json`` entries), fitted as the product
    fits them (``task_weights.fit_task``): each task's on its labelled items with the smoothing
    and priors the report chose for it, and ``choices`` on every task's labelled items, no priors."""
    train = by_task(read(args.train))
    entries = []
    for task, records in sorted(train.items()):
        _, _, settings = chosen_fit(records, args.labelled)
        said = f"{args.labelled} labelled {task} train items (research/data/choices)"
        fitted = fit_task(task, *labelled(records[: args.labelled]), said, settings["smoothing"], settings["priors"])
        entries.append(fitted.to_json(args.ensemble_key))
    everything = [r for records in train.values() for r in records[: args.labelled]]
    said = f"{len(everything)} labelled items of {len(train)} choice tasks' train splits (research/data/choices)"
    entries.append(fit_task("choices", *labelled(everything), said, 1.0, False).to_json(args.ensemble_key))
    Path(args.output).write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    return 0


def labelled(records: Sequence[Mapping[str, Any]]) -> tuple[list[Any], list[opt.Options], list[int]]:
    """Records as ``fit_task`` takes them: the scores, the options, the answers."""
    offered = [opt.options_in({"enum": r["choices"]}) for r in records]
    assert all(o is not None for o in offered), "a record's choices are not distinct options"
    return [r["scores"] for r in records], [o for o in offered if o is not None], [r["answer"] for r in records]
