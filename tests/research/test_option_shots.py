"""The few-shot way tried for issue 56 (``option_shots``): which labelled examples an item is shown,
how its prompt is written, and how its sources join an ``option_eval run``'s records."""

from __future__ import annotations

import json

from specem_research import option_shots
from tests.engine.conftest import fake_ensemble, fake_member


def _item(number: int, answer: int, choices: tuple[str, ...] = ("yes", "no")) -> dict:
    return {"id": f"t-{number}", "task": "t", "question": f"Q{number}?", "choices": list(choices), "answer": answer}


def test_the_examples_take_each_answer_in_turn_in_order_and_never_the_item_itself():
    labelled = [_item(1, 0), _item(2, 0), _item(3, 0), _item(4, 1), _item(5, 1)]
    assert [e["id"] for e in option_shots.examples_for(labelled, 4, "t-9")] == ["t-1", "t-4", "t-2", "t-5"]
    assert [e["id"] for e in option_shots.examples_for(labelled, 4, "t-1")] == ["t-2", "t-4", "t-3", "t-5"]
    assert [e["id"] for e in option_shots.examples_for(labelled, 3, "t-4")] == ["t-1", "t-5", "t-2"]


def test_fewer_examples_when_the_labelled_items_run_out():
    labelled = [_item(1, 1), _item(2, 1)]
    assert [e["id"] for e in option_shots.examples_for(labelled, 4, "t-9")] == ["t-1", "t-2"]
    assert option_shots.examples_for([], 4, "t-9") == []


def test_the_prompt_shows_each_example_answered_then_asks_the_question():
    examples = [_item(1, 1), _item(2, 0, ("red", "blue green"))]
    prompt = option_shots.shots_prompt(examples, _item(3, 0))
    assert prompt == "Q1?\nAnswer: no\n\nQ2?\nAnswer: red\n\nQ3?\nAnswer:"
    assert option_shots.words_of(_item(2, 1, ("red", "blue green"))) == (" red", " blue green")


def test_the_labelled_items_are_the_first_of_the_tasks_train_file_beside_it(tmp_path):
    lines = [{"id": f"x-{n}", "task": "arc_easy", "question": "?", "choices": ["a", "b"], "answer": "AB"[n % 2]}
             for n in range(5)]  # fmt: skip
    (tmp_path / "arc_easy_train300.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    found = option_shots.labelled_items(str(tmp_path / "arc_easy_confirm500.jsonl"), 3)
    assert [(x["id"], x["answer"]) for x in found] == [("x-0", 0), ("x-1", 1), ("x-2", 0)]


def test_merge_adds_the_shots_sources_and_leaves_out_records_without_them(tmp_path):
    run, shots = tmp_path / "run", tmp_path / "shots"
    run.mkdir()
    shots.mkdir()
    records = [{"id": "a", "scores": {"asked:m": [0.0, -1.0]}}, {"id": "b", "scores": {"asked:m": [-2.0, 0.0]}}]
    (run / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (shots / "items.jsonl").write_text(json.dumps({"id": "b", "task": "t", "scores": {"shots:m": [-3.0, -0.5]}}) + "\n")
    assert option_shots.main(["merge", str(run), str(shots), "--output", str(tmp_path / "merged")]) == 0
    merged = [json.loads(line) for line in (tmp_path / "merged" / "items.jsonl").read_text().splitlines()]
    assert merged == [{"id": "b", "scores": {"asked:m": [-2.0, 0.0], "shots:m": [-3.0, -0.5]}}]
    for left_out, scores in ((["x"], merged[0]["scores"]), (["m", "x"], {})):  # a member's sources, every way
        dropped = tmp_path / f"dropped-{len(left_out)}"
        assert (
            option_shots.main(["merge", str(run), str(shots), "--output", str(dropped), "--leave-out", *left_out]) == 0
        )
        assert [json.loads(line) for line in (dropped / "items.jsonl").read_text().splitlines()] == [
            {"id": "b", "scores": scores}
        ]


def test_every_member_scores_every_option_after_the_examples(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    with fake_ensemble(fake_member("a", "yes"), fake_member("b", "no")) as ensemble:
        record = option_shots.scored_after(ensemble, [_item(1, 1)], _item(2, 0))
    assert record["id"] == "t-2" and record["task"] == "t"
    assert sorted(record["scores"]) == ["shots:a", "shots:b"]
    assert all(len(s) == 2 and all(v <= 0 for v in s) for s in record["scores"].values())
    assert record["scores"]["shots:a"] != record["scores"]["shots:b"]
