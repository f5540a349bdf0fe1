"""Answers among options on what a user may give (a hostile read of issue 56's path): options one
of which begins another's, a branch whose type no const of it has, ``number`` options, a task's
priors for the same options in another order, a damaged weights file, and `specem calibrate
--task` refusing a bad name before any model loads."""

from __future__ import annotations

import importlib
import json

import jsonschema
import pytest

from specem_local.commands.cli import main
from specem_local.engine import Ensemble
from specem_local.engine import options as opt
from specem_local.engine.task_weights import (
    TaskWeights,
    keep_task_weights,
    own_weights,
    task_weights,
    user_weights_path,
)
from specem_local.errors import SpecemError
from tests.engine.conftest import fake_ensemble, fake_member

task_weights_module = importlib.import_module("specem_local.engine.task_weights")  # the package names a function so

TWELVE = {"type": "integer", "enum": list(range(1, 13))}
MISTYPED = {"anyOf": [{"const": 1, "type": "string"}, {"const": "a"}, {"const": "b"}]}


@pytest.mark.parametrize("schema", [TWELVE, {"enum": [1, 12]}, {"enum": [1, 10, "x"]}, MISTYPED])
def test_options_one_of_which_begins_another_or_that_no_value_satisfies_are_not_scored(schema):
    assert opt.options_in(schema) is None  # written in rounds under the format, as any other schema


COLOR = {"$defs": {"Color": {"enum": ["red", "green"], "title": "Color", "type": "string"}}, "$ref": "#/$defs/Color"}


@pytest.mark.parametrize(
    "schema",
    [
        COLOR,  # pydantic's schema of an Enum, or of RootModel[Color]
        {"$ref": "#/definitions/C", "definitions": {"C": {"$ref": "#/definitions/D"}, "D": {"enum": ["red", "green"]}}},
        {"enum": ["red", "green"], "$comment": "a note", "deprecated": False},  # annotations allow nothing less
    ],
)
def test_options_behind_a_root_reference_or_beside_annotations_are_scored(schema):
    assert opt.options_in(schema) == opt.options_in({"enum": ["red", "green"]})
    with fake_ensemble(fake_member("a", '"green"'), fake_member("b", '"green"')) as ensemble:
        events = list(ensemble.stream("Pick one.", schema=schema))
    assert [e.decision for e in events[1:-1]] == ["options"] and events[-1].parsed == "green"
    jsonschema.validate(events[-1].parsed, schema)


@pytest.mark.parametrize(
    "schema",
    [{**COLOR, "enum": ["red"]}, {"$ref": "#/$defs/Nowhere", "$defs": {}}, {"$ref": "#"}, {"$ref": "http://x"}],
)
def test_a_root_reference_with_constraints_beside_it_or_to_nothing_is_not_scored(schema):
    assert opt.options_in(schema) is None


@pytest.mark.parametrize(("schema", "wanted"), [(TWELVE, "12"), ({"enum": [1, 12]}, "12"), (MISTYPED, '"a"')])
def test_such_options_are_answered_as_the_members_want_and_as_the_schema_allows(schema, wanted):
    with fake_ensemble(fake_member("a", wanted), fake_member("b", wanted)) as ensemble:
        final = ensemble.generate("Pick one.", schema=schema)
    assert final.text == wanted and final.rounds >= 1
    jsonschema.validate(final.parsed, schema)


def test_number_options_are_a_choice_as_the_docs_say():
    found = opt.options_in({"type": "number", "enum": [1, 2]})
    assert found is not None and found.values == (1, 2)


def test_a_tasks_priors_hold_for_its_options_in_another_order():
    kept = TaskWeights(
        "sst2", {"asked:a": 1.0}, {'["\\"positive\\"", "\\"negative\\""]': {"asked:a": [0.8, 0.2]}}, 4, "t"
    )
    flipped = opt.options_in({"enum": ["negative", "positive"]})
    assert flipped is not None
    assert kept.priors_for(flipped)["asked:a"].tolist() == [0.2, 0.8]
    other = opt.options_in({"enum": ["negative", "neutral"]})
    assert other is not None and kept.priors_for(other) == {}


