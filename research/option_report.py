"""The systems of issue 56 computed from recorded option scores (``option_eval.py``) with the
product's own functions (``fit_task``, ``options.believed``, ``options.mixed``), so what is
reported is what the product computes.

Per task, on the confirm items, each system's accuracy: each source (a member asked, or scoring
the options as plain text) raw; ``best``, the baseline to beat: the (source, correction) that was
best on the labelled train items, its correction (none, its own prior divided out, and the task's
label frequencies) taken from the same items; ``today``: Qwen asked, raw (the shipped default
follows it; the ``drafted`` run checks that); the uniform mix, raw and with each source's prior
from the labelled items; ``fitted``: the task's weights fitted on the labelled train items (the
product's ``fit_task``), its smoothing and correction chosen by accuracy on the other train items;
``fitted-log``: a log-linear pool of the raw beliefs (``log_pool.py``, tried and not shipped)
fitted on the labelled train items alone, its penalty chosen by cross-validation on them;
``choices``: the weights fitted on the other tasks' labelled items (of those ``--choices-from``
names), no priors (what the product does for a task it has no weights for); ``running``: the
uniform mix with each source's prior the mean of its beliefs over the task's earlier confirm
items (no labels). Paired counts and
McNemar's exact p against ``best`` and ``today``, per task and pooled.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.engine import TaskWeights, fit_task
from specem_local.engine import options as opt
from specem_research import log_pool
from specem_research.stats import mcnemar_exact_p

SMOOTHING = (0.25, 1.0, 4.0, 16.0)
CORRECTIONS = ((False, False), (True, False), (True, True))  # (source priors, label frequencies)
TODAY = "asked:qwen2.5-coder-0.5b"
CALIBRATIONS = resources.files("specem_local").joinpath("data", "calibrations.json")
Record = Mapping[str, Any]
Pick = Callable[[Record], int]


def read(folder: str | Path) -> list[dict[str, Any]]:
    path = Path(folder) / "items.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def by_task(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        tasks[record["task"]].append(record)
    return dict(tasks)


def options_of(record: Record) -> opt.Options:
    found = opt.options_in({"enum": record["choices"]})
    assert found is not None, f"{record['id']}: its choices are not distinct options"
    return found


def labelled(records: Sequence[Record]) -> tuple[list[Any], list[opt.Options], list[int]]:
    """Records as ``fit_task`` takes them: the scores, the options, the answers."""
    return [r["scores"] for r in records], [options_of(r) for r in records], [r["answer"] for r in records]


def fit(records: Sequence[Record], smoothing: float, priors: bool, labels: bool, task: str = "t") -> TaskWeights:
    return fit_task(task, *labelled(records), "", smoothing, priors, labels)


def mix(kept: TaskWeights, weights: Mapping[str, float] | None = None) -> Pick:
    """The product's pick with these weights and priors (``weights``: others, the priors kept)."""
    chosen = kept.weights if weights is None else weights
    return lambda r: int(np.argmax(opt.mixed(opt.believed(r["scores"], kept.priors_for(options_of(r))), chosen)))


def log_fit(records: Sequence[Record]) -> dict[str, float]:
    """The log-linear pool's weights on these labelled records' raw beliefs."""
    return log_pool.fitted([opt.believed(r["scores"], {}) for r in records], [r["answer"] for r in records])


def log_mix(weights: Mapping[str, float]) -> Pick:
    return lambda r: int(np.argmax(log_pool.log_mixed(opt.believed(r["scores"], {}), weights)))


def right(records: Sequence[Record], pick: Pick) -> list[bool]:
    return [pick(record) == record["answer"] for record in records]


def chosen_fit(train: Sequence[Record], labelled_items: int) -> tuple[TaskWeights, dict[str, Any]]:
    """The fit on the first ``labelled_items`` train items, its smoothing and correction chosen
    by accuracy on the rest of the train items (ties: the first tried: less smoothing, less
    correction)."""
    fit_on, held = train[:labelled_items], train[labelled_items:]
    best: tuple[float, TaskWeights, dict[str, Any]] | None = None
    for (priors, labels), smoothing in itertools.product(CORRECTIONS, SMOOTHING):
        kept = fit(fit_on, smoothing, priors, labels)
        score = float(np.mean(right(held, mix(kept)))) if held else 0.0
        if best is None or score > best[0]:
            best = (score, kept, {"smoothing": smoothing, "priors": priors, "labels": labels, "held_accuracy": score})
    assert best is not None
    return best[1], best[2]


