"""``specem eval TASKS.jsonl``: the ensemble against each of its members, on the same items.

Every system (the ensemble, each member alone, and any named ensemble variants) answers every
item with the same prompt and decoding settings, in one process with the models loaded once.
Writes ``items.jsonl`` (one line per item: prompt, each system's answer, correct or not) and
``report.json`` (per system: accuracy with a 95% interval, tokens, seconds; for ensembles the
share of winning segments per model and the average final weights). Resumable: items already
in ``items.jsonl`` are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from specem_local.commands import (
    add_settings_flags,
    config_from_args,
    print_table,
    settings_overrides,
    whole_number,
)
from specem_local.dirs import read_text
from specem_local.errors import SpecemError
from specem_local.labelled import Task, load_tasks
from specem_local.models import Config, tomllib
from specem_local.setting_fields import checked_values
from specem_local.settings import EnsembleSettings, with_overrides
from specem_research.stats import mcnemar_exact_p, wilson_interval


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:key=value,key=value`` -> a named set of [ensemble] overrides. Values are read as
    TOML (``true``, ``0.5``, ``"logit"``); a bare word is a string."""
    name, _, assignments = text.partition(":")
    if not name or not assignments:
        raise SpecemError(f"--variant {text!r}: expected NAME:key=value[,key=value]")
    table: dict[str, Any] = {}
    for assignment in assignments.split(","):
        key, _, raw = assignment.partition("=")
        try:
            table[key.strip()] = tomllib.loads(f"value = {raw.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            table[key.strip()] = raw.strip()
    return name, checked_values(EnsembleSettings, table, f"--variant {name}", "setting")


def paired_comparison(records: list[dict[str, Any]], system: str, baseline: str) -> dict[str, Any]:
    """``system`` against ``baseline`` on the items both answered: how many only one of them
    got right, and the exact McNemar p-value of that split."""
    both = [r["systems"] for r in records if system in r["systems"] and baseline in r["systems"]]
    only_system = sum(s[system]["correct"] and not s[baseline]["correct"] for s in both)
    only_baseline = sum(s[baseline]["correct"] and not s[system]["correct"] for s in both)
    return {
        "baseline": baseline,
        "items": len(both),
        "only_system_correct": only_system,
        "only_baseline_correct": only_baseline,
        "p_value": mcnemar_exact_p(only_system, only_baseline),
    }


def summarise(records: list[dict[str, Any]], systems: list[str], members: list[str]) -> dict[str, Any]:
    """Per-system accuracy with a 95% interval, tokens and seconds; for ensembles, segment
    shares, final weights and a paired comparison with the best member alone."""
    report: dict[str, Any] = {}
    for system in systems:
        results = [r["systems"][system] for r in records if system in r["systems"]]
        correct = sum(result["correct"] for result in results)
        low, high = wilson_interval(correct, len(results))
        entry: dict[str, Any] = {
            "items": len(results),
            "correct": correct,
            "accuracy": correct / len(results) if results else 0.0,
            "ci95": [low, high],
            "tokens": sum(r["tokens"] for r in results),
            "seconds": round(sum(r["seconds"] for r in results), 2),
            "finish_reasons": dict(Counter(r["finish_reason"] for r in results)),
        }
        if results and results[0].get("wins") and len(results[0]["wins"]) > 1:
            wins: dict[str, int] = {}
            weights: dict[str, float] = {}
            for result in results:
                for name, count in result["wins"].items():
                    wins[name] = wins.get(name, 0) + count
                for name, weight in result["weights"].items():
                    weights[name] = weights.get(name, 0.0) + weight / len(results)
            total = sum(wins.values()) or 1
            entry["segment_share"] = {name: count / total for name, count in wins.items()}
            entry["mean_final_weights"] = weights
            entry["drafters_per_round"] = sum(map(_drafters_per_round, results)) / len(results)
            if all("drafted_tokens" in r for r in results):  # every candidate's tokens, per item
                entry["drafted_tokens_per_item"] = sum(r["drafted_tokens"] for r in results) / len(results)
            rounds = sum(r.get("rounds", 0) for r in results)
            if rounds and any(r.get("confident_rounds") for r in results):  # the vote gate's share
                entry["confident_share"] = sum(r.get("confident_rounds", 0) for r in results) / rounds
            if any(r.get("contrast_changed") for r in results):  # the token-level contrast's changed choices
                entry["contrast_changed_share"] = sum(r.get("contrast_changed", 0) for r in results) / entry["tokens"]
            if "start_weights" in results[-1]:  # where carrying the weights over the items got to
                entry["start_weights_after"] = {
                    str(answers): results[answers]["start_weights"]
                    for answers in (20, 50, 100)
                    if answers < len(results)
                }
                entry["last_start_weights"] = results[-1]["start_weights"]
        report[system] = entry
    if members:
        best = max(members, key=lambda name: report[name]["correct"])
        for system in systems:
            if system not in members:
                report[system]["vs_best_member"] = paired_comparison(records, system, best)
    return report


def _drafters_per_round(result: dict[str, Any]) -> float:
    """Records written before the field was renamed call it ``models_per_round``."""
    return result.get("drafters_per_round", result.get("models_per_round", 0.0))


def systems_in(records: list[dict[str, Any]]) -> list[str]:
    """Every system that answered in ``records``, in the order they first appear."""
    return list(dict.fromkeys(name for record in records for name in record["systems"]))


def member_systems(records: list[dict[str, Any]]) -> list[str]:
    """Systems in ``records`` that are one model answering alone: only that model won segments."""
    return [
        name
        for name in systems_in(records)
        if all(set(r["systems"][name].get("wins") or {}) <= {name} for r in records if name in r["systems"])
    ]


def read_records(items_path: Path) -> dict[str, dict[str, Any]]:
    """The records in ``items.jsonl`` by item id; a resumed item's last line counts. A file that
    is not one ``specem eval`` wrote (binary, a folder, a line nested too deep, a system without
    its answer's fields) is one error naming the file and the line."""
    done: dict[str, dict[str, Any]] = {}
    if not os.path.lexists(items_path):
        return done
    for number, line in enumerate(read_text(items_path, "run file").splitlines(), start=1):
        if line.strip():
            try:
                record = record_from_json(line)
            except ValueError as error:
                raise SpecemError(
                    f"{items_path}:{number}: not a line written by specem eval ({error}); "
                    "move the file away or choose another folder"
                ) from None
            done[record["id"]] = record
    return done


def read_report(path: Path) -> dict[str, Any]:
    """A run's ``report.json`` ({} when there is none yet); a damaged one is one line."""
    if not os.path.lexists(path):
        return {}
    try:
        report = json.loads(read_text(path, "run report"))
    except (json.JSONDecodeError, RecursionError):
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("variants", {}), dict):
        raise SpecemError(f"{path}: not a report written by specem eval; move it away (eval writes it again)")
    return report


