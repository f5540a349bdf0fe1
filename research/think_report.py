"""Think first, then the format (issue 46): ``specem eval`` runs of the same GSM8K items answered
plain, as JSON from the first token, and thinking first, compared system by system. For each
JSON run: accuracy read from the JSON's ``answer`` field, every ended answer validated with
``jsonschema``, paired counts and the exact McNemar p against plain, the paired difference with
its one-sided 95% lower bound (the goal: above -5 points), how often the JSON's answer is not the
number the reasoning reached last, on how many items the reasoning parted from the same system's
plain answer (not the same text, nor a start of it: a budget cuts the reasoning short), why the
reasoning ended (end of generation or the budget), and the time against plain. A JSON answer is
right only when it is whole: cut (by ``max_tokens`` or the context) or not JSON, it is wrong.
With ``--plain-json`` the baseline is a run answered as JSON too (from the first token), graded
the same way.

    python -m specem_research.think_report --plain RUN --schema research/data/gsm8k_answer_schema.json \\
        JSON_RUN [JSON_RUN ...] [--output REPORT.json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import jsonschema

from specem_local.labelled import ENDED, extract_number
from specem_research.paired_runs import answers
from specem_research.stats import mcnemar_exact_p

Z_ONE_SIDED_95 = 1.6449


def json_answer(text: str) -> tuple[bool, float | None, Any]:
    """(parses, the ``answer`` field as a number, the value)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False, None, None
    answer = value.get("answer") if isinstance(value, dict) else None
    number = float(answer) if isinstance(answer, (int, float)) and not isinstance(answer, bool) else None
    return True, number, value


def json_right(record: dict[str, Any], expected: float | None) -> bool:
    """A JSON answer's ``answer`` field is the expected number, and the answer is whole."""
    return record.get("finish_reason") in ENDED and close(json_answer(record["text"])[1], expected)


def parted(reasoning: str, plain: str) -> bool:
    """The reasoning is not the plain answer's text, nor a start of it (nor it a start of the
    reasoning): the two wrote different tokens somewhere."""
    return not (plain.startswith(reasoning) or reasoning.startswith(plain))


def close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def lower_bound(only_new: int, only_plain: int, items: int) -> tuple[float, float]:
    """The paired difference in accuracy (new minus plain) and its one-sided 95% lower bound
    (Wald, for paired proportions: SE = sqrt(b + c - (b - c)^2 / n) / n). Fixed before the
    confirm run."""
    difference = (only_new - only_plain) / items
    spread = only_new + only_plain - (only_new - only_plain) ** 2 / items
    return difference, difference - Z_ONE_SIDED_95 * math.sqrt(max(spread, 0.0)) / items


def expected_answers(folder: Path) -> dict[str, float | None]:
    """item id -> its expected number."""
    records = [json.loads(line) for line in (folder / "items.jsonl").read_text().splitlines() if line.strip()]
    return {r["id"]: extract_number(str(r.get("expected", ""))) for r in records}


def compare(
    plain: dict[str, Any],
    run: dict[str, Any],
    system: str,
    schema: dict[str, Any],
    expected: dict[str, float | None],
    plain_json: bool = False,
) -> dict[str, Any]:
    """``system`` in ``run`` (a JSON run) against the same system in ``plain``, on the items
    both answered. ``plain_json``: the baseline answered as JSON too, graded as ``run`` is (its
    reasoning is then not compared)."""
    shared = [i for i in run if system in run[i] and i in plain and system in plain[i]]
    if plain_json:
        right_plain = {i: json_right(plain[i][system], expected.get(i)) for i in shared}
    else:
        right_plain = {i: bool(plain[i][system]["correct"]) for i in shared}
    right, valid, ended, disagree, parts, thought = {}, 0, 0, 0, 0, 0
    switched: dict[str | None, int] = {"eos": 0, "budget": 0, None: 0}
    for item in shared:
        record = run[item][system]
        parses, number, value = json_answer(record["text"])
        right[item] = json_right(record, expected.get(item))
        if record.get("finish_reason") == "eos":
            ended += 1
            valid += parses and jsonschema.Draft202012Validator(schema).is_valid(value)
        reasoning = record.get("reasoning") or ""
        if reasoning:
            thought += 1
            disagree += not close(extract_number(reasoning), number)
            parts += not plain_json and parted(reasoning, plain[item][system]["text"])
        switched[record.get("switched")] = switched.get(record.get("switched"), 0) + 1
    only_new = sum(right[i] and not right_plain[i] for i in shared)
    only_plain = sum(right_plain[i] and not right[i] for i in shared)
    difference, bound = lower_bound(only_new, only_plain, len(shared))
    seconds = sum(run[i][system]["seconds"] for i in shared)
    plain_seconds = sum(plain[i][system]["seconds"] for i in shared)
    return {
        "items": len(shared),
        "correct": sum(right.values()),
        "plain_correct": sum(right_plain.values()),
        "only_this": only_new,
        "only_plain": only_plain,
        "p_value": round(mcnemar_exact_p(only_new, only_plain), 6),
        "difference_points": round(100 * difference, 1),
        "lower_bound_points": round(100 * bound, 1),
        "ended": ended,
        "valid_of_ended": valid,
        "json_disagrees_with_reasoning": disagree,
        "reasoning_parted_from_plain": None if plain_json or not thought else parts,
        "switched": {str(k): v for k, v in switched.items() if v},
        "time_vs_plain": round(seconds / plain_seconds, 2) if plain_seconds else None,
    }


def main() -> None:
    about = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m specem_research.think_report", description=about)
    parser.add_argument("runs", nargs="+", help="specem eval output folders of JSON answers")
    parser.add_argument("--plain", required=True, help="the plain run of the same items")
    parser.add_argument("--plain-json", action="store_true", help="--plain answered as JSON too (from the first token)")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--output")
    args = parser.parse_args()
    schema = json.loads(Path(args.schema).read_text())
    plain = answers(Path(args.plain))
    report = {}
    for folder in args.runs:
        run, expected = answers(Path(folder)), expected_answers(Path(folder))
        systems = sorted({name for item in run.values() for name in item})
        for system in systems:
            entry = compare(plain, run, system, schema, expected, args.plain_json)
            report[f"{Path(folder).name}/{system}"] = entry
            print(f"{Path(folder).name} {system}: {json.dumps(entry)}")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