def running(records: Sequence[Record], minimum: int = 10) -> Pick:
    """The uniform mix, each source's prior the mean of its beliefs over the earlier records with
    as many options (from the ``minimum``-th on): label-free, in the records' order."""
    seen: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)  # by source and number of options
    picks: dict[str, int] = {}
    for record in records:
        beliefs = {name: opt.distribution(values) for name, values in record["scores"].items()}
        count = len(record["choices"])
        priors = {name: opt.mean_prior(seen[name, count]) for name in beliefs if len(seen[name, count]) >= minimum}
        corrected = {name: opt.corrected(b, priors.get(name)) for name, b in beliefs.items()}
        picks[record["id"]] = int(np.argmax(opt.mixed(corrected, {})))
        for name, belief in beliefs.items():
            seen[name, count].append(belief)
    return lambda r: picks[r["id"]]


def paired(first: list[bool], second: list[bool]) -> dict[str, Any]:
    only_first = sum(a and not b for a, b in zip(first, second))
    only_second = sum(b and not a for a, b in zip(first, second))
    return {"ahead": only_first, "behind": only_second, "p": mcnemar_exact_p(only_first, only_second)}


Correction = tuple[bool, bool]


def best_source(
    fit_on: Sequence[Record], sources: Sequence[str]
) -> tuple[dict[Correction, TaskWeights], tuple[str, Correction], float]:
    """The fits of each correction on the labelled items, the (source, correction) right most
    often on them (ties: the first, sources sorted, less correction first), and how often."""
    corrections = {(priors, labels): fit(fit_on, 1.0, priors, labels) for priors, labels in CORRECTIONS}
    candidates = [(name, key) for name in sources for key in CORRECTIONS]
    on_fit = [float(np.mean(right(fit_on, mix(corrections[c[1]], {c[0]: 1.0})))) for c in candidates]
    chosen = int(np.argmax(on_fit))
    return corrections, candidates[chosen], on_fit[chosen]


def task_systems(
    train: list[dict[str, Any]], confirm: list[dict[str, Any]], others: list[dict[str, Any]], labelled_items: int
) -> tuple[dict[str, list[bool]], dict[str, Any]]:
    """Each system's right/wrong on the confirm items, and what was chosen on train."""
    sources = sorted(train[0]["scores"])
    fit_on = train[:labelled_items]
    systems: dict[str, list[bool]] = {name: right(confirm, mix(fit(fit_on, 1.0, False, False), {name: 1.0}))
                                      for name in sources}  # fmt: skip
    corrections, best, on_train = best_source(fit_on, sources)
    systems["best"] = right(confirm, mix(corrections[best[1]], {best[0]: 1.0}))
    systems["today"] = systems[TODAY] if TODAY in sources else systems[sources[0]]
    uniform = dict.fromkeys(sources, 1.0)
    systems["uniform"] = right(confirm, mix(corrections[(False, False)], uniform))
    systems["uniform+prior"] = right(confirm, mix(corrections[(True, False)], uniform))
    kept, settings = chosen_fit(train, labelled_items)
    systems["fitted"] = right(confirm, mix(kept))
    log_weights = log_fit(fit_on)
    systems["fitted-log"] = right(confirm, log_mix(log_weights))
    pooled = fit(others, 1.0, False, False) if others else corrections[(False, False)]
    systems["choices"] = right(confirm, mix(pooled))
    systems["running"] = right(confirm, running(confirm))
    chosen = {"best": {"source": best[0], "priors": best[1][0], "labels": best[1][1], "train_accuracy": on_train},
              "fit": settings, "weights": kept.weights, "log_weights": log_weights,
              "choices_weights": pooled.weights}  # fmt: skip
    return systems, chosen


COMPARED = ("fitted", "fitted-log", "choices", "running", "uniform")