RESULT_FIELDS: dict[str, Any] = {  # what every report reads of a system's answer to an item
    "correct": bool,
    "extracted": (str, type(None)),
    "tokens": int,
    "seconds": (int, float),
    "finish_reason": str,
}


def record_from_json(line: str) -> dict[str, Any]:
    """One line of ``items.jsonl``, checked so that every report can read it; ``ValueError``
    says what is wrong."""
    try:
        record = json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        raise ValueError('expected an object with an "id"')
    systems = record.get("systems")
    if not isinstance(systems, dict) or not all(isinstance(result, dict) for result in systems.values()):
        raise ValueError('"systems" must map each system to its answer')
    for name, result in systems.items():
        for field, kinds in RESULT_FIELDS.items():
            value = result.get(field)
            if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is not bool):
                raise ValueError(f"system {name[:40]!r} has no {field} of the right kind")
        if result["tokens"] < 0 or not 0 <= result["seconds"] < math.inf:
            raise ValueError(f"system {name[:40]!r}: tokens and seconds must be counts")
        for field in ("wins", "weights"):
            values = result.get(field) or {}
            if not isinstance(values, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values.values()
            ):
                raise ValueError(f"system {name[:40]!r}: {field} must map models to numbers")
    return record


def cmd_eval(args: argparse.Namespace) -> int:
    tasks = load_tasks(Path(args.tasks))[: args.limit]
    config = config_from_args(args)
    base: dict[str, Any] = {"greedy": not args.sampled}  # --seed sets the sampling seed
    base.update(settings_overrides(args))
    with_overrides(config.ensemble, **base)  # validate before loading anything
    if args.schema:
        from specem_local.engine import output_format_from

        base["schema"] = read_text(Path(args.schema), "--schema")
        output_format_from(base["schema"])  # a bad schema is said before any model loads
    if args.one_call:
        if not any(task.tools for task in tasks):
            raise SpecemError("--one-call: these items offer no tools; it is for tool-call items")
        base["parallel_tool_calls"] = False
    if args.think is not None:  # think first (issue 46): tool calls do only when asked
        base["think"] = {"true": True, "false": False}.get(
            args.think, int(args.think) if args.think.isdigit() else args.think
        )
    variants = dict(parse_variant(v) for v in args.variant or [])
    if args.weights and not Path(args.weights).is_file():
        raise SpecemError(f"--weights {args.weights}: no such file; make one with specem calibrate")
    names = [spec.name for spec in config.models]
    for name in args.member or []:
        if name not in names:
            raise SpecemError(f"--member {name}: not a model of this ensemble ({', '.join(names)})")
    predictions = predictions_from(args.prediction_from) if args.prediction_from else {}
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise SpecemError(f"--output {output}: not a folder; eval writes items.jsonl and report.json into a folder")
    items_path = output / "items.jsonl"
    done = read_records(items_path)
    if args.report_only:
        if not done:
            raise SpecemError(f"{items_path}: no answers to report; run specem eval without --report-only first")
    else:
        output.mkdir(parents=True, exist_ok=True)
        run_systems(args, config, base, variants, tasks, done, items_path, predictions)
    records = [done[task.id] for task in tasks if task.id in done]
    report_path = output / "report.json"
    earlier = read_report(report_path)
    report = {
        "tasks": str(args.tasks),
        "items": len(records),
        "config": config.source,
        "decoding": earlier.get("decoding", base) if args.report_only else base,
        "variants": {**earlier.get("variants", {}), **variants},
        **({"note": earlier["note"]} if "note" in earlier else {}),
        "systems": summarise(records, systems_in(records), member_systems(records)),
    }
    report_path.write_text(json.dumps(report, indent=2))
    print_report(report)
    return 0


