"""More GSM8K train items, disjoint from those already drawn (issue 55: a calibrator fitted on more
than the 120 dev answers), from OpenAI's own file:

    python -m specem_research.gsm8k_data draw --train grade_school_math/data/train.jsonl \
        --exclude research/data/gsm8k_train_dev120.jsonl research/data/gsm8k_train_confirm500.jsonl \
        --count 400 --seed 55 --output research/data/gsm8k_train_fit400.jsonl

Each item is written as dev120's and confirm500's are: {"id": "train-N", "question", "answer"},
N the line index in train.jsonl, the answer the number after "####" without its thousands commas.
The items are drawn with random.Random(seed) from the lines no excluded file names, in file order.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def item(index: int, line: str) -> dict[str, str]:
    """One train.jsonl line as an eval item: the final number after "####", commas dropped."""
    row = json.loads(line)
    answer = row["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
    return {"id": f"train-{index}", "question": row["question"], "answer": answer}


def ids_in(path: Path) -> set[str]:
    return {json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


def draw(train: Path, exclude: list[Path], count: int, seed: int) -> list[dict[str, str]]:
    """`count` items drawn at random from the train lines that no excluded file holds."""
    taken = set().union(*(ids_in(path) for path in exclude)) if exclude else set()
    lines = train.read_text(encoding="utf-8").splitlines()
    free = [index for index in range(len(lines)) if f"train-{index}" not in taken]
    if count > len(free):
        raise SystemExit(f"asked for {count} items but only {len(free)} train items are not excluded")
    return [item(index, lines[index]) for index in random.Random(seed).sample(free, count)]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m specem_research.gsm8k_data", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    draw_parser = actions.add_parser("draw", help="write COUNT train items no excluded file holds")
    draw_parser.add_argument("--train", type=Path, required=True, help="grade_school_math/data/train.jsonl")
    draw_parser.add_argument("--exclude", type=Path, nargs="*", default=[], help="item files whose ids are left out")
    draw_parser.add_argument("--count", type=int, required=True)
    draw_parser.add_argument("--seed", type=int, required=True)
    draw_parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    items = draw(args.train, args.exclude, args.count, args.seed)
    args.output.write_text("".join(json.dumps(row) + "\n" for row in items), encoding="utf-8")
    print(f"wrote {len(items)} items to {args.output}")


if __name__ == "__main__":
    main()
