"""``specem eval-adaptive --voter RUN:SYSTEM ...``: the answer-level mode of issue 26, measured
on answers already in ``specem eval`` runs, without loading a model.

Adaptive self-consistency with several systems as voters (ModelSwitch-style): ask the voters
in order and stop as soon as two of them give the same final answer; after the last one, the
most common answer wins, ties going to the earliest voter. An item costs the seconds and
tokens of the voters that were asked, so the comparison at equal compute is the best member's
own adaptive vote over its samples at the same cost.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specem_local.commands import print_table, whole_number
from specem_local.errors import SpecemError
from specem_research.evaluate import read_records
from specem_research.stats import mcnemar_exact_p, wilson_interval


def adaptive_vote(answers: Sequence[str | None], agree: int = 2) -> tuple[int, int]:
    """Ask voters in order until ``agree`` of them give one answer (None, no answer, never
    agrees). Returns (the index of the first voter with the chosen answer, voters asked); -1
    when no voter gave an answer. After every voter: the most common answer, ties to the
    earliest voter that gave one of them."""
    counts: Counter[str] = Counter()
    for asked, answer in enumerate(answers, start=1):
        if answer is None:
            continue
        counts[answer] += 1
        if counts[answer] >= agree:
            return answers.index(answer), asked
    if not counts:
        return -1, len(answers)
    most = max(counts.values())
    first = min(answers.index(answer) for answer, count in counts.items() if count == most)
    return first, len(answers)


def parse_voter(text: str) -> tuple[Path, str]:
    """``RUN_FOLDER:SYSTEM`` (the last colon splits, so a folder may hold one)."""
    folder, colon, system = text.rpartition(":")
    if not colon or not folder or not system:
        raise SpecemError(f"--voter {text!r}: write RUN_FOLDER:SYSTEM, e.g. eval-results:qwen2.5-coder-0.5b")
    return Path(folder), system


def load_voters(voters: Sequence[str]) -> list[list[dict[str, Any]]]:
    """Per item every voter answered, each voter's answer record, in voter order."""
    runs: dict[Path, dict[str, dict[str, Any]]] = {}
    parsed = [parse_voter(text) for text in voters]
    for folder, _ in parsed:
        if folder not in runs:
            runs[folder] = read_records(folder / "items.jsonl")
            if not runs[folder]:
                raise SpecemError(f"{folder}: no items.jsonl with answers; give --output folders of specem eval")
    first = runs[parsed[0][0]]
    ids = [item for item in first if all(system in runs[f].get(item, {}).get("systems", {}) for f, system in parsed)]
    if not ids:
        raise SpecemError("these voters share no answered items; give runs of one tasks file")
    return [[runs[folder][item]["systems"][system] for folder, system in parsed] for item in ids]


def adaptive_report(answers: list[list[dict[str, Any]]], agree: int = 2) -> dict[str, Any]:
    """The adaptive vote over each item's voter answers against the first voter alone: correct,
    voters asked, seconds and tokens relative to the first voter, the paired exact test."""
    correct = ahead = behind = asked_total = 0
    seconds = tokens = 0.0
    for voters in answers:
        chosen, asked = adaptive_vote([voter.get("extracted") for voter in voters], agree)
        right = chosen >= 0 and bool(voters[chosen]["correct"])
        first_right = bool(voters[0]["correct"])
        correct += right
        ahead += right and not first_right
        behind += first_right and not right
        asked_total += asked
        seconds += sum(voter["seconds"] for voter in voters[:asked])
        tokens += sum(voter.get("drafted_tokens") or voter["tokens"] for voter in voters[:asked])
    items = len(answers)
    first_seconds = sum(voters[0]["seconds"] for voters in answers)
    first_tokens = sum(voters[0].get("drafted_tokens") or voters[0]["tokens"] for voters in answers)
    return {
        "items": items,
        "correct": correct,
        "ci95": list(wilson_interval(correct, items)),
        "first_voter_correct": sum(bool(voters[0]["correct"]) for voters in answers),
        "mean_voters_asked": asked_total / items,
        "seconds_vs_first_voter": seconds / first_seconds if first_seconds else None,
        "tokens_vs_first_voter": tokens / first_tokens if first_tokens else None,
        "vs_first_voter": {"only_this": ahead, "only_first": behind, "p_value": mcnemar_exact_p(ahead, behind)},
    }


def cmd_eval_adaptive(args: argparse.Namespace) -> int:
    answers = load_voters(args.voter)
    report = {"voters": args.voter, "agree": args.agree, **adaptive_report(answers, args.agree)}
    if args.output:
        try:
            Path(args.output).write_text(json.dumps(report, indent=2))
        except OSError as error:
            raise SpecemError(f"{args.output}: cannot write the report ({error.strerror})") from None
    paired = report["vs_first_voter"]
    print_table(
        ("ADAPTIVE VOTE", "FIRST VOTER ALONE", "VS FIRST VOTER", "VOTERS ASKED", "TIME", "TOKENS"),
        [
            (
                f"{report['correct']}/{report['items']}",
                f"{report['first_voter_correct']}/{report['items']}",
                f"+{paired['only_this']} -{paired['only_first']} p={paired['p_value']:.3f}",
                f"{report['mean_voters_asked']:.2f}",
                _ratio(report["seconds_vs_first_voter"]),
                _ratio(report["tokens_vs_first_voter"]),
            )
        ],
    )
    return 0


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"  # None: the first voter took no time (or tokens)


def add_parser(commands: argparse._SubParsersAction) -> None:
    adaptive = commands.add_parser(
        "eval-adaptive", help="an adaptive answer vote over systems already answered by specem eval runs"
    )
    adaptive.add_argument(
        "--voter",
        action="append",
        required=True,
        metavar="RUN_FOLDER:SYSTEM",
        help="a voter, in the order asked (repeat; the first is the baseline)",
    )
    adaptive.add_argument(
        "--agree", type=whole_number(1, 100), default=2, help="stop when this many voters agree (default 2)"
    )
    adaptive.add_argument("--output", help="also write the report to this JSON file")
    adaptive.set_defaults(handler=cmd_eval_adaptive)
