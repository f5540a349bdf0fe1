"""Two ``specem eval`` runs of the same items, system by system, as paired counts: the items
both got right, only the first, only the second, neither; the exact McNemar p; and the time
and tokens of the second relative to the first. For a change made to every system at once
(an answer format, a decoding setting), where ``specem eval``'s own report compares systems
within one run. Given one run, it compares the ensemble with each member alone in that run
(first: the member, second: the ensemble), and counts the items some member got right: the
most that choosing one member's whole answer per item could reach.

    python -m specem_research.paired_runs FIRST_RUN [SECOND_RUN] [--system NAME ...]
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


def paired(
    first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]], system: str, second_system: str | None = None
) -> dict[str, Any]:
    """The paired comparison of ``system`` in ``first`` with ``second_system`` (default: the same
    system) in ``second``, over the items both answered."""
    other = second_system or system
    shared = [i for i in first if i in second and system in first[i] and other in second[i]]
    a = [bool(first[i][system]["correct"]) for i in shared]
    b = [bool(second[i][other]["correct"]) for i in shared]
    only_first = sum(x and not y for x, y in zip(a, b))
    only_second = sum(y and not x for x, y in zip(a, b))

    def total(run: dict[str, dict[str, Any]], key: str, name: str) -> float:
        return sum(float(run[i][name].get(key) or 0) for i in shared)

    def ratio(key: str) -> float | None:
        below = total(first, key, system)
        return total(second, key, other) / below if below else None

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
        "seconds_ratio": ratio("seconds"),
        "tokens_ratio": ratio("tokens"),
    }


def some_member_right(run: dict[str, dict[str, Any]], ensemble: str = "ensemble") -> int:
    """Items at least one member alone got right (every system of the run but ``ensemble``)."""
    return sum(any(r["correct"] for name, r in item.items() if name != ensemble) for item in run.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.paired_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path, nargs="?", help="default: the ensemble against each member in FIRST")
    parser.add_argument("--system", action="append", help="only these systems (default: every one both have)")
    args = parser.parse_args(argv)
    first = answers(args.first)
    second = first if args.second is None else answers(args.second)
    systems = args.system or sorted(
        {s for item in first.values() for s in item} & {s for v in second.values() for s in v}
    )
    if args.second is None:
        systems = [s for s in systems if s != "ensemble"]
        print(f"first: each member alone; second: the ensemble; some member right: {some_member_right(first)}")
    heads = ("ITEMS", "FIRST", "SECOND", "BOTH", "ONLY 1", "ONLY 2", "P", "TIME 2/1")
    print(f"{'SYSTEM':20} " + " ".join(f"{head:>6}" for head in heads))
    for system in systems:
        r = paired(first, second, system, "ensemble" if args.second is None else None)
        ratio = f"{r['seconds_ratio']:.2f}" if r["seconds_ratio"] is not None else "-"
        print(
            f"{system:20} {r['items']:>5} {r['first_correct']:>6} {r['second_correct']:>6} {r['both']:>5} "
            f"{r['only_first']:>6} {r['only_second']:>6} {r['p']:>7.3f} {ratio:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
