"""Two ``specem eval`` runs of the same items, system by system, as paired counts: the items
both got right, only the first, only the second, neither; the exact McNemar p; and the time
and tokens of the second relative to the first. For a change made to every system at once
(an answer format, a decoding setting), where ``specem eval``'s own report compares systems
within one run.

    python -m specem_research.paired_runs FIRST_RUN SECOND_RUN [--system NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specem_research.stats import mcnemar_exact_p


def answers(folder: Path) -> dict[str, dict[str, Any]]:
    """item id -> that item's systems, from a run's items.jsonl."""
    items = {}
    for line in (folder / "items.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            items[record["id"]] = record["systems"]
    return items


def paired(first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]], system: str) -> dict[str, Any]:
    """The paired comparison of ``system`` over the items both runs answered with it."""
    shared = [i for i in first if i in second and system in first[i] and system in second[i]]
    a = [bool(first[i][system]["correct"]) for i in shared]
    b = [bool(second[i][system]["correct"]) for i in shared]
    only_first = sum(x and not y for x, y in zip(a, b))
    only_second = sum(y and not x for x, y in zip(a, b))

    def total(run: dict[str, dict[str, Any]], key: str) -> float:
        return sum(float(run[i][system].get(key) or 0) for i in shared)

    return {
        "system": system,
        "items": len(shared),
        "first_correct": sum(a),
        "second_correct": sum(b),
        "both": sum(x and y for x, y in zip(a, b)),
        "only_first": only_first,
        "only_second": only_second,
        "neither": sum(not x and not y for x, y in zip(a, b)),
        "p": mcnemar_exact_p(only_first, only_second),
        "seconds_ratio": total(second, "seconds") / total(first, "seconds") if total(first, "seconds") else None,
        "tokens_ratio": total(second, "tokens") / total(first, "tokens") if total(first, "tokens") else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.paired_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--system", action="append", help="only these systems (default: every one both have)")
    args = parser.parse_args(argv)
    first, second = answers(args.first), answers(args.second)
    systems = args.system or sorted(
        {s for item in first.values() for s in item} & {s for v in second.values() for s in v}
    )
    heads = ("ITEMS", "FIRST", "SECOND", "BOTH", "ONLY 1", "ONLY 2", "P", "TIME 2/1")
    print(f"{'SYSTEM':20} " + " ".join(f"{head:>6}" for head in heads))
    for system in systems:
        r = paired(first, second, system)
        ratio = f"{r['seconds_ratio']:.2f}" if r["seconds_ratio"] is not None else "-"
        print(
            f"{system:20} {r['items']:>5} {r['first_correct']:>6} {r['second_correct']:>6} {r['both']:>5} "
            f"{r['only_first']:>6} {r['only_second']:>6} {r['p']:>7.3f} {ratio:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
