"""``specem eval-pool RUN_FOLDER...``: several ``specem eval`` runs over one tasks file (seeds,
usually) as one paired comparison, without loading a model.

Items are the unit: an item's runs are not independent answers, so its differences from the
best member are summed over the runs before the exact sign-flip test, and the interval uses
the effective number of answers. A second table treats the runs as samples to vote on
(self-consistency, and pass@k).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from specem_local.commands import print_table
from specem_local.errors import SpecemError
from specem_research.evaluate import (
    member_systems,
    paired_comparison,
    print_report,
    read_records,
    read_report,
    summarise,
    systems_in,
)
from specem_research.stats import majority_right, paired_sign_flip_p, repeated_runs_interval


def pool_runs(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Several runs over the same items (seeds, usually) as one comparison, on the items and
    systems every run has: per system the correct answers in each run and in all, an interval
    that treats an item's runs as one draw, and for ensembles a paired test against the best
    member in which each item counts once (its differences summed over the runs)."""
    by_id = [{record["id"]: record for record in records} for records in runs]
    ids = [item for item in by_id[0] if all(item in run for run in by_id[1:])]
    systems = [name for name in systems_in(runs[0]) if all(name in run[i]["systems"] for run in by_id for i in ids)]
    if not ids or not systems:
        raise SpecemError("these runs share no items answered by the same systems; pool runs of one tasks file")
    pooled = [run[i] for run in by_id for i in ids]
    members = member_systems(pooled)
    report = summarise(pooled, systems, [])  # its Wilson interval and McNemar test are replaced below
    right = {name: [[bool(run[i]["systems"][name]["correct"]) for i in ids] for run in by_id] for name in systems}
    per_item = {name: [sum(column) for column in zip(*rows)] for name, rows in right.items()}
    by_majority = {name: _majority_right_per_item(by_id, ids, name) for name in systems}
    for name, entry in report.items():
        entry["correct_per_run"] = [sum(row) for row in right[name]]
        entry["ci95"] = list(repeated_runs_interval(per_item[name], len(runs)))
        entry["majority_correct"] = round(sum(by_majority[name]), 2)
        entry["any_run_correct"] = sum(count > 0 for count in per_item[name])
    if members:
        best = max(members, key=lambda name: report[name]["correct"])
        scale = math.lcm(*range(1, len(runs) + 1))  # tie shares are multiples of 1/k, k <= runs: whole numbers
        for name in systems:
            if name not in members:
                differences = [mine - theirs for mine, theirs in zip(per_item[name], per_item[best])]
                report[name]["vs_best_member"] = {**paired_comparison(pooled, name, best), **_items_test(differences)}
                votes = [round((mine - theirs) * scale) for mine, theirs in zip(by_majority[name], by_majority[best])]
                report[name]["majority_vs_best_member"] = {"baseline": best, **_items_test(votes)}
    return {"runs": len(runs), "items": len(ids), "systems": report}


def _items_test(differences: list[int]) -> dict[str, Any]:
    """Items where a system did better or worse than its baseline, and the exact sign-flip test."""
    return {
        "items_ahead": sum(d > 0 for d in differences),
        "items_behind": sum(d < 0 for d in differences),
        "p_value": paired_sign_flip_p(differences),
    }


def _majority_right_per_item(by_id: list[dict[str, dict[str, Any]]], ids: list[str], system: str) -> list[float]:
    """Per item: the chance that a majority vote over the runs' extracted answers is right."""
    results = [[run[item]["systems"][system] for run in by_id] for item in ids]
    return [majority_right([r.get("extracted") for r in rs], [bool(r["correct"]) for r in rs]) for rs in results]


def cmd_eval_pool(args: argparse.Namespace) -> int:
    runs, decodings = [], []
    for folder in map(Path, args.runs):
        records = read_records(folder / "items.jsonl")
        if not records:
            raise SpecemError(f"{folder}: no items.jsonl with answers; give folders written by specem eval --output")
        runs.append(list(records.values()))
        decodings.append(read_report(folder / "report.json").get("decoding"))
    pooled = {"folders": args.runs, "decoding": decodings, **pool_runs(runs)}
    if args.output:
        try:
            Path(args.output).write_text(json.dumps(pooled, indent=2))
        except OSError as error:
            raise SpecemError(f"{args.output}: cannot write the pooled report ({error.strerror})") from None
    print(f"{pooled['runs']} runs of {pooled['items']} items")
    print_report(pooled)
    print_majority_report(pooled)
    return 0


def print_majority_report(pooled: dict[str, Any]) -> None:
    """The pooled runs as answer-level votes: the majority answer over the runs, and items any
    run got right (self-consistency and pass@k, each item counted once)."""
    rows = []
    for system, entry in pooled["systems"].items():
        paired = entry.get("majority_vs_best_member")
        rows.append(
            (
                system,
                f"{entry['majority_correct']:g}/{pooled['items']}",
                f"{entry['any_run_correct']}/{pooled['items']}",
                f"+{paired['items_ahead']} -{paired['items_behind']} items p={paired['p_value']:.3f}"
                if paired
                else "-",
            )
        )
    runs = pooled["runs"]
    print_table(("SYSTEM", f"MAJORITY OF {runs}", f"ANY OF {runs} RIGHT", "MAJORITY VS BEST MEMBER"), rows)


def add_parser(commands: argparse._SubParsersAction) -> None:
    pool = commands.add_parser("eval-pool", help="several specem eval runs (seeds) as one paired comparison")
    pool.add_argument("runs", nargs="+", metavar="RUN_FOLDER", help="--output folders of specem eval on one tasks file")
    pool.add_argument("--output", help="also write the pooled report to this JSON file")
    pool.set_defaults(handler=cmd_eval_pool)
