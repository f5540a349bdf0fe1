"""A third way of asking a question with options (issue 56), tried on recorded items before any
product change: each option scored as a plain-text continuation after a few labelled examples
of the task (few-shot, as lm-eval-harness scores MMLU), the source ``shots:MEMBER``.

    python -m specem_research.option_shots run research/data/choices/sst2_train300.jsonl ... --output DIR
    python -m specem_research.option_shots merge research/results/issue56-train DIR --output MERGED

The examples are the task's labelled train items (the first ``--labelled`` of its
``*_train300.jsonl``, the budget a task's weights are fitted from), taken in order, one for each
answer in turn (so both labels of a yes/no task show), ``--shots`` of them, never the item
itself: an item among them is replaced by the next one of its answer. Each example is written as
the scored way writes a question (``options.plain_text``) followed by its answer's words; the
examples and the question are separated by a blank line. ``merge`` adds the shots sources to an
``option_eval run``'s records, so ``option_eval report`` and ``splits`` weigh them beside the others.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specem_local.engine import Ensemble, Message, option_log_probabilities, plain_tokens
from specem_local.engine import options as opt
from specem_local.models import load_config
from specem_research.option_eval import done_ids, read_items

WAY = "shots"


def question_text(item: dict[str, Any]) -> str:
    """An item's question as the scored way writes it, ending in ``Answer:``."""
    return opt.plain_text([Message("user", item["question"])])


def words_of(item: dict[str, Any]) -> tuple[str, ...]:
    """Each option as the scored way continues with it (a space, then its words)."""
    found = opt.options_in({"enum": item["choices"]})
    assert found is not None, f"{item['id']}: its choices are not distinct options"
    return tuple(" " + word for word in found.words)


def examples_for(labelled: Sequence[dict[str, Any]], count: int, leave_out: str) -> list[dict[str, Any]]:
    """``count`` labelled items, one of each answer in turn, in the order given, none of them
    ``leave_out``: fewer when the labelled items run out."""
    queues: dict[int, list[dict[str, Any]]] = {}
    for item in labelled:
        if item["id"] != leave_out:
            queues.setdefault(item["answer"], []).append(item)
    chosen: list[dict[str, Any]] = []
    while len(chosen) < count and any(queues.values()):
        for answer in sorted(queues):
            if queues[answer] and len(chosen) < count:
                chosen.append(queues[answer].pop(0))
    return chosen


def shots_prompt(examples: Sequence[dict[str, Any]], item: dict[str, Any]) -> str:
    """The examples, each answered, then the item's question, ending in ``Answer:``."""
    shown = [question_text(e) + words_of(e)[e["answer"]] for e in examples]
    return "\n\n".join([*shown, question_text(item)])


def scored_after(ensemble: Ensemble, examples: Sequence[dict[str, Any]], item: dict[str, Any]) -> dict[str, Any]:
    """Each member's summed log-probability of each option after the examples and the question
    (its cached prefix reused: the examples are the same from item to item)."""
    text = shots_prompt(examples, item)
    scores = {}
    for member in ensemble.members:
        summed, _ = option_log_probabilities(member, tuple(plain_tokens(member, text)), words_of(item), True)
        scores[opt.source(member.name, WAY)] = summed
    return {"id": item["id"], "task": item["task"], "scores": scores}


def labelled_items(task_file: str, labelled: int) -> list[dict[str, Any]]:
    """The task's labelled budget: the first ``labelled`` items of its ``*_train300.jsonl``,
    beside ``task_file`` (a train or confirm file)."""
    path = Path(task_file)
    return read_items([str(path.with_name(path.name.rsplit("_", 1)[0] + "_train300.jsonl"))], labelled)


def cmd_run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "items.jsonl"
    done = done_ids(path)
    todo = [(task_file, item) for task_file in args.tasks for item in read_items([task_file], args.limit)
            if item["id"] not in done]  # fmt: skip
    examples = {task_file: labelled_items(task_file, args.labelled) for task_file in args.tasks}
    os.environ["SPECEM_DATA_DIR"] = tempfile.mkdtemp(prefix="specem-shots-")
    config = load_config(ensemble=args.ensemble)
    with Ensemble.from_config(config, greedy=True) as ensemble, path.open("a", encoding="utf-8") as out:
        for number, (task_file, item) in enumerate(todo, 1):
            shown = examples_for(examples[task_file], args.shots, item["id"])
            out.write(json.dumps(scored_after(ensemble, shown, item)) + "\n")
            out.flush()
            if number % 25 == 0:
                print(f"{number}/{len(todo)}", flush=True)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """The ``option_eval run`` records with the shots sources added (or another run's sources:
    a member run alone), those with no shots left out; ``--leave-out``: these members' sources
    dropped (an ensemble without them)."""
    shots = {}
    for line in (Path(args.shots) / "items.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            shots[record["id"]] = record["scores"]
    merged = []
    for line in (Path(args.run) / "items.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else None
        if record is not None and record["id"] in shots:
            scores = {**record["scores"], **shots[record["id"]]}
            kept = {name: values for name, values in scores.items() if name.split(":", 1)[1] not in args.leave_out}
            merged.append(json.dumps({**record, "scores": kept}))
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "items.jsonl").write_text("".join(line + "\n" for line in merged), encoding="utf-8")
    print(f"{len(merged)} records with the shots sources in {output / 'items.jsonl'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.option_shots")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="score every option after a few labelled examples")
    run.add_argument("tasks", nargs="+", help="task files (research/data/choices/*.jsonl)")
    run.add_argument("--output", required=True)
    run.add_argument("--limit", type=int)
    run.add_argument("--shots", type=int, default=4)
    run.add_argument("--labelled", type=int, default=100, help="the examples come from the first N train items")
    run.add_argument("--ensemble", default="demo")
    merge = commands.add_parser("merge", help="add the shots sources to an option_eval run's records")
    merge.add_argument("run")
    merge.add_argument("shots")
    merge.add_argument("--output", required=True)
    merge.add_argument("--leave-out", nargs="*", default=[], metavar="MEMBER", help="drop these members' sources")
    args = parser.parse_args(argv)
    return cmd_run(args) if args.command == "run" else cmd_merge(args)


if __name__ == "__main__":
    raise SystemExit(main())
