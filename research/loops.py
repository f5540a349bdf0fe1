"""Do agent loops end (issue 47)? A tool call is worth something only when the loop ends with an
answer that uses the result. From BFCL's own items (research/data/bfcl_*.jsonl): the question,
the expected call, a made-up result holding a unique marker (``{"result": "K7Q-2231"}``), then
the model's next answer. An item passes when that answer is a message (not a call) holding the
marker. ``--steps 2`` runs the whole loop from the question: the first answer must be a right
call (BFCL's rule), then the message with the marker.

The ensemble and each member alone answer every item (as ``specem eval`` does); the output is
``items.jsonl`` and ``report.json`` in ``specem eval``'s shape, so ``python -m
specem_research.paired_runs`` compares systems and runs. Resumable.

    python -m specem_research.loops research/data/bfcl_simple_python_dev.jsonl --limit 100 --output FOLDER \
        [--steps 2] [--systems ensemble,qwen2.5-coder-0.5b] [--set tool_turns=text]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from specem_local import Ensemble
from specem_local.commands import config_from_args
from specem_local.labelled import Task, calls_correct, load_tasks
from specem_research.stats import mcnemar_exact_p, wilson_interval

MAX_TOKENS = 128


def marker(item_id: str) -> str:
    """A unique, unguessable result for an item (the same on every run)."""
    digest = hashlib.sha256(item_id.encode()).hexdigest().upper()
    return f"K{digest[:2]}-{int(digest[2:8], 16) % 10000:04d}"


def expected_call(task: Task) -> dict[str, Any]:
    """BFCL's first possible answer as a call: each argument's first accepted value (an
    optional argument whose first value is "" is left out)."""
    [(name, arguments)] = task.calls[0].items()
    chosen = {key: values[0] for key, values in arguments.items() if values and values[0] != ""}
    return {"name": name.replace(".", "_"), "arguments": chosen}


def with_result(task: Task, call: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation after ``call`` and its made-up result, as an OpenAI client sends it."""
    call_id = "call_" + task.id.replace(" ", "_")[:20]
    function = {"name": call["name"], "arguments": json.dumps(call["arguments"])}
    called = {"id": call_id, "type": "function", "function": function}
    result = json.dumps({"result": marker(task.id)})
    return [
        *task.messages,
        {"role": "assistant", "content": None, "tool_calls": [called]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def ended_with_marker(final: Any, task: Task) -> bool:
    """The answer is a message (not a call) that holds the item's marker."""
    reply = final.parsed
    return reply is not None and not reply.calls and marker(task.id) in (reply.content or "")


def answer(ensemble: Ensemble, task: Task, models: list[str] | None, steps: int) -> dict[str, Any]:
    started = time.perf_counter()
    tools = list(task.tools)
    record: dict[str, Any] = {}
    call = expected_call(task)
    if steps == 2:
        first = ensemble.chat(list(task.messages), tools=tools, models=models, max_tokens=MAX_TOKENS, greedy=True)
        calls = [{"name": c.name, "arguments": c.arguments} for c in first.parsed.calls] if first.parsed else []
        record["first_call_right"] = bool(calls) and calls_correct(calls, list(task.functions), list(task.calls))
        record["first"] = first.text
        if not record["first_call_right"]:
            record.update(correct=False, seconds=round(time.perf_counter() - started, 3), tokens=first.tokens)
            return record
        call = calls[0]
    final = ensemble.chat(with_result(task, call), tools=tools, models=models, max_tokens=MAX_TOKENS, greedy=True)
    record.update(
        text=final.text,
        correct=ended_with_marker(final, task),
        called_again=bool(final.parsed and final.parsed.calls),
        finish_reason=final.finish_reason,
        tokens=final.tokens,
        seconds=round(time.perf_counter() - started, 3),
    )
    return record


def run(ensemble: Ensemble, tasks: list[Task], output: Path, steps: int, chosen: list[str] | None) -> None:
    output.mkdir(parents=True, exist_ok=True)
    path = output / "items.jsonl"
    done = {json.loads(line)["id"]: json.loads(line) for line in path.read_text().splitlines()} if path.exists() else {}
    everyone: dict[str, list[str] | None] = {"ensemble": None, **{name: [name] for name in ensemble.model_names}}
    systems = {name: models for name, models in everyone.items() if chosen is None or name in chosen}
    with path.open("a", encoding="utf-8") as sink:
        for task in tasks:
            if task.id in done:
                continue
            record = {"id": task.id, "marker": marker(task.id), "systems": {}}
            for system, models in systems.items():
                record["systems"][system] = answer(ensemble, task, models, steps)
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            done[task.id] = record
            said = " ".join(f"{name}={int(result['correct'])}" for name, result in record["systems"].items())
            print(f"{task.id}: {said}", flush=True)
    summary = report(list(done.values()))
    (output / "report.json").write_text(json.dumps(summary, indent=2))
    for name, entry in summary["systems"].items():
        ended, again = f"{entry['correct']}/{entry['items']}", entry["called_again"]
        print(f"{name}: {ended} loops ended with the result; called again {again}")


def report(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per system: loops that ended with the result (with a 95% interval), answers that called
    again; against the ensemble, each member's paired counts and exact p."""
    names = list(records[0]["systems"]) if records else []
    systems = {}
    for name in names:
        results = [r["systems"][name] for r in records]
        correct = sum(bool(x["correct"]) for x in results)
        systems[name] = {
            "items": len(results),
            "correct": correct,
            "ci95": wilson_interval(correct, len(results)),
            "called_again": sum(bool(x.get("called_again")) for x in results),
            "first_call_right": sum(bool(x.get("first_call_right")) for x in results),
            "seconds": round(sum(x["seconds"] for x in results), 1),
        }
    paired = {}
    for name in names if "ensemble" in names else ():
        if name == "ensemble":
            continue
        ahead = sum(r["systems"]["ensemble"]["correct"] and not r["systems"][name]["correct"] for r in records)
        behind = sum(r["systems"][name]["correct"] and not r["systems"]["ensemble"]["correct"] for r in records)
        paired[name] = {"only_ensemble": ahead, "only_member": behind, "p_value": mcnemar_exact_p(ahead, behind)}
    return {"systems": systems, "ensemble_vs_member": paired}


def main() -> None:
    about = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m specem_research.loops", description=about)
    parser.add_argument("tasks", help="BFCL tool-call items (research/data/bfcl_*.jsonl)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--output", required=True)
    parser.add_argument("--steps", type=int, choices=(1, 2), default=1)
    parser.add_argument("--systems", help="comma-separated: ensemble and member names (default: all)")
    parser.add_argument("--set", action="append", default=[], metavar="SETTING=VALUE", help="an [ensemble] setting")
    parser.add_argument("--config")
    parser.add_argument("--ensemble")
    args = parser.parse_args()
    tasks = load_tasks(Path(args.tasks))[: args.limit]
    overrides = dict(item.split("=", 1) for item in args.set)  # e.g. tool_turns=text
    with Ensemble.from_config(config_from_args(args), **overrides) as ensemble:
        chosen = args.systems.split(",") if args.systems else None
        run(ensemble, tasks, Path(args.output), args.steps, chosen)


if __name__ == "__main__":
    sys.exit(main())