GOOD = {"key": "k", "task": "t", "weights": {"asked:a": 0.5}, "priors": {"#2": {"asked:a": [0.5, 0.5]}},
        "items": 4, "fitted_on": "x"}  # fmt: skip


@pytest.mark.parametrize(
    "damaged",
    [
        json.dumps([{**GOOD, "items": 1e999}]),
        "[" * 100_000 + "]" * 100_000,
        json.dumps([{**GOOD, "priors": {"#2": {"asked:a": [1.0]}}}]),  # one number for two options
        json.dumps([{**GOOD, "priors": {'["1", "2"]': {"asked:a": [1.0, 0.0, 0.0]}}}]),
        json.dumps([{**GOOD, "priors": {"[[1], [2]]": {"asked:a": [0.5, 0.5]}}}]),  # no texts: no set of them
        json.dumps([{**GOOD, "priors": {"[1, 2]": {"asked:a": [0.5, 0.5]}}}]),
        json.dumps([{**GOOD, "priors": {'["1", "1"]': {"asked:a": [0.5, 0.5]}}}]),
        json.dumps([{**GOOD, "priors": {'{"a": 1}': {"asked:a": [0.5, 0.5]}}}]),
        json.dumps([{**GOOD, "priors": {"#2": {"asked:a": "12"}}}]),
        json.dumps([{**GOOD, "weights": {"asked:a": -1.0}}]),
        json.dumps([{**GOOD, "weights": {"asked:a": True}}]),
        json.dumps([{**GOOD, "priors": {"#two": {}}}]),
        json.dumps([{**GOOD, "weights": {"asked:a": 1e308, "scored:a": 1e308}}]),  # their sum is no number
        json.dumps([{**GOOD, "priors": {"#2": {"labels": [0.0, 0.0], "asked:a": [0.5, 0.5]}}}]),  # 0/0
        json.dumps([{**GOOD, "priors": {"#2": {"asked:a": [1e308, 1e308]}}}]),
    ]
    + [f'[{{"key": "k", "task": "t", "weights": {{"asked:a": {bad}}}, "items": 4, "fitted_on": "x"}}]' for bad in
       ("NaN", "Infinity")],
)  # fmt: skip
def test_a_damaged_weights_file_is_one_line_naming_it(tmp_path, monkeypatch, damaged):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    user_weights_path().write_text(damaged)
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    said = str(caught.value)
    assert said.startswith(f"the task weights in {user_weights_path()} are damaged (") and "\n" not in said
    assert said.endswith("delete it to start afresh") and len(said) < 400
    user_weights_path().write_text(json.dumps([GOOD]))
    assert task_weights([], "t") is None  # a good file for other members: read, nothing for these


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"weights": {"asked:a": 1e308, "scored:a": 1e308}}, "(the weights add up to more than a number can hold)"),
        ({"priors": {"#2": {"labels": [0.0, 0.0]}}}, "(a prior of #2 adds up to 0 or to more than a number can hold)"),
    ],
)
def test_weights_or_priors_that_sum_to_no_number_say_which(tmp_path, monkeypatch, entry, why):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    user_weights_path().write_text(json.dumps([{**GOOD, **entry}]))
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    assert why in str(caught.value)


def test_calibrate_task_refuses_a_bad_name_before_any_model_loads_and_takes_empty_as_choices(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    loads = []

    def from_config(cls, config=None, **_):
        loads.append(1)
        return fake_ensemble(fake_member("a", '"cat"'), fake_member("b", '"dog"'))

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))
    items = tmp_path / "pets.jsonl"
    items.write_text('{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}\n' * 4)
    assert main(["calibrate", str(items), "--task", "bad name"]) == 2
    assert "task" in capsys.readouterr().err and loads == []
    assert main(["calibrate", str(items), "--task", ""]) == 0
    assert "task 'choices': weights fitted on 4 items" in capsys.readouterr().out
    items.write_text('{"question": "Which?", "choices": ["a", " "], "answer": "B", "id": "q7"}\n')
    assert main(["calibrate", str(items), "--task", "pets"]) == 1
    assert "item q7's choices are not options every member can score" in capsys.readouterr().err


