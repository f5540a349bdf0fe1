"""How few labelled items a task's weights need (issue 56), from recorded option scores
(``option_eval.py run``), with the product's own fit (``fit_task`` as ``specem calibrate --task``
makes it: smoothing 1, each source's prior divided out).

``curve``: the weights fitted on a task's first N labelled train items, for several N, each
scored on the task's train items past the 100 first (which no fit saw) and on its confirm items;
N = 0 is what a task without labels gets (the ``choices`` weights: fitted on the other tasks'
labelled items). ``online``: a batch of one task that learns as its answers are confirmed: each
item answered with the weights fitted on the items before it (every one of them labelled once
answered), from the ``minimum``-th on, and with the ``choices`` weights before that; paired
against the ``choices`` weights all along (no learning) and against weights fitted first on 100
labelled train items. The minimum is chosen on the train items, each task's 300 a batch in their
order; the confirm items, each task's 500 a batch, report it.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specem_research.option_report import Pick, Record, by_task, fit, mix, paired, read, right

SIZES = (5, 10, 20, 50, 100)
MINIMUMS = (1, 5, 10, 20, 50)
POOL = ("sst2", "boolq", "piqa", "arc_easy", "winogrande")  # the tasks the shipped choices weights come from
HELD_FROM = 100  # train items past these were fitted on by no N of the curve


def product_fit(records: Sequence[Record]) -> Pick:
    """The pick with the weights ``specem calibrate --task`` fits on these labelled records."""
    return mix(fit(records, 1.0, True, False))


def choices_pick(train: Mapping[str, list[dict[str, Any]]], task: str, labelled: int = 100) -> Pick:
    """The ``choices`` weights a task without its own gets: fitted on the other tasks' labelled
    items (the shipped pool's), no priors."""
    others = [r for name, rs in train.items() if name != task and name in POOL for r in rs[:labelled]]
    return mix(fit(others, 1.0, False, False))


def online(stream: Sequence[Record], before: Pick, minimum: int) -> list[bool]:
    """Each item of ``stream`` answered in turn: with the product's fit on every item before it
    once there are ``minimum`` of them, else with ``before``; right or wrong."""
    marks = []
    for index, record in enumerate(stream):
        pick = product_fit(stream[:index]) if index >= minimum else before
        marks.append(pick(record) == record["answer"])
    return marks


def pooled_entry(marks: Mapping[str, list[bool]], against: Sequence[tuple[str, str]]) -> dict[str, Any]:
    entry: dict[str, Any] = {name: float(np.mean(each)) for name, each in marks.items()}
    entry["items"] = len(next(iter(marks.values())))
    for first, second in against:
        entry[f"{first}_vs_{second}"] = paired(marks[first], marks[second])
    return entry


def summarise(per_task: Mapping[str, Mapping[str, list[bool]]], against: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Each task's accuracies and pairs, and the same pooled over the tasks."""
    found: dict[str, Any] = {}
    pooled: dict[str, list[bool]] = defaultdict(list)
    for task, marks in sorted(per_task.items()):
        found[task] = pooled_entry(marks, against)
        for name, each in marks.items():
            pooled[name] += each
    found["pooled"] = pooled_entry(pooled, against)
    return found


def curve(train: Mapping[str, list[dict[str, Any]]], confirm: Mapping[str, list[dict[str, Any]]],
          sizes: Sequence[int] = SIZES) -> dict[str, Any]:  # fmt: skip
    """Each N's weights scored on the held train items and on the confirm items."""
    held: dict[str, dict[str, list[bool]]] = {}
    confirmed: dict[str, dict[str, list[bool]]] = {}
    for task in sorted(set(train) & set(confirm)):
        picks = {"0": choices_pick(train, task), **{str(n): product_fit(train[task][:n]) for n in sizes}}
        held[task] = {name: right(train[task][HELD_FROM:], pick) for name, pick in picks.items()}
        confirmed[task] = {name: right(confirm[task], pick) for name, pick in picks.items()}
    against = [(str(n), str(max(sizes))) for n in (0, *sizes[:-1])]
    return {"held_train": summarise(held, against), "confirm": summarise(confirmed, against)}


def learning(train: Mapping[str, list[dict[str, Any]]], confirm: Mapping[str, list[dict[str, Any]]],
             minimums: Sequence[int] = MINIMUMS) -> dict[str, Any]:  # fmt: skip
    """The learning batch on the train streams for each minimum (the choice), and on the confirm
    streams with the minimum chosen (pooled accuracy on train; ties: the smallest)."""
    on_train: dict[str, dict[str, list[bool]]] = {}
    for task, records in sorted(train.items()):
        start = choices_pick(train, task)
        on_train[task] = {"choices": right(records, start),
                          **{f"online-{m}": online(records, start, m) for m in minimums}}  # fmt: skip
    chosen_train = summarise(on_train, [(f"online-{m}", "choices") for m in minimums])
    best = max(minimums, key=lambda m: (chosen_train["pooled"][f"online-{m}"], -m))
    on_confirm: dict[str, dict[str, list[bool]]] = {}
    for task in sorted(set(train) & set(confirm)):
        start = choices_pick(train, task)
        on_confirm[task] = {"choices": right(confirm[task], start), "online": online(confirm[task], start, best),
                            "fitted-100": right(confirm[task], product_fit(train[task][:100]))}  # fmt: skip
    against = [("online", "choices"), ("online", "fitted-100"), ("fitted-100", "choices")]
    return {"train": chosen_train, "minimum": best, "confirm": summarise(on_confirm, against)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.option_learning")
    parser.add_argument("--train", required=True, help="an option_eval run folder of train items")
    parser.add_argument("--confirm", required=True, help="an option_eval run folder of confirm items")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    train, confirm = by_task(read(args.train)), by_task(read(args.confirm))
    report = {"curve": curve(train, confirm), "learning": learning(train, confirm)}
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for where in ("held_train", "confirm"):
        pooled = report["curve"][where]["pooled"]
        print(where, "  ".join(f"N={n}: {100 * pooled[n]:.1f}" for n in ("0", *map(str, SIZES))))
    learned = report["learning"]
    print(
        "train online",
        "  ".join(f"{m}: {100 * learned['train']['pooled'][f'online-{m}']:.1f}" for m in MINIMUMS),
        f"choices {100 * learned['train']['pooled']['choices']:.1f}; chosen minimum {learned['minimum']}",
    )
    confirmed = learned["confirm"]["pooled"]
    print(
        f"confirm online {100 * confirmed['online']:.1f}  choices {100 * confirmed['choices']:.1f}  "
        f"fitted-100 {100 * confirmed['fitted-100']:.1f}  online vs choices {confirmed['online_vs_choices']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
