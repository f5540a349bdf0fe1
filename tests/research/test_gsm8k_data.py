"""Drawing more GSM8K train items: the same form as dev120's, none of an excluded file's."""

import json
from pathlib import Path

import pytest

from specem_research.gsm8k_data import draw, item

DATA = Path(__file__).resolve().parents[2] / "research" / "data"


def train_file(tmp_path: Path, count: int) -> Path:
    rows = [{"question": f"Q{i}?", "answer": f"Work.\n#### {i},00{i}"} for i in range(count)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_an_item_is_the_number_after_the_marks_without_commas():
    line = json.dumps({"question": "How many?", "answer": "3 + 4 = 7 #### no\n#### 1,234"})
    assert item(17, line) == {"id": "train-17", "question": "How many?", "answer": "1234"}


def test_dev120_items_have_the_form_drawn_items_get():
    row = json.loads((DATA / "gsm8k_train_dev120.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert set(row) == {"id", "question", "answer"} and row["id"].startswith("train-")


def test_excluded_ids_are_never_drawn_and_the_draw_is_seeded(tmp_path):
    train = train_file(tmp_path, 10)
    excluded = tmp_path / "dev.jsonl"
    excluded.write_text("".join(json.dumps({"id": f"train-{i}"}) + "\n" for i in (0, 2, 4, 6)), encoding="utf-8")
    drawn = draw(train, [excluded], 6, seed=1)
    assert sorted(row["id"] for row in drawn) == [f"train-{i}" for i in (1, 3, 5, 7, 8, 9)]
    assert drawn == draw(train, [excluded], 6, seed=1)
    assert [row["id"] for row in drawn] != [row["id"] for row in draw(train, [excluded], 6, seed=2)]
    index = drawn[0]["id"].split("-")[1]
    assert drawn[0]["answer"] == f"{index}00{index}"


def test_asking_for_more_than_are_left_is_refused(tmp_path):
    train = train_file(tmp_path, 3)
    with pytest.raises(SystemExit, match="only 3 train items"):
        draw(train, [], 4, seed=0)