def predictions_from(said: str) -> dict[str, str]:
    """``DIR:SYSTEM``: each item's answer by SYSTEM in DIR's items.jsonl, as its prediction (the
    trio's answers, read ahead by the 1.5B that answers in their place: issue 55's escalation)."""
    folder, _, system = said.rpartition(":")
    records = read_records(Path(folder) / "items.jsonl") if folder else {}
    found = {key: record["systems"][system]["text"] for key, record in records.items() if system in record["systems"]}
    if not found:
        raise SpecemError(f"--prediction-from {said}: no answers of {system!r} in {folder or '?'}/items.jsonl; "
                          "give DIR:SYSTEM, an eval folder and one of its systems")  # fmt: skip
    return found


def _predicted(final: Any) -> dict[str, int]:
    return {"predicted_tokens": final.predicted_tokens, "unpredicted_tokens": final.unpredicted_tokens}


def _reasoning(final: Any) -> dict[str, Any]:
    """What an answer thought before its format (think first), when it did."""
    if not final.reasoning and final.switched is None:
        return {}
    return {"reasoning": final.reasoning, "reasoning_tokens": final.reasoning_tokens, "switched": final.switched}


def run_systems(
    args: argparse.Namespace,
    config: Config,
    base: dict[str, Any],
    variants: dict[str, dict[str, Any]],
    tasks: list[Task],
    done: dict[str, dict[str, Any]],
    items_path: Path,
    predictions: dict[str, str],
) -> None:
    """Answer every task with every system not yet in ``done`` (updated in place), appending
    each finished item to ``items.jsonl``. Each ensemble system keeps its weights in its own
    store in the output folder (``weights/<system>.db``), never the user's nor another
    system's: a copy of ``--weights`` (a calibration), or empty (the prior). ``predictions``:
    an item's predicted output, by its id (``--prediction-from``)."""
    from tqdm import tqdm

    from specem_local.engine import Ensemble
    from specem_local.storage import WeightStore

    stores = items_path.parent / "weights"
    with Ensemble.from_config(config) as ensemble:
        systems: dict[str, tuple[list[str] | None, dict[str, Any]]] = {}
        if not args.members_only:
            systems["ensemble"] = (None, {})
        for name, overrides in variants.items():
            systems[name] = (None, overrides)
        if not args.ensemble_only:
            alone = args.member or ensemble.model_names
            for name in alone:
                systems[name] = ([name], {})
        todo = [task for task in tasks if task.id not in done or set(systems) - set(done[task.id]["systems"])]
        with items_path.open("a", encoding="utf-8") as sink:
            for task in tqdm(todo, desc="eval", unit="item", file=sys.stderr):
                expected = json.dumps(list(task.calls)) if task.tools else task.answer
                fresh = {"id": task.id, "prompt": task.prompt, "expected": expected, "systems": {}}
                record = done.get(task.id, fresh)
                for system, (models, overrides) in systems.items():
                    if system in record["systems"]:
                        continue
                    store = stores / f"{system}.db"
                    if args.weights and not store.exists():  # every system starts from the same calibration
                        store.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(args.weights, store)
                    ensemble.weight_store = WeightStore(store)
                    started = time.perf_counter()
                    asked = {**base, **overrides, **task.options}
                    if task.id in predictions:
                        asked["prediction"] = predictions[task.id]
                    events = list(ensemble.stream(task.prompt, models=models, **asked))
                    start, final = events[0], events[-1]
                    extracted, correct = task.grade(final.text, final.finish_reason, structured="schema" in base)
                    record["systems"][system] = {
                        "text": final.text,
                        "extracted": extracted,
                        "correct": correct,
                        "tokens": final.tokens,
                        "seconds": round(time.perf_counter() - started, 3),
                        "finish_reason": final.finish_reason,
                        "wins": final.wins,
                        "weights": final.weights,
                        "start_weights": start.weights,
                        "weights_from": start.weights_from,
                        "drafters_per_round": final.drafters_per_round,
                        "rounds": final.rounds,
                        "confident_rounds": final.confident_rounds,
                        "drafted_tokens": final.drafted_tokens,
                        "contrast_changed": final.contrast_changed,
                        **(_predicted(final) if task.id in predictions else {}),
                        "confidence": final.confidence,
                        "evidence": final.evidence,
                        **_reasoning(final),
                    }
                done[task.id] = record
                sink.write(json.dumps(record, ensure_ascii=False) + "\n")
                sink.flush()


