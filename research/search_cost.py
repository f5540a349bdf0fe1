"""How long a history search takes against the size of the message it finds (issue 36): one
message of each size in a fresh history, a common two-word search (every hit of it is in the
message) and a rare word at its end, the median of a few runs each.

    python -m specem_research.search_cost [--sizes 0.1 0.25 0.5 1 2] [--repeats 3] [--output search.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from specem_local.storage import Chat, History, Turn

WORDS = ["apple", "river", "stone", "cloud", "amber", "delta", "maple", "ocean"]


def message(megabytes: float, seed: int = 0) -> str:
    """Words at random, ``megabytes`` long, ending with a word found nowhere else."""
    rng = random.Random(seed)
    words = int(megabytes * 1_000_000 / 6)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + " needle"


def timed(history: History, query: str, repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        assert history.search(query), query
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m specem_research.search_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.1, 0.25, 0.5, 1.0, 2.0], help="MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", help="also write the rows as JSON")
    args = parser.parse_args()
    rows = []
    print(f"{'MB':>5}  {'common words':>12}  {'rare word':>9}")
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as folder:
            history = History(Path(folder) / "specem.db", chat_files=Path(folder) / "none")
            history.add(Chat(title="long"), Turn("user", message(size)))
            row = {"mb": size, "common_s": timed(history, "apple river", args.repeats)}
            row["rare_s"] = timed(history, "needle", args.repeats)
        rows.append(row)
        print(f"{size:5.2f}  {row['common_s']:11.3f}s  {row['rare_s']:8.3f}s")
    if args.output:
        Path(args.output).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