def summary(systems: Mapping[str, list[bool]]) -> dict[str, Any]:
    return {
        "items": len(systems["best"]),
        "accuracy": {name: float(np.mean(marks)) for name, marks in systems.items()},
        "against_best": {name: paired(systems[name], systems["best"]) for name in COMPARED},
        "against_today": {name: paired(systems[name], systems["today"]) for name in (*COMPARED, "best")},
        "log_against_fitted": paired(systems["fitted-log"], systems["fitted"]),
    }


def cmd_report(args: argparse.Namespace) -> int:
    train, confirm = by_task(read(args.train)), by_task(read(args.confirm))
    drafted = by_task(read(args.drafted)) if args.drafted else {}
    pool = set(args.choices_from or train)  # the tasks whose labelled items the choices weights come from
    report: dict[str, Any] = {"labelled": args.labelled, "choices_from": sorted(pool), "tasks": {}}
    pooled: dict[str, list[bool]] = defaultdict(list)
    for task in sorted(set(confirm) & set(train)):
        others = [r for name, records in train.items() if name != task and name in pool
                  for r in records[: args.labelled]]  # fmt: skip
        systems, chosen = task_systems(train[task], confirm[task], others, args.labelled)
        for name in ("best", "today", "uniform", "uniform+prior", *COMPARED):
            pooled[name] += systems[name]
        report["tasks"][task] = {**summary(systems), **chosen}
        if task in drafted:
            report["tasks"][task]["drafted"] = drafted_check(drafted[task], confirm[task], systems)
    report["pooled"] = summary(pooled)
    report["label_free_on_train"] = label_free_on_train(train, args.labelled, pool)
    report["choices_pools_on_train"] = choices_pools_on_train(train, args.labelled, pool)
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print_report(report)
    return 0


def log_pool_on_train_splits(train: Mapping[str, list[dict[str, Any]]], labelled_items: int, repeats: int,
                             seed: int) -> dict[str, Any]:  # fmt: skip
    """How the log-linear pool was chosen, on the train items only: each task's records split at
    random ``repeats`` times into ``labelled_items`` to fit on and the rest to score; on each
    split, the best (source, correction) chosen on the labelled items, the product's linear fit
    (``specem calibrate --task``: smoothing 1, priors) and the log-linear pool, per task and
    pooled, each paired with the best. The splits overlap: this chose a method, it tests none."""
    rng = np.random.default_rng(seed)
    marks: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for task, records in sorted(train.items()):
        sources = sorted(records[0]["scores"])
        for _ in range(repeats):
            order = rng.permutation(len(records))
            fit_on = [records[i] for i in order[:labelled_items]]
            held = [records[i] for i in order[labelled_items:]]
            corrections, (name, key), _ = best_source(fit_on, sources)
            picks = {"best": mix(corrections[key], {name: 1.0}), "linear": mix(corrections[(True, False)]),
                     "log": log_mix(log_fit(fit_on))}  # fmt: skip
            for system, pick in picks.items():
                marks[task][system] += right(held, pick)
    pooled: dict[str, list[bool]] = defaultdict(list)
    found: dict[str, Any] = {}
    for task, systems in [*marks.items(), ("pooled", pooled)]:
        if task != "pooled":
            for system, each in systems.items():
                pooled[system] += each
        found[task] = {system: float(np.mean(each)) for system, each in systems.items()}
        found[task]["log_vs_best"] = paired(systems["log"], systems["best"])
        found[task]["linear_vs_best"] = paired(systems["linear"], systems["best"])
    return found


def cmd_splits(args: argparse.Namespace) -> int:
    found = log_pool_on_train_splits(by_task(read(args.train)), args.labelled, args.repeats, args.seed)
    Path(args.output).write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    for task, entry in found.items():
        pair, linear = entry["log_vs_best"], entry["linear_vs_best"]
        print(f"{task:<14} best {100 * entry['best']:.1f}  linear {100 * entry['linear']:.1f}  "
              f"log {100 * entry['log']:.1f}  log vs best +{pair['ahead']}/-{pair['behind']}  "
              f"linear vs best +{linear['ahead']}/-{linear['behind']}")  # fmt: skip
    return 0