def test_a_kept_task_without_priors_is_read_and_a_damaged_one_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    bare = {key: value for key, value in GOOD.items() if key != "priors"}
    user_weights_path().write_text(json.dumps([{**bare, "key": ""}]))  # "": the key of no members
    kept = task_weights([], "t")
    assert kept is not None and kept.priors == {} and kept.weights == {"asked:a": 0.5}
    user_weights_path().write_text(json.dumps([{**GOOD, "items": 1e999}]))
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    assert str(caught.value) == (
        f"the task weights in {user_weights_path()} are damaged (cannot convert float infinity to integer); "
        "delete it to start afresh"
    )


def test_a_weights_file_that_is_not_utf8_is_damaged_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    user_weights_path().write_bytes(b"[\xff]")
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    assert str(caught.value) == (
        f"the task weights in {user_weights_path()} are damaged (not UTF-8); delete it to start afresh"
    )


def test_weights_that_are_no_numbers_are_not_kept_and_the_file_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    keep_task_weights([], TaskWeights("t", {"asked:a": 1.0}, {}, 3, "three"))
    before = user_weights_path().read_bytes()
    nan = float("nan")
    for weights, priors in (({"asked:a": nan}, {}), ({"asked:a": 1.0}, {"#2": {"asked:a": [nan, 1.0]}})):
        with pytest.raises(SpecemError) as caught:
            keep_task_weights([], TaskWeights("t", weights, priors, 3, "three"))
        assert str(caught.value).startswith("the task 't''s weights were not kept: ")
        assert user_weights_path().read_bytes() == before
    kept = task_weights([], "t")
    assert kept is not None and kept.weights == {"asked:a": 1.0}


def test_a_data_dir_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "file" / "data"))
    with pytest.raises(SpecemError) as caught:
        keep_task_weights([], TaskWeights("t", {"asked:a": 1.0}, {}, 3, "three"))
    assert str(caught.value) == f"cannot keep the task weights in {tmp_path / 'file' / 'data'}: Not a directory"


