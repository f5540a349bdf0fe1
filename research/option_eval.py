"""Questions with options (issue 56): every member's scores of every option, both ways, recorded
through the product's own path, and the systems compared on them.

    python -m specem_research.option_eval run research/data/choices/sst2_train300.jsonl ... --output DIR
    python -m specem_research.option_eval drafted research/data/choices/sst2_confirm500.jsonl --limit 100 --output DIR
    python -m specem_research.option_eval report --train DIR --confirm DIR2 --output REPORT.json
    python -m specem_research.option_eval fit --train DIR --ensemble-key KEY --output WEIGHTS.json
    python -m specem_research.option_eval timing research/data/choices/sst2_confirm500.jsonl --limit 20 --output T.json
    python -m specem_research.option_eval inside research/data/choices/sst2_confirm500.jsonl --limit 100 --output DIR
    python -m specem_research.option_eval inside-report DIR --output INSIDE.json

``run`` asks each item as the product is asked (``Ensemble.stream(question, schema={"enum":
choices}, task=TASK)``: every member scores every option, asked and as plain text, in one step)
and keeps each source's summed log-probability of each option (the answer's round candidates),
so every system below is computed from the same scores: each (member, way) alone, raw and with
its label prior divided out; the uniform mix; the mix with the task's weights fitted on labelled
items. ``drafted`` answers the same questions the way the product did before (drafted in rounds
under the enum schema, no thinking, the shipped weights): "today's default". Resumable: items
already recorded are skipped. ``timing``: seconds per item of each way of answering (among the
options or drafted; the ensemble or its best member alone), in turn on the same items, in one
process: run it with nothing else running. ``inside``: the option as the one field of a JSON
object (a choice point inside a larger answer, docs/choices.md), scored in context and drafted,
beside the option asked alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specem_local.engine import Ensemble
from specem_local.events import FinalEvent, RoundEvent
from specem_local.models import load_config


def read_items(paths: list[str], limit: int | None) -> list[dict[str, Any]]:
    """The items of each task file (the first ``limit`` of each), the answer as an index."""
    items = []
    for path in paths:
        lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        for item in lines[:limit]:
            items.append({**item, "answer": "ABCDEFGHIJ".index(item["answer"])})
    return items


def done_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


def scored(ensemble: Ensemble, item: dict[str, Any], models: list[str] | None = None) -> dict[str, Any]:
    """One item through the product's path: each source's scores of each option (``models``:
    of these members only)."""
    started = time.perf_counter()
    events = list(ensemble.stream(item["question"], schema={"enum": item["choices"]}, task=item["task"], models=models))
    chosen = next(e for e in events if isinstance(e, RoundEvent))
    final = events[-1]
    assert isinstance(final, FinalEvent) and chosen.decision == "options", "not answered among its options"
    sources = list(chosen.candidates[0].scores)
    return {
        "id": item["id"],
        "task": item["task"],
        "answer": item["answer"],
        "options": len(item["choices"]),
        "choices": item["choices"],
        "scores": {name: [c.scores[name] for c in chosen.candidates] for name in sources},
        "pick": [c.text for c in chosen.candidates].index(final.text),
        "confidence": final.confidence,
        "seconds": time.perf_counter() - started,
    }


def drafted(ensemble: Ensemble, item: dict[str, Any]) -> dict[str, Any]:
    """One item the way the product answered before issue 56: drafted under the schema."""
    started = time.perf_counter()
    final = ensemble.generate(item["question"], schema={"enum": item["choices"]}, score_options=False, think=False)
    pick = item["choices"].index(final.parsed) if final.parsed in item["choices"] else None
    return {"id": item["id"], "task": item["task"], "answer": item["answer"], "pick": pick,
            "text": final.text, "wins": final.wins, "seconds": time.perf_counter() - started}  # fmt: skip


def inside(ensemble: Ensemble, item: dict[str, Any]) -> dict[str, Any]:
    """One item asked for a JSON object whose one field is the option: the field as a choice point
    (scored in context, the task's asked-way weights), drafted (``score_options`` off), and, on
    the same item, the answer asked for the option alone (one step, both ways)."""
    schema = {"type": "object", "properties": {"answer": {"enum": item["choices"]}}, "required": ["answer"],
              "additionalProperties": False}  # fmt: skip
    record: dict[str, Any] = {"id": item["id"], "task": item["task"], "answer": item["answer"]}
    for name, asked in (("choice_point", {"schema": schema, "choice_points": True}),
                        ("drafted", {"schema": schema, "score_options": False}),
                        ("alone", {"schema": {"enum": item["choices"]}})):  # fmt: skip
        started = time.perf_counter()
        final = ensemble.generate(item["question"], task=item["task"], think=False, **asked)
        value = final.parsed.get("answer") if isinstance(final.parsed, dict) else final.parsed
        record[name] = item["choices"].index(value) if value in item["choices"] else None
        record[f"{name}_seconds"] = time.perf_counter() - started
    return record


def cmd_answer(args: argparse.Namespace, answer: Any) -> int:
    items = read_items(args.tasks, args.limit)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "items.jsonl"
    done = done_ids(path)
    todo = [item for item in items if item["id"] not in done]
    os.environ["SPECEM_DATA_DIR"] = str(output / "data")  # no task weights but what this run keeps: uniform
    config = load_config(ensemble=args.ensemble)
    with Ensemble.from_config(config, greedy=True) as ensemble, path.open("a", encoding="utf-8") as out:
        # its weight store is in the run's own data dir, empty: the shipped calibration, as a new user has
        for number, item in enumerate(todo, 1):
            out.write(json.dumps(answer(ensemble, item, args.models) if args.models else answer(ensemble, item)) + "\n")
            out.flush()
            if number % 25 == 0:
                print(f"{number}/{len(todo)}", flush=True)
    return 0


def cmd_timing(args: argparse.Namespace) -> int:
    items = read_items(args.tasks, args.limit)
    os.environ["SPECEM_DATA_DIR"] = tempfile.mkdtemp(prefix="specem-timing-")
    alone = (args.member,)
    with Ensemble.from_config(load_config(ensemble=args.ensemble), greedy=True) as ensemble:

        def answering(scored: bool, models: tuple[str, ...] | None) -> Callable[[dict[str, Any]], object]:
            drafted = {} if scored else {"score_options": False, "think": False}
            return lambda i: ensemble.generate(i["question"], schema={"enum": i["choices"]}, models=models, **drafted)

        ways = {"options, the ensemble": answering(True, None), "options, alone": answering(True, alone),
                "drafted, the ensemble": answering(False, None), "drafted, alone": answering(False, alone)}  # fmt: skip
        for way in ways.values():  # warm: each way once before the clock
            way(items[0])
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        for item in items:
            for name, way in ways.items():
                started = time.perf_counter()
                way(item)
                seconds[name].append(time.perf_counter() - started)
    base = statistics.median(seconds["options, alone"])
    report = {"items": len(items), "member": args.member, "ensemble": args.ensemble, "ways": {
        name: {"median_seconds": statistics.median(s), "mean_seconds": statistics.fmean(s),
               "median_against_options_alone": statistics.median(s) / base}
        for name, s in seconds.items()
    }}  # fmt: skip
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for name, entry in report["ways"].items():
        print(f"{name:<24} {entry['median_seconds']:.3f} s  {entry['median_against_options_alone']:.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.option_eval")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "drafted", "inside"):
        command = commands.add_parser(name)
        command.add_argument("tasks", nargs="+")
        command.add_argument("--output", required=True)
        command.add_argument("--limit", type=int)
        command.add_argument("--ensemble", default="demo")
        command.add_argument("--models", nargs="+", metavar="NAME", help="these members only (run)")
    report = commands.add_parser("report")
    report.add_argument("--train", required=True)
    report.add_argument("--confirm", required=True)
    report.add_argument("--drafted")
    report.add_argument("--labelled", type=int, default=100)
    report.add_argument("--choices-from", nargs="+", metavar="TASK", help="the tasks choices is fitted on (all)")
    report.add_argument("--output", required=True)
    fit = commands.add_parser("fit")
    fit.add_argument("--train", required=True)
    fit.add_argument("--labelled", type=int, default=100)
    fit.add_argument("--ensemble-key", required=True)
    fit.add_argument("--tasks", nargs="+", metavar="TASK", help="the tasks whose weights ship (default: all)")
    fit.add_argument(
        "--choices",
        choices=("tasks", "members"),
        default="tasks",
        help="choices from the tasks' labelled items, or from the ensemble's member weights",
    )
    fit.add_argument("--output", required=True)
    splits = commands.add_parser("splits", help="the log-linear pool against the best source on train splits")
    splits.add_argument("--train", required=True)
    splits.add_argument("--labelled", type=int, default=100)
    splits.add_argument("--repeats", type=int, default=8)
    splits.add_argument("--seed", type=int, default=1)
    splits.add_argument("--output", required=True)
    inside_report = commands.add_parser("inside-report")
    inside_report.add_argument("run", help="an option_eval inside output folder")
    inside_report.add_argument("--output", required=True)
    timing = commands.add_parser("timing")
    timing.add_argument("tasks", nargs="+")
    timing.add_argument("--output", required=True)
    timing.add_argument("--limit", type=int, default=20)
    timing.add_argument("--ensemble", default="demo")
    timing.add_argument("--member", default="qwen2.5-coder-0.5b", help="the member timed alone")
    args = parser.parse_args(argv)
    if args.command == "timing":
        return cmd_timing(args)
    if args.command == "run":
        return cmd_answer(args, scored)
    if args.command == "drafted":
        return cmd_answer(args, drafted)
    if args.command == "inside":
        return cmd_answer(args, inside)
    if args.command == "inside-report":
        from specem_research.option_report import inside_summary, read

        summary = inside_summary(read(args.run))
        Path(args.output).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(summary["pooled"], indent=1))
        return 0
    from specem_research import option_report

    if args.command == "splits":
        return option_report.cmd_splits(args)
    return option_report.cmd_report(args) if args.command == "report" else option_report.cmd_fit(args)


if __name__ == "__main__":
    raise SystemExit(main())