def label_free_on_train(train: Mapping[str, list[dict[str, Any]]], labelled_items: int,
                        pool: set[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The choice between the two label-free systems, made on the train items (no confirm item
    seen): ``running`` against ``choices`` (the weights fitted on the other tasks' labelled
    items, of ``pool``'s when given), per task and pooled, paired."""
    found: dict[str, Any] = {}
    pooled: dict[str, list[bool]] = defaultdict(list)
    for task, records in sorted(train.items()):
        others = [r for name, rs in train.items() if name != task and (pool is None or name in pool)
                  for r in rs[:labelled_items]]  # fmt: skip
        if not others:  # one task alone: no weights without its labels to compare with
            continue
        choices = mix(fit(others, 1.0, False, False))
        marks = {"running": right(records, running(records)), "choices": right(records, choices)}
        for name, each in marks.items():
            pooled[name] += each
        found[task] = {name: float(np.mean(each)) for name, each in marks.items()}
        found[task]["running_vs_choices"] = paired(marks["running"], marks["choices"])
    if pooled:
        found["pooled"] = {name: float(np.mean(each)) for name, each in pooled.items()}
        found["pooled"]["running_vs_choices"] = paired(pooled["running"], pooled["choices"])
    return found


def choices_pools_on_train(train: Mapping[str, list[dict[str, Any]]], labelled_items: int,
                           pool: set[str]) -> dict[str, Any]:  # fmt: skip
    """The choice of the tasks the ``choices`` weights are fitted on, made on the train items: the
    weights from ``pool``'s labelled items against those from every task's, each scored on every
    task's train items past the labelled ones (which neither fit saw), paired."""

    def weights(tasks: set[str]) -> Pick:
        labelled_records = [r for name, rs in train.items() if name in tasks for r in rs[:labelled_items]]
        return mix(fit(labelled_records, 1.0, False, False))

    chosen, everything = weights(pool), weights(set(train))
    found: dict[str, Any] = {}
    marks: dict[str, list[bool]] = defaultdict(list)
    for task, records in sorted(train.items()):
        held = records[labelled_items:]
        each = {"pool": right(held, chosen), "every_task": right(held, everything)}
        found[task] = {name: float(np.mean(values)) for name, values in each.items()}
        for name, values in each.items():
            marks[name] += values
    found["pooled"] = {name: float(np.mean(values)) for name, values in marks.items()}
    found["pooled"]["pool_vs_every_task"] = paired(marks["pool"], marks["every_task"])
    return found


def drafted_check(
    drafted: list[dict[str, Any]], scored: list[dict[str, Any]], systems: Mapping[str, list[bool]]
) -> dict[str, Any]:
    """How the drafted answers (the product before issue 56) agree with Qwen asked, scored, what
    each cost, and each system against them on the same items (paired)."""
    scores = {r["id"]: r for r in scored}
    both = [(d, scores[d["id"]]) for d in drafted if d["id"] in scores]
    if not both:
        return {"items": 0}
    qwen = [int(np.argmax(s["scores"][TODAY])) if TODAY in s["scores"] else -1 for _, s in both]
    at = {r["id"]: i for i, r in enumerate(scored)}
    marks = [d["pick"] == d["answer"] for d, _ in both]
    return {
        "items": len(both),
        "accuracy": float(np.mean(marks)),
        "against_drafted": {
            name: paired([systems[name][at[d["id"]]] for d, _ in both], marks) for name in (*COMPARED, "best", "today")
        },
        "qwen_asked_accuracy": float(np.mean([q == s["answer"] for (_, s), q in zip(both, qwen)])),
        "same_as_qwen_asked": float(np.mean([d["pick"] == q for (d, _), q in zip(both, qwen)])),
        "seconds_per_item": float(np.mean([d["seconds"] for d, _ in both])),
        "scored_seconds_per_item": float(np.mean([s["seconds"] for _, s in both])),
    }


def print_report(report: dict[str, Any]) -> None:
    shown = ("today", "best", "uniform", "uniform+prior", "running", "choices", "fitted", "fitted-log")
    compared = (("fitted-log vs best", "against_best", "fitted-log"), ("fitted vs best", "against_best", "fitted"),
                ("choices vs today", "against_today", "choices"))  # fmt: skip
    print(f"{'task':<14}" + "".join(f"{name:>12}" for name in shown) + "".join(f"  {c[0]:<22}" for c in compared))
    for task, entry in [*report["tasks"].items(), ("pooled", report["pooled"])]:
        cells = "".join(f"{100 * entry['accuracy'][name]:>12.1f}" for name in shown)
        pairs = [entry[against][name] for _, against, name in compared]
        said = ["+{ahead}/-{behind} p={p:.2g}".format(**pair) for pair in pairs]
        print(f"{task:<14}{cells}" + "".join(f"  {each:<22}" for each in said))


def cmd_fit(args: argparse.Namespace) -> int:
    """Task weights for the product (``data/option_weights.json`` entries), fitted as the product
    fits them: each task's on its labelled items with the smoothing and correction the report
    chose for it, and ``choices`` on every task's labelled items, no priors (``--tasks``: only
    these tasks, named and in ``choices``; ``--choices members``: ``choices`` from the ensemble's
    member weights instead). Other ensembles' entries already in the output stay."""
    train = {task: records for task, records in by_task(read(args.train)).items() if task in (args.tasks or [task])}
    entries = []
    for task, records in sorted(train.items()):
        _, settings = chosen_fit(records, args.labelled)
        said = f"{args.labelled} labelled {task} train items (research/data/choices)"
        kept = fit_task(task, *labelled(records[: args.labelled]), said, settings["smoothing"], settings["priors"],
                        settings["labels"])  # fmt: skip
        entries.append(kept.to_json(args.ensemble_key))
    if getattr(args, "choices", "tasks") == "members":
        entries.append(members_choices(args.ensemble_key).to_json(args.ensemble_key))
    else:
        everything = [r for records in train.values() for r in records[: args.labelled]]
        said = f"{len(everything)} labelled items of {len(train)} choice tasks' train splits (research/data/choices)"
        entries.append(fit_task("choices", *labelled(everything), said, 1.0, False).to_json(args.ensemble_key))
    output = Path(args.output)
    kept_before = json.loads(output.read_text(encoding="utf-8")) if output.exists() else []
    others = [entry for entry in kept_before if entry["key"] != args.ensemble_key]
    output.write_text(json.dumps(others + entries, indent=1) + "\n", encoding="utf-8")
    return 0


def members_choices(key: str) -> TaskWeights:
    """``choices`` weights with no choice task's labels: each member's weight in the ensemble's
    shipped calibration (``data/calibrations.json``, fitted on GSM8K), split equally between its
    two ways of answering."""
    entries = [e for e in json.loads(CALIBRATIONS.read_text(encoding="utf-8")) if e["key"] == key]
    if not entries:
        raise SystemExit(f"no shipped calibration for {key!r} in {CALIBRATIONS}")
    weights = {opt.source(member, way): weight / len(opt.WAYS) for member, weight in entries[0]["weights"].items()
               for way in opt.WAYS}  # fmt: skip
    said = "the members' weights of the ensemble's calibration (GSM8K), split equally between asked and scored"
    return TaskWeights("choices", weights, {}, 0, said)


INSIDE = ("choice_point", "drafted", "alone")


def inside_summary(records: Sequence[Record]) -> dict[str, Any]:
    """``option_eval inside``'s records per task and pooled: each way's accuracy and seconds, the
    choice point paired against the drafted field and against the option asked alone."""

    def summed(group: Sequence[Record]) -> dict[str, Any]:
        marks = {name: [r[name] == r["answer"] for r in group] for name in INSIDE}
        return {
            "items": len(group),
            "accuracy": {name: float(np.mean(each)) for name, each in marks.items()},
            "seconds": {name: float(np.mean([r[f"{name}_seconds"] for r in group])) for name in INSIDE},
            "choice_point_vs_drafted": paired(marks["choice_point"], marks["drafted"]),
            "choice_point_vs_alone": paired(marks["choice_point"], marks["alone"]),
            "same_as_drafted": float(np.mean([r["choice_point"] == r["drafted"] for r in group])),
        }

    tasks = by_task([dict(r) for r in records])
    return {**{task: summed(group) for task, group in sorted(tasks.items())}, "pooled": summed(records)}
