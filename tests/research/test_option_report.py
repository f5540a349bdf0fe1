"""The choice systems computed from recorded scores (research/option_report.py), on records made
up so each system's answer is known: a source that knows the task, one that always says "A",
one that guesses."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from specem_local.engine import options as opt
from specem_research import log_pool
from specem_research import option_report as rep

KNOWS, LEANS, GUESSES = "scored:gemma", "asked:qwen2.5-coder-0.5b", "asked:smol"


def records(task: str, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    made = []
    for i in range(n):
        answer = int(rng.integers(0, 2))
        knows = [np.log(0.8), np.log(0.2)] if answer == 0 else [np.log(0.2), np.log(0.8)]
        if rng.random() < 0.15:  # it is wrong sometimes
            knows = knows[::-1]
        made.append({"id": f"{task}-{i}", "task": task, "answer": answer, "options": 2, "choices": ["x", "y"],
                     "scores": {KNOWS: knows, LEANS: [np.log(0.9), np.log(0.1)],
                                GUESSES: list(np.log(rng.dirichlet([1, 1])))}})  # fmt: skip
    return made


def test_priors_are_each_sources_mean_lean_and_dividing_them_out_evens_a_constant_source():
    train = records("t", 50, 0)
    kept = rep.fit(train, 1.0, True, False)
    priors = kept.priors_for(rep.options_of(train[0]))
    assert np.allclose(priors[LEANS], [0.9, 0.1]) and opt.LABELS not in priors
    assert np.allclose(opt.believed(train[0]["scores"], priors)[LEANS], [0.5, 0.5])
    with_labels = rep.fit(train, 1.0, True, True).priors_for(rep.options_of(train[0]))
    share = (sum(r["answer"] == 0 for r in train) + 1) / (len(train) + 2)
    assert np.allclose(with_labels[opt.LABELS], [share, 1 - share])


def test_the_fit_finds_the_source_that_knows_and_the_report_compares_each_system(tmp_path):
    train = records("t", 300, 1)
    systems, chosen = rep.task_systems(train, records("t", 400, 2), records("u", 100, 3), 100)
    assert chosen["best"]["source"] == KNOWS and chosen["weights"][KNOWS] > 0.6
    assert np.mean(systems["best"]) > 0.8 and np.mean(systems["today"]) < 0.6
    assert np.mean(systems["fitted"]) >= np.mean(systems["best"]) - 0.02
    log_weights = rep.log_fit(train[:100])  # the labelled items only
    assert systems["fitted-log"] == rep.right(records("t", 400, 2), rep.log_mix(log_weights))
    assert chosen["log_weights"] == log_weights and log_weights[KNOWS] > 0.5
    beliefs, answers = [opt.believed(r["scores"], {}) for r in train[:100]], [r["answer"] for r in train[:100]]
    assert log_weights == log_pool.fitted_log_weights(beliefs, answers, log_pool.chosen_penalty(beliefs, answers))
    assert rep.log_mix(log_weights)(train[0]) == int(np.argmax(log_pool.log_mixed(beliefs[0], log_weights)))
    assert np.mean(systems["choices"]) > np.mean(systems["today"])
    for name, folder in (("train", tmp_path / "train"), ("confirm", tmp_path / "confirm")):
        folder.mkdir()
        made = records("t", 300, 1) if name == "train" else records("t", 400, 2)
        (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))
    out = tmp_path / "report.json"
    args = argparse.Namespace(train=tmp_path / "train", confirm=tmp_path / "confirm", drafted=None, labelled=100,
                              choices_from=None, output=out)  # fmt: skip
    assert rep.cmd_report(args) == 0
    report = json.loads(out.read_text())
    assert report["pooled"]["items"] == 400 and report["tasks"]["t"]["against_today"]["best"]["ahead"] > 50
    entry = report["tasks"]["t"]
    assert entry["log_against_fitted"] == rep.paired(systems["fitted-log"], systems["fitted"])
    assert entry["against_best"]["fitted-log"] == rep.paired(systems["fitted-log"], systems["best"])
    assert report["label_free_on_train"] == {}  # one task: no other task's weights to compare running with


def test_the_label_free_systems_are_compared_on_the_train_items_of_each_task():
    train = {"t": records("t", 300, 1), "u": records("u", 300, 4)}
    found = rep.label_free_on_train(train, 100)
    for task, records_ in train.items():
        others = train["u" if task == "t" else "t"][:100]
        running = rep.right(records_, rep.running(records_))
        choices = rep.right(records_, rep.mix(rep.fit(others, 1.0, False, False)))
        assert found[task]["running"] == pytest.approx(np.mean(running))
        assert found[task]["choices"] == pytest.approx(np.mean(choices))
        assert found[task]["running_vs_choices"] == rep.paired(running, choices)
    assert found["pooled"]["running"] == pytest.approx(np.mean([found[t]["running"] for t in train]))
    assert found["pooled"]["running_vs_choices"]["ahead"] == sum(found[t]["running_vs_choices"]["ahead"] for t in train)


def test_fit_writes_the_products_task_weights(tmp_path):
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records("t", 150, 4)))
    out = tmp_path / "weights.json"
    args = argparse.Namespace(train=tmp_path, labelled=100, ensemble_key="KEY", tasks=None, output=out)
    assert rep.cmd_fit(args) == 0
    entries = {e["task"]: e for e in json.loads(out.read_text())}
    assert set(entries) == {"t", "choices"} and entries["t"]["key"] == "KEY" and entries["t"]["items"] == 100
    assert max(entries["t"]["weights"], key=entries["t"]["weights"].get) == KNOWS
    assert entries["choices"]["priors"] == {} and set(entries["t"]["priors"]) <= {'["\\"x\\"", "\\"y\\""]'}


def test_the_running_prior_is_kept_apart_for_each_number_of_options_and_the_drafted_answers_are_paired(tmp_path):
    two = records("t", 30, 5)
    three = [{**r, "id": f"{r['id']}-3", "choices": ["x", "y", "z"], "options": 3, "seconds": 2.0,
              "scores": {name: [*v, np.log(0.05)] for name, v in r["scores"].items()}} for r in two]  # fmt: skip
    mixed = [r for pair in zip(two, three) for r in ({**pair[0], "seconds": 2.0}, pair[1])]
    picks = rep.running(mixed)
    assert all(picks(r) in range(len(r["choices"])) for r in mixed)
    systems, _ = rep.task_systems(records("t", 300, 1), mixed, [], 100)
    drafted = [{"id": r["id"], "answer": r["answer"], "pick": 1, "seconds": 1.0} for r in mixed[:20]]
    check = rep.drafted_check(drafted, mixed, systems)
    always_y = sum(r["answer"] == 1 for r in mixed[:20])
    assert check["items"] == 20 and check["accuracy"] == always_y / 20 and check["scored_seconds_per_item"] == 2.0
    best = check["against_drafted"]["best"]
    assert best["ahead"] - best["behind"] == sum(systems["best"][:20]) - always_y


def test_the_choice_point_is_paired_against_the_drafted_field_and_the_option_alone():
    def record(task, answer, choice_point, drafted, alone):
        return {"task": task, "answer": answer, "choice_point": choice_point, "drafted": drafted, "alone": alone,
                "choice_point_seconds": 1.0, "drafted_seconds": 0.5, "alone_seconds": 2.0}  # fmt: skip

    records = [record("t", 0, 0, 1, 0), record("t", 1, 1, 1, 0), record("u", 0, 1, 0, None)]
    found = rep.inside_summary(records)
    assert found["t"]["accuracy"] == {"choice_point": 1.0, "drafted": 0.5, "alone": 0.5}
    assert found["t"]["choice_point_vs_drafted"] == rep.paired([True, True], [False, True])
    assert found["pooled"]["items"] == 3 and found["pooled"]["choice_point_vs_alone"]["ahead"] == 1
    assert found["pooled"]["same_as_drafted"] == pytest.approx(1 / 3)
    assert found["pooled"]["seconds"] == {"choice_point": 1.0, "drafted": 0.5, "alone": 2.0}


def one_sided(task: str, n: int) -> list[dict]:
    """A task whose answer is always the first option: the source that always says it looks
    perfect on it, and no source knows anything the others do not."""
    return [{**r, "answer": 0} for r in records(task, n, 7)]


def test_the_choices_weights_are_fitted_on_the_tasks_named_and_that_choice_is_checked_on_train(tmp_path):
    train = {"t": records("t", 300, 1), "u": records("u", 300, 4), "n": one_sided("n", 300), "m": one_sided("m", 300)}
    found = rep.choices_pools_on_train(train, 100, {"t", "u"})
    for task, kept in train.items():
        pool = rep.fit([r for name in ("t", "u") for r in train[name][:100]], 1.0, False, False)
        assert found[task]["pool"] == pytest.approx(np.mean(rep.right(kept[100:], rep.mix(pool))))
    assert found["t"]["pool"] > found["t"]["every_task"] + 0.05  # the one-sided tasks teach the lean
    paired = found["pooled"]["pool_vs_every_task"]  # over every task's 200 held-out items
    assert found["pooled"]["pool"] == pytest.approx(np.mean([found[t]["pool"] for t in train]))
    gained = sum(found[t]["pool"] - found[t]["every_task"] for t in train)
    assert paired["ahead"] - paired["behind"] == round(200 * gained)
    for name, made in (("train", [r for rs in train.values() for r in rs]), ("confirm", records("u", 200, 5))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))
    out = tmp_path / "report.json"
    args = argparse.Namespace(train=tmp_path / "train", confirm=tmp_path / "confirm", drafted=None, labelled=100,
                              choices_from=["t", "u"], output=out)  # fmt: skip
    assert rep.cmd_report(args) == 0
    report = json.loads(out.read_text())
    weights = report["tasks"]["u"]["choices_weights"]  # from t's labelled items alone, not n's or m's
    assert weights == rep.fit(train["t"][:100], 1.0, False, False).weights
    assert report["choices_from"] == ["t", "u"] and report["choices_pools_on_train"]["t"] == found["t"]
    from_t = rep.right(train["u"], rep.mix(rep.fit(train["t"][:100], 1.0, False, False)))
    assert report["label_free_on_train"]["u"]["choices"] == pytest.approx(np.mean(from_t))  # the pool's too


def test_fit_ships_only_the_tasks_named(tmp_path):
    made = records("t", 150, 4) + one_sided("n", 150)
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))
    out = tmp_path / "weights.json"
    args = argparse.Namespace(train=tmp_path, labelled=100, ensemble_key="KEY", tasks=["t"], output=out)
    assert rep.cmd_fit(args) == 0
    entries = {e["task"]: e for e in json.loads(out.read_text())}
    assert set(entries) == {"t", "choices"} and entries["choices"]["items"] == 100


def test_the_log_pool_is_compared_on_random_splits_of_the_train_items_only(tmp_path):
    train = {"t": records("t", 60, 6), "u": records("u", 60, 7)}
    found = rep.log_pool_on_train_splits(train, 20, 3, 0)
    rng = np.random.default_rng(0)
    marks: dict[str, list[bool]] = {"best": [], "linear": [], "log": []}
    for task in ("t", "u"):  # the same splits, drawn in the same order
        for _ in range(3):
            order = rng.permutation(60)
            fit_on, held = [train[task][i] for i in order[:20]], [train[task][i] for i in order[20:]]
            best = rep.mix(rep.fit(fit_on, 1.0, False, False), {KNOWS: 1.0})  # the source that knows, uncorrected
            marks["best"] += rep.right(held, best)
            marks["linear"] += rep.right(held, rep.mix(rep.fit(fit_on, 1.0, True, False)))
            marks["log"] += rep.right(held, rep.log_mix(rep.log_fit(fit_on)))
    for system, each in marks.items():
        assert found["pooled"][system] == pytest.approx(np.mean(each)), system
    assert found["pooled"]["log_vs_best"] == rep.paired(marks["log"], marks["best"])
    assert found["pooled"]["linear_vs_best"] == rep.paired(marks["linear"], marks["best"])
    assert set(found) == {"t", "u", "pooled"} and found["t"]["best"] > 0.7
    out = tmp_path / "splits.json"
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train["t"] + train["u"]))
    args = argparse.Namespace(train=tmp_path, labelled=20, repeats=3, seed=0, output=out)
    assert rep.cmd_splits(args) == 0 and json.loads(out.read_text()) == json.loads(json.dumps(found))


def test_fit_keeps_other_ensembles_entries_and_can_take_choices_from_the_members_weights(tmp_path, monkeypatch):
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records("t", 150, 4)))
    calibrations = tmp_path / "calibrations.json"
    calibrations.write_text(json.dumps([{"key": "OTHER", "weights": {"m": 1.0}},
                                        {"key": "KEY", "weights": {"big": 0.9, "small": 0.1}}]))  # fmt: skip
    monkeypatch.setattr(rep, "CALIBRATIONS", calibrations)
    out = tmp_path / "weights.json"
    out.write_text(json.dumps([{"key": "OTHER", "task": "t"}, {"key": "KEY", "task": "old"}]))
    args = argparse.Namespace(
        train=tmp_path, labelled=100, ensemble_key="KEY", tasks=None, output=out, choices="members"
    )
    assert rep.cmd_fit(args) == 0
    entries = json.loads(out.read_text())
    assert [(e["key"], e["task"]) for e in entries] == [("OTHER", "t"), ("KEY", "t"), ("KEY", "choices")]
    choices = entries[-1]
    assert choices["weights"] == pytest.approx({"asked:big": 0.45, "scored:big": 0.45, "asked:small": 0.05,
                                                "scored:small": 0.05})  # fmt: skip
    assert choices["items"] == 0 and choices["priors"] == {} and "members' weights" in choices["fitted_on"]
    with pytest.raises(SystemExit, match="no shipped calibration for 'NONE'"):
        rep.cmd_fit(argparse.Namespace(**{**vars(args), "ensemble_key": "NONE"}))