def print_report(report: dict[str, Any]) -> None:
    rows = []
    for system, entry in report["systems"].items():
        low, high = entry["ci95"]
        share = entry.get("segment_share")
        share_text = ", ".join(f"{n[:8]} {v:.0%}" for n, v in share.items()) if share else "-"
        paired = entry.get("vs_best_member")
        paired_text = "-"
        if paired:
            items = f" ({paired['items_ahead']}/{paired['items_behind']} items)" if "items_ahead" in paired else ""
            paired_text = (
                f"+{paired['only_system_correct']} -{paired['only_baseline_correct']}{items} p={paired['p_value']:.3f}"
            )
        rows.append(
            (
                system,
                f"{entry['correct']}/{entry['items']}"
                + (f" ({'+'.join(map(str, entry['correct_per_run']))})" if "correct_per_run" in entry else ""),
                f"{entry['accuracy']:.1%}",
                f"[{low:.1%}, {high:.1%}]",
                entry["tokens"],
                f"{entry['seconds']:.0f}",
                paired_text,
                share_text,
            )
        )
    print_table(("SYSTEM", "CORRECT", "ACC", "95% CI", "TOKENS", "SECONDS", "VS BEST MEMBER", "SEGMENT SHARE"), rows)


def add_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("eval", parents=[common], help="accuracy of the ensemble vs each member")
    parser.add_argument("tasks", help="JSON lines: question + numeric answer, or question + choices + letter")
    parser.add_argument("--output", default="eval-results", help="folder for items.jsonl and report.json")
    parser.add_argument("--limit", type=whole_number(1, 10**9), default=None, help="only the first N items")
    parser.add_argument("--sampled", action="store_true", help="sample (with --seed) instead of greedy decoding")
    parser.add_argument(
        "--variant",
        action="append",
        metavar="NAME:KEY=VALUE,...",
        help="an extra ensemble system with these settings, e.g. paper:scoring=logit",
    )
    parser.add_argument("--ensemble-only", action="store_true", help="skip the members alone")
    parser.add_argument(
        "--weights", metavar="SPECEM_DB", help="start the ensemble systems from this weights database (a calibration)"
    )
    parser.add_argument(
        "--member", action="append", metavar="NAME", help="only these members alone (repeat; default: every member)"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="answer nothing: rewrite report.json from the answers already in items.jsonl",
    )
    parser.add_argument("--members-only", action="store_true", help="skip the default ensemble")
    parser.add_argument(
        "--prediction-from",
        metavar="DIR:SYSTEM",
        help="each item's predicted output (read ahead, the same answer faster): SYSTEM's answer in DIR/items.jsonl",
    )
    parser.add_argument(
        "--schema", metavar="FILE", help="every system answers as JSON matching this schema, graded by its answer field"
    )
    parser.add_argument(
        "--think",
        nargs="?",
        const="true",
        metavar="LEVEL",
        help="every system thinks first (true, false, low, medium, high or tokens); tool calls only think when asked",
    )
    parser.add_argument(
        "--one-call",
        action="store_true",
        help="tool-call items: one call at most (parallel_tool_calls false), for items that want one",
    )
    add_settings_flags(parser)
    parser.set_defaults(handler=cmd_eval)
