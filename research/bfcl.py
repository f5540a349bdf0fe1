"""Tool calls graded as the Berkeley Function-Calling Leaderboard grades them (issue 38).

``python -m specem_research.bfcl convert GORILLA_CHECKOUT`` turns BFCL's own ``simple_python``
and ``multiple`` items (``berkeley-function-call-leaderboard/bfcl_eval/data``, Apache-2.0) into
``specem eval`` tool-call items in research/data/ (simple_python split in two halves: settings
are chosen on the first, confirmed on the second and on ``multiple``). ``calls_correct`` is
BFCL's AST rule for Python, written here from its checker's behaviour: the function's name,
every required argument present and none unknown, each value among the possible answers
(strings compared without case, spaces or ``,./-_*^``; an integer accepted for a float; lists
and dicts element by element), and an optional argument left out only where an empty answer
is allowed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from specem_local.labelled import tool_name

DATA = Path(__file__).parent / "data"
SOURCE = "berkeley-function-call-leaderboard/bfcl_eval/data"
SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


# -- items ---------------------------------------------------------------------------------------
def json_schema(spec: Any) -> Any:
    """A BFCL parameter description as JSON Schema: ``dict`` is an object, ``float`` a number,
    ``tuple`` an array, ``any`` no type."""
    if isinstance(spec, list):
        return [json_schema(item) for item in spec]
    if not isinstance(spec, dict):
        return spec
    out = {key: json_schema(value) for key, value in spec.items() if key not in ("type", "properties")}
    if isinstance(spec.get("type"), str):
        kind = SCHEMA_TYPES.get(spec["type"], spec["type"])
        if kind is not None:
            out["type"] = kind
    if isinstance(spec.get("properties"), dict):  # names, each with its schema (a name may be "type")
        out["properties"] = {name: json_schema(value) for name, value in spec["properties"].items()}
    return out


def item(question: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """One BFCL item as a ``specem eval`` tool-call item (BFCL's own functions kept for grading)."""
    functions = question["function"]
    return {
        "id": question["id"],
        "messages": question["question"][0],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": tool_name(f["name"]),
                    "description": f.get("description", ""),
                    "parameters": json_schema(f["parameters"]),
                },
            }
            for f in functions
        ],
        "functions": functions,
        "answer": truth["ground_truth"],
    }


def convert(checkout: Path) -> None:
    def read(path: str) -> list[dict[str, Any]]:
        text = subprocess.run(
            ["git", "-C", str(checkout), "show", f"HEAD:{SOURCE}/{path}"], capture_output=True, text=True, check=True
        ).stdout
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    for name, parts in (("simple_python", ("dev", "confirm")), ("multiple", ("",))):
        questions, truths = read(f"BFCL_v4_{name}.json"), read(f"possible_answer/BFCL_v4_{name}.json")
        answers = {truth["id"]: truth for truth in truths}
        items = [item(question, answers[question["id"]]) for question in questions]
        half = (len(items) + 1) // 2
        for part, chosen in zip(parts, (items[:half], items[half:]) if len(parts) == 2 else (items,)):
            path = DATA / f"bfcl_{name}{'_' + part if part else ''}.jsonl"
            path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in chosen))
            print(f"{path}: {len(chosen)} items")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m specem_research.bfcl", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    convert_parser = actions.add_parser("convert", help="write research/data/bfcl_*.jsonl from a gorilla checkout")
    convert_parser.add_argument("checkout", type=Path, help="a git checkout (or mirror) of ShishirPatil/gorilla")
    args = parser.parse_args()
    convert(args.checkout)


if __name__ == "__main__":
    main()
