"""How few labelled items a task's weights need, and the learning batch
(research/option_learning.py), on records made up so that one source knows one task and another
knows the other: weights from the other task's items follow the wrong source."""

from __future__ import annotations

import json

import numpy as np

from specem_research import option_learning as learn
from specem_research import option_report as rep

FIRST, SECOND = "scored:first", "asked:second"


def records(task: str, n: int, seed: int) -> list[dict]:
    """Items of ``task`` that ``FIRST`` knows when the task is ``sst2``, and ``SECOND`` otherwise;
    the other source guesses."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(n):
        answer = int(rng.integers(0, 2))
        knows = [np.log(0.8), np.log(0.2)][:: 1 if answer == 0 else -1]
        if rng.random() < 0.1:
            knows = knows[::-1]
        guesses = list(np.log(rng.dirichlet([1, 1])))
        scores = {FIRST: knows, SECOND: guesses} if task == "sst2" else {FIRST: guesses, SECOND: knows}
        made.append({"id": f"{task}-{i}", "task": task, "answer": answer, "choices": ["x", "y"], "scores": scores})
    return made


def test_the_learning_batch_uses_only_the_items_before_each_and_the_start_before_the_minimum():
    stream = records("sst2", 40, 0)

    def wrong_always(record):  # a start that is always wrong
        return 1 - record["answer"]

    marks = learn.online(stream, wrong_always, 10)
    assert marks[:10] == [False] * 10
    for index in (10, 25, 39):  # each later answer is the fit's on the items before it, no more
        assert marks[index] == (learn.product_fit(stream[:index])(stream[index]) == stream[index]["answer"])
    assert np.mean(marks[10:]) > 0.75
    assert learn.online(stream, wrong_always, 41) == [False] * 40


def test_the_choices_start_comes_from_the_other_tasks_of_the_pool_only():
    train = {"sst2": records("sst2", 150, 1), "boolq": records("boolq", 150, 2), "mmlu": records("sst2", 150, 3)}
    start = learn.choices_pick(train, "sst2")  # fitted on boolq's, where SECOND knows: wrong for sst2
    assert np.mean(rep.right(train["sst2"], start)) < 0.65
    alone = learn.choices_pick({"sst2": train["sst2"], "boolq": train["boolq"]}, "sst2")
    assert rep.right(train["sst2"], start) == rep.right(train["sst2"], alone)  # mmlu is not in the pool


def test_the_curve_and_the_chosen_minimum_are_reported_on_held_and_confirm_items(tmp_path):
    train = {"sst2": records("sst2", 300, 4), "boolq": records("boolq", 300, 5)}
    confirm = {"sst2": records("sst2", 200, 6), "boolq": records("boolq", 200, 7)}
    found = learn.curve(train, confirm, sizes=(5, 100))
    held = found["held_train"]["sst2"]
    assert found["held_train"]["pooled"]["items"] == 400 and found["confirm"]["pooled"]["items"] == 400
    assert held["100"] > 0.8 and held["0"] < 0.65 and held["0_vs_100"]["behind"] > held["0_vs_100"]["ahead"]
    assert held["100"] == np.mean(rep.right(train["sst2"][100:], learn.product_fit(train["sst2"][:100])))
    learned = learn.learning(train, confirm, minimums=(1, 50))
    pooled = learned["train"]["pooled"]
    assert learned["minimum"] == (1 if pooled["online-1"] >= pooled["online-50"] else 50)
    confirmed = learned["confirm"]["sst2"]
    start = learn.choices_pick(train, "sst2")
    assert confirmed["online"] == np.mean(learn.online(confirm["sst2"], start, learned["minimum"]))
    assert confirmed["online_vs_choices"]["ahead"] > confirmed["online_vs_choices"]["behind"]
    small = {"train": {t: r[:110] for t, r in train.items()}, "confirm": {t: r[:30] for t, r in confirm.items()}}
    for name, tasks in small.items():
        (tmp_path / name).mkdir()
        lines = [json.dumps(r) for records_of in tasks.values() for r in records_of]
        (tmp_path / name / "items.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "learning.json"
    folders = ["--train", str(tmp_path / "train"), "--confirm", str(tmp_path / "confirm")]
    assert learn.main([*folders, "--output", str(out)]) == 0
    written = json.loads(out.read_text())
    assert set(written) == {"curve", "learning"} and written["learning"]["minimum"] in learn.MINIMUMS