def test_specems_keeping_weights_at_once_lose_none_of_them(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    real_read = task_weights_module._read

    def slow_read(path):  # a read, then a pause: without the lock the other's write is lost
        found = real_read(path)
        threading.Event().wait(0.01)
        return found

    monkeypatch.setattr(task_weights_module, "_read", slow_read)

    def keep(task: str) -> None:
        for n in range(8):
            keep_task_weights([], TaskWeights(task, {"asked:a": 1.0}, {}, n + 1, task))

    threads = [threading.Thread(target=keep, args=(task,)) for task in ("t1", "t2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    monkeypatch.setattr(task_weights_module, "_read", real_read)
    assert [task_weights([], task).items for task in ("t1", "t2")] == [8, 8]  # type: ignore[union-attr]
    assert (tmp_path / ".option_weights.json.lock").exists()


def test_a_tasks_own_weights_are_the_users_then_the_shipped_but_never_the_shipped_choices(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    shipped = {("", name): TaskWeights(name, {"asked:a": 1.0}, {}, 500, "shipped") for name in ("choices", "t")}
    monkeypatch.setattr(task_weights_module, "_shipped", lambda: shipped)
    assert own_weights([], "choices") is None and own_weights([], "t").items == 500  # type: ignore[union-attr]
    assert own_weights([], "other") is None and task_weights([], "other").items == 500  # type: ignore[union-attr]
    for task in ("choices", "t"):
        keep_task_weights([], TaskWeights(task, {"asked:a": 1.0}, {}, 7, "mine"))
        assert own_weights([], task).items == 7  # type: ignore[union-attr]


def test_the_shipped_option_weights_are_the_built_in_ensembles_each_with_its_choices():
    from importlib import resources

    shipped = json.loads(resources.files("specem_local.data").joinpath("option_weights.json").read_text("utf-8"))
    calibrated = json.loads(resources.files("specem_local.data").joinpath("calibrations.json").read_text("utf-8"))
    keys = [entry["key"] for entry in calibrated]  # the demo trio's and demo-1.5b's (checked on the models)
    assert {entry["key"] for entry in shipped} == set(keys)
    for key in keys:
        tasks = {entry["task"]: entry for entry in shipped if entry["key"] == key}
        assert "choices" in tasks and {"sst2", "boolq", "piqa", "arc_easy", "winogrande"} <= set(tasks)
        assert all(entry["items"] == 100 for task, entry in tasks.items() if task != "choices")
    demo_15b = {entry["task"]: entry for entry in shipped if entry["key"] == keys[1]}
    assert {"arc_challenge", "mmlu"} <= set(demo_15b) and demo_15b["choices"]["items"] == 0
    assert max(demo_15b["choices"]["weights"], key=demo_15b["choices"]["weights"].get).endswith("qwen2.5-coder-1.5b")


def test_a_prior_key_of_no_option_texts_says_so_and_a_weights_path_that_is_a_folder_cannot_be_read(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    user_weights_path().write_text(json.dumps([{**GOOD, "priors": {"[1, 2]": {"asked:a": [0.5, 0.5]}}}]))
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    assert "(a prior's key [1, 2] is not a list of distinct option texts)" in str(caught.value)
    long_key = json.dumps(["same"] * 20)
    user_weights_path().write_text(json.dumps([{**GOOD, "priors": {long_key: {"asked:a": [0.05] * 20}}}]))
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    assert f"(a prior's key {long_key[:60]} is not a list" in str(caught.value)  # cut at 60 characters
    user_weights_path().unlink()
    user_weights_path().mkdir()
    with pytest.raises(SpecemError) as caught:
        task_weights([], "t")
    assert str(caught.value) == f"cannot read the task weights in {user_weights_path()}: Is a directory"
    assert caught.value.status == 500  # the server's file: nothing the request did


def test_weights_are_kept_in_a_data_dir_made_with_its_parents_and_a_held_lock_is_waited_for_then_said(
    tmp_path, monkeypatch
):
    import os

    from specem_local.dirs import file_lock

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "a" / "b" / "data"))
    keep_task_weights([], TaskWeights("t", {"asked:a": 1.0}, {}, 3, "three"))
    assert task_weights([], "t").items == 3  # type: ignore[union-attr]
    monkeypatch.setattr(task_weights_module, "LOCK_WAIT", 0.2)
    lock = user_weights_path().with_name(".option_weights.json.lock")
    held = file_lock(lock, "a test", 1.0)  # another specem keeping weights: its own descriptor, so it conflicts
    with held, pytest.raises(SpecemError) as caught:
        keep_task_weights([], TaskWeights("t", {"asked:a": 1.0}, {}, 4, "four"))
    assert str(caught.value) == (
        f"another specem is changing {user_weights_path()} (it holds {lock}); try again when it is done"
    )
    assert task_weights([], "t").items == 3 and os.path.exists(lock)  # type: ignore[union-attr]


def test_twenty_options_are_scored_not_one_more_and_texts_keep_their_letters_and_branches_their_descriptions():
    assert opt.options_in({"enum": list(range(100, 120))}) is not None
    assert opt.options_in({"enum": list(range(100, 121))}) is None
    assert opt.options_in({"enum": ["thé", "café"]}).texts == ('"thé"', '"café"')  # type: ignore[union-attr]
    described = {"oneOf": [{"const": "a", "description": "first"}, {"const": "b", "title": "B", "type": "string"}]}
    assert opt.options_in(described).values == ("a", "b")  # type: ignore[union-attr]
