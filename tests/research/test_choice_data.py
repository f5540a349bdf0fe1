"""The choice tasks of issue 56 as shipped in research/data/choices/ (written by
research/choice_data.py): every line is a well-formed item, the files have their sizes, a task's
train300 and confirm500 share no item, and one item per task, read by hand from its source file,
is there exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specem_research.choice_data import TASKS

CHOICES = Path(__file__).resolve().parents[2] / "research" / "data" / "choices"
FILES = [(task, name) for task in TASKS for name in ("train300", "confirm500")]
SST2 = "Is the sentiment of this movie review positive or negative?\n\nReview: {}"

# One item per task, as its source line reads (research/data/README.md, "Choice tasks", names the files).
KNOWN = {
    # SST-2 dev.tsv, data row 203: "bad . \t0"
    "sst2": ("confirm500", "sst2-dev-203", SST2.format("bad ."), ["positive", "negative"], "B"),
    # SuperGLUE BoolQ val.jsonl, idx 637, label "true"
    "boolq": (
        "train300",
        "boolq-val-637",
        "Rhombus -- Every rhombus is a parallelogram and a kite. A rhombus with right angles is a square."
        "\n\nQuestion: do all rhombuses have 2 pairs of parallel sides?\nAnswer yes or no.",
        ["yes", "no"],
        "A",
    ),
    # PIQA valid.jsonl line 1111 (sols with a trailing space), valid-labels.lst: 0
    "piqa": (
        "confirm500",
        "piqa-valid-1111",
        "Goal: water\nWhich solution achieves the goal?",
        ["can drown a man", "can drown a fish"],
        "A",
    ),
    # ARC-Easy-Train.jsonl, labels "1".."4", answerKey "4"
    "arc_easy": (
        "train300",
        "arc_easy-train-NYSEDREGENTS_2011_8_42",
        "Sound will not travel in a",
        ["solid", "liquid", "gas", "vacuum"],
        "D",
    ),
    # WinoGrande dev.jsonl, answer "1"
    "winogrande": (
        "confirm500",
        "winogrande-dev-30ZKOOGW2W42P7M17FCFLI30WP2A1W-1",
        "Fill in the blank: Jennifer has more money than Amy, so _ became a homeowner at a young age."
        "\nWhich option fits the blank (_)?",
        ["Jennifer", "Amy"],
        "A",
    ),
    # ARC-Challenge-Test.jsonl, answerKey "B"
    "arc_challenge": (
        "confirm500",
        "arc_challenge-test-Mercury_SC_416168",
        "What best describes skin?",
        ["stiff", "flexible", "brittle", "hard"],
        "B",
    ),
    # MMLU dev/abstract_algebra_dev.csv, row 4
    "mmlu": (
        "train300",
        "mmlu-dev-abstract_algebra-4",
        "Find the characteristic of the ring 2Z.",
        ["0", "3", "12", "30"],
        "A",
    ),
}


def items(task: str, name: str) -> list[dict]:
    return [json.loads(line) for line in (CHOICES / f"{task}_{name}.jsonl").read_text("utf-8").splitlines()]


@pytest.mark.parametrize(("task", "name"), FILES, ids=[f"{t}_{n}" for t, n in FILES])
def test_every_line_is_an_item(task, name):
    lines = items(task, name)
    assert len(lines) == (300 if name == "train300" else 500)
    assert len({line["id"] for line in lines}) == len(lines)
    for line in lines:
        assert set(line) == {"id", "task", "question", "choices", "answer", "raw"}
        assert line["task"] == task and line["id"].startswith(f"{task}-")
        assert isinstance(line["question"], str) and line["question"] == line["question"].strip() != ""
        choices = line["choices"]
        assert len(choices) >= 2 and all(isinstance(c, str) and c == c.strip() != "" for c in choices)
        assert len(set(choices)) == len(choices)
        assert line["answer"] in "ABCDE"[: len(choices)]
        assert isinstance(line["raw"], dict) and line["raw"]


@pytest.mark.parametrize("task", TASKS)
def test_train_and_confirm_share_no_item(task):
    train = {line["id"] for line in items(task, "train300")}
    confirm = {line["id"] for line in items(task, "confirm500")}
    assert train.isdisjoint(confirm)
    asked = {(line["question"], *line["choices"]) for line in items(task, "train300")}
    assert asked.isdisjoint((line["question"], *line["choices"]) for line in items(task, "confirm500"))


@pytest.mark.parametrize("task", TASKS)
def test_a_known_item(task):
    name, item_id, question, choices, answer = KNOWN[task]
    [line] = [line for line in items(task, name) if line["id"] == item_id]
    assert (line["question"], line["choices"], line["answer"]) == (question, choices, answer)
