"""Multiple-choice tasks for issue 56 (answers chosen from options, scored by every member), written
to research/data/choices/ from the datasets' own files:

    python -m specem_research.choice_data vendor --source DIR --output research/data/choices

DIR holds one folder per task, named as the task's files are in their original distributions
(research/data/README.md, "Choice tasks", says where each was taken from):

    sst2/train.tsv, sst2/dev.tsv                        GLUE SST-2
    boolq/val.jsonl (and boolq/train.jsonl if had)      SuperGLUE BoolQ
    piqa/valid.jsonl, valid-labels.lst (and train.jsonl, train-labels.lst if had)
    arc/ARC-Easy/ARC-Easy-{Train,Dev,Test}.jsonl, arc/ARC-Challenge/ARC-Challenge-{...}.jsonl
    winogrande/dev.jsonl and train_xl.jsonl (or train_l.jsonl: train_xl's first 10,234 lines)
    mmlu/dev/*_dev.csv, mmlu/val/*_val.csv, mmlu/test/*_test.csv

Each task gives two files: <task>_train300.jsonl, 300 items drawn with random.Random(56) from the
train split (MMLU: all of dev, then the rest from val; where the train file is not had, from the
validation items that confirm500 leaves out), and <task>_confirm500.jsonl, 500 drawn with
random.Random(5600) from the validation split (ARC and MMLU: test), all of it when it has 500 or
fewer. An item whose options are not distinct non-empty strings once trimmed is dropped first.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path
from typing import Any

TASKS = ("sst2", "boolq", "piqa", "arc_easy", "winogrande", "arc_challenge", "mmlu")
# (train split, confirm split) by the names their files give them
SPLITS = {
    "sst2": ("train", "dev"),
    "boolq": ("train", "val"),
    "piqa": ("train", "valid"),
    "arc_easy": ("train", "test"),
    "arc_challenge": ("train", "test"),
    "winogrande": ("train", "dev"),
    "mmlu": ("dev", "test"),
}
TRAIN_SIZE, TRAIN_SEED, CONFIRM_SIZE, CONFIRM_SEED = 300, 56, 500, 5600
LETTERS = "ABCDE"
SST2 = "Is the sentiment of this movie review positive or negative?\n\nReview: {}"
BOOLQ = "{}\n\nQuestion: {}?\nAnswer yes or no."
PIQA = "Goal: {}\nWhich solution achieves the goal?"
WINOGRANDE = "Fill in the blank: {}\nWhich option fits the blank (_)?"

Item = dict[str, Any]


def clean(text: str) -> str:
    return text.replace("\r\n", "\n").strip()


def item(task: str, split: str, key: object, question: str, choices: list[str], answer: int, raw: dict) -> Item | None:
    """One line of a choices file, or None when its options are not distinct non-empty strings."""
    choices = [clean(choice) for choice in choices]
    if "" in choices or len(set(choices)) < len(choices):
        return None
    raw = {name: clean(value) for name, value in raw.items()}
    question = clean(question)
    return {
        "id": f"{task}-{split}-{key}",
        "task": task,
        "question": question,
        "choices": choices,
        "answer": LETTERS[answer],
        "raw": raw,
    }


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# -- each task's items, split by split ---------------------------------------------------------
def sst2(folder: Path) -> dict[str, list[Item | None]]:
    splits = {}
    for split in ("train", "dev"):
        with open(folder / f"{split}.tsv", encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]  # header
        splits[split] = [
            item("sst2", split, n, SST2.format(clean(s)), ["positive", "negative"], 1 - int(label), {"sentence": s})
            for n, (s, label) in enumerate(rows)
        ]
    return splits


def boolq(folder: Path) -> dict[str, list[Item | None]]:
    splits = {}
    for split in ("train", "val"):
        if (folder / f"{split}.jsonl").exists():
            splits[split] = [
                item(
                    "boolq",
                    split,
                    r["idx"],
                    BOOLQ.format(clean(r["passage"]), clean(r["question"])),
                    ["yes", "no"],
                    0 if r["label"] in (True, "true") else 1,
                    {"passage": r["passage"], "question": r["question"]},
                )
                for r in jsonl(folder / f"{split}.jsonl")
            ]
    return splits


def piqa(folder: Path) -> dict[str, list[Item | None]]:
    splits = {}
    for split in ("train", "valid"):
        if (folder / f"{split}.jsonl").exists():
            labels = (folder / f"{split}-labels.lst").read_text().split()
            rows = jsonl(folder / f"{split}.jsonl")
            assert len(rows) == len(labels), f"piqa {split}: {len(rows)} items, {len(labels)} labels"
            splits[split] = [
                item(
                    "piqa",
                    split,
                    n,
                    PIQA.format(clean(r["goal"])),
                    [r["sol1"], r["sol2"]],
                    int(label),
                    {"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"]},
                )
                for n, (r, label) in enumerate(zip(rows, labels))
            ]
    return splits


def arc(folder: Path, task: str) -> dict[str, list[Item | None]]:
    name = "ARC-Easy" if task == "arc_easy" else "ARC-Challenge"
    splits = {}
    for split in ("train", "dev", "test"):
        rows = jsonl(folder / name / f"{name}-{split.capitalize()}.jsonl")
        splits[split] = []
        for r in rows:
            options = r["question"]["choices"]
            answer = [option["label"] for option in options].index(r["answerKey"])
            stem = r["question"]["stem"]
            splits[split].append(
                item(task, split, r["id"], stem, [o["text"] for o in options], answer, {"question": stem})
            )
    return splits


def winogrande(folder: Path) -> dict[str, list[Item | None]]:
    train = folder / "train_xl.jsonl" if (folder / "train_xl.jsonl").exists() else folder / "train_l.jsonl"
    splits = {}
    for split, path in (("train", train), ("dev", folder / "dev.jsonl")):
        splits[split] = [
            item(
                "winogrande",
                split,
                r["qID"],
                WINOGRANDE.format(clean(r["sentence"])),
                [r["option1"], r["option2"]],
                int(r["answer"]) - 1,
                {"sentence": r["sentence"], "option1": r["option1"], "option2": r["option2"]},
            )
            for r in jsonl(path)
        ]
    return splits


def mmlu(folder: Path) -> dict[str, list[Item | None]]:
    splits: dict[str, list[Item | None]] = {}
    for split in ("dev", "val", "test"):
        splits[split] = []
        for path in sorted((folder / split).glob(f"*_{split}.csv")):
            subject = path.name.removesuffix(f"_{split}.csv")
            with open(path, encoding="utf-8", newline="") as handle:
                for n, (question, *options, answer) in enumerate(csv.reader(handle)):
                    raw = {"question": question, "subject": subject}
                    splits[split].append(
                        item("mmlu", split, f"{subject}-{n}", question, options, LETTERS.index(answer), raw)
                    )
    return splits


def read(source: Path, task: str) -> dict[str, list[Item | None]]:
    if task.startswith("arc_"):
        return arc(source / "arc", task)
    return {"sst2": sst2, "boolq": boolq, "piqa": piqa, "winogrande": winogrande, "mmlu": mmlu}[task](source / task)


# -- the two files -------------------------------------------------------------------------------
def draw(items: list[Item], size: int, seed: int) -> list[Item]:
    return items if len(items) <= size else random.Random(seed).sample(items, size)


def pools(task: str, splits: dict[str, list[Item]]) -> tuple[list[Item], list[Item]]:
    """(train300, confirm500) of one task, as the module's docstring says."""
    train_split, confirm_split = SPLITS[task]
    confirm = draw(splits[confirm_split], CONFIRM_SIZE, CONFIRM_SEED)
    if task == "mmlu":
        train = splits["dev"] + random.Random(TRAIN_SEED).sample(splits["val"], TRAIN_SIZE - len(splits["dev"]))
    elif train_split in splits:
        train = draw(splits[train_split], TRAIN_SIZE, TRAIN_SEED)
    else:  # the train file is not had: the validation items confirm500 leaves out
        chosen = {it["id"] for it in confirm}
        train = draw([it for it in splits[confirm_split] if it["id"] not in chosen], TRAIN_SIZE, TRAIN_SEED)
    return train, confirm


def vendor(source: Path, output: Path, tasks: tuple[str, ...] = TASKS) -> None:
    output.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        splits = read(source, task)
        kept = {split: [it for it in items if it is not None] for split, items in splits.items()}
        dropped = {split: len(splits[split]) - len(kept[split]) for split in splits}
        train, confirm = pools(task, kept)
        for name, items in (("train300", train), ("confirm500", confirm)):
            lines = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items)
            (output / f"{task}_{name}.jsonl").write_text(lines, "utf-8")
        sizes = ", ".join(f"{split} {len(items)} (dropped {dropped[split]})" for split, items in kept.items())
        print(f"{task}: {sizes}; train300 from {train[0]['id'].split('-')[1]}, {len(confirm)} confirm")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m specem_research.choice_data", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    vendor_parser = actions.add_parser("vendor", help="write <task>_train300.jsonl and <task>_confirm500.jsonl")
    vendor_parser.add_argument("--source", type=Path, required=True, help="a folder of the datasets' own files")
    vendor_parser.add_argument("--output", type=Path, default=Path(__file__).parent / "data" / "choices")
    vendor_parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    args = parser.parse_args()
    vendor(args.source, args.output, tuple(args.tasks))


if __name__ == "__main__":
    main()
