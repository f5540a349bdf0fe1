"""A batch that learns (issue 56, ``commands/batch_learning.py``) on fake members: ``a`` would
answer "cat", ``b`` "dog"; with no weights kept the two tie and the answer is the first option
listed. Labelled lines say "dog": from the first on, the task's weights believe ``b``, and later
answers follow them; a rerun learns again from what OUT holds; a bad label is a bad line."""

from __future__ import annotations

import importlib
import json

import pytest

from specem_local.commands.batch_learning import label_index
from specem_local.engine import ask_from
from specem_local.engine.task_weights import TaskWeights, keep_task_weights, task_weights
from specem_local.errors import SettingError
from tests.engine.conftest import fake_member
from tests.engine.test_batch_on_fakes import lines, results
from tests.engine.test_cli_on_fakes import members, run

__all__ = ["members"]  # the fixture
PETS = {"enum": ["cat", "dog"]}
STEPS = ("--in-order", "--parallel", "1", "--task", "pets")  # one answer at a time: each after the fit before it


def pets(members) -> None:
    """Fresh members for the next run (a run closes its models)."""
    members[:] = [fake_member("a", '"cat"', n_params=5000), fake_member("b", '"dog"')]


def batch(members, capsys, tmp_path, items, *flags: str) -> tuple[int, dict, str]:
    """Fresh members, IN written with ``items``, the batch run (one answer at a time unless
    ``flags`` say otherwise): its exit code, OUT's records by id, what it said on stderr."""
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *items)
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), *(flags or STEPS))
    return code, results(target), err


def labelled(count: int) -> list[dict]:
    """``count`` lines whose label is "dog", the options in both orders (no position leans)."""
    made = []
    for index in range(count):
        options = ["cat", "dog"] if index % 2 == 0 else ["dog", "cat"]
        made.append({"id": f"l{index}", "prompt": "Which pet?", "schema": {"enum": options}, "label": "dog"})
    return made


def test_labelled_lines_teach_the_task_and_the_answers_after_them_follow(members, capsys, tmp_path):
    code, got, err = batch(
        members, capsys, tmp_path, [*labelled(4), {"id": "later", "prompt": "Which pet?", "schema": PETS}]
    )
    assert code == 0, err
    first = got["l0"]  # no weights yet: a tie, the first option listed
    assert first["parsed"] == "cat" and first["label"] == "dog" and first["right"] is False
    assert set(first["option_scores"]) == {"asked:a", "asked:b", "scored:a", "scored:b"}
    assert [len(scores) for scores in first["option_scores"].values()] == [2, 2, 2, 2]
    assert first["options"] == ['"cat"', '"dog"'] and got["l1"]["options"] == ['"dog"', '"cat"']  # as the line had them
    for index in (2, 3):  # fitted on the lines before, in both orders: b is believed
        assert got[f"l{index}"]["parsed"] == "dog" and got[f"l{index}"]["right"] is True
    assert got["later"]["parsed"] == "dog" and "label" not in got["later"] and "option_scores" not in got["later"]
    kept = task_weights(members, "pets")
    assert kept is not None and kept.task == "pets" and kept.items == 4
    assert kept.fitted_on == "4 labelled lines of in.jsonl (a learning batch)"
    assert kept.weights["asked:b"] > kept.weights["asked:a"]
    assert "task 'pets': 3 of 4 labelled answers right; its weights fitted on 4 labelled answers, kept in" in err
    assert "warning" not in err
    pets(members)
    assert run(capsys, "--choices", "cat,dog", "--task", "pets", "Which pet?")[1] == "dog\n"  # kept for later answers


def test_a_rerun_learns_again_from_the_labelled_lines_out_holds(members, capsys, tmp_path, monkeypatch):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *labelled(4), {"id": "later", "prompt": "Which pet?", "schema": PETS})
    assert run(capsys, "--batch", str(source), "-o", str(target), *STEPS)[0] == 0
    kept = task_weights(members, "pets")
    assert kept is not None and kept.items == 4
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "elsewhere"))  # the weights kept are gone
    target.write_text("".join(line + "\n" for line in target.read_text().splitlines() if '"later"' not in line))
    pets(members)
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), *STEPS)
    assert code == 0, err
    assert results(target)["later"]["parsed"] == "dog"  # fitted on the labelled lines OUT held
    again = task_weights(members, "pets")
    assert again is not None and again.items == 4 and again.weights == pytest.approx(kept.weights)
    assert "1 of 1 answered" in err and "its weights fitted on 4 labelled answers" in err


def test_a_task_whose_weights_were_fitted_on_more_items_keeps_them(members, capsys, tmp_path):
    pets(members)
    believed = {"asked:a": 0.7, "scored:a": 0.1, "asked:b": 0.1, "scored:b": 0.1}
    keep_task_weights(members, TaskWeights("pets", believed, {}, 6, "earlier"))
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *labelled(5), {"id": "later", "prompt": "Which pet?", "schema": PETS})
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), *STEPS)
    assert code == 0 and results(target)["later"]["parsed"] == "cat"  # a's weights stand: fitted on more items
    kept = task_weights(members, "pets")
    assert kept is not None and kept.fitted_on == "earlier"
    said = "its weights were not fitted: that needs labelled answers scored among the options, as many as the task's "
    assert f"0 of 5 labelled answers right; {said}own weights were fitted on\n" in err
    lines(source, *labelled(6), {"id": "later", "prompt": "Which pet?", "schema": PETS})
    target.unlink()
    pets(members)
    assert run(capsys, "--batch", str(source), "-o", str(target), *STEPS)[0] == 0
    assert results(target)["later"]["parsed"] == "dog"  # as many labelled lines now: the fit replaces them
    kept = task_weights(members, "pets")
    assert kept is not None and kept.items == 6


def test_a_drafted_labelled_answer_is_graded_but_teaches_nothing(members, capsys, tmp_path):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    drafted = [{**line, "score_options": False} for line in labelled(3)]
    lines(source, *drafted)
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), *STEPS)
    assert code == 0, err
    got = results(target)
    for record in got.values():
        assert (
            record["label"] == "dog"
            and record["right"] == (record["parsed"] == "dog")
            and "option_scores" not in record
        )
    right = sum(record["right"] for record in got.values())
    assert f"{right} of 3 labelled answers right; its weights were not fitted" in err
    assert task_weights(members, "pets") is None


def test_a_bad_label_is_a_bad_line_said_with_its_number_and_the_others_run(members, capsys, tmp_path):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(
        source,
        {"id": "none", "prompt": "Which pet?", "schema": PETS, "label": "fish"},
        {"id": "free", "prompt": "Which pet?", "label": "dog"},
        {"id": "good", "prompt": "Which pet?", "schema": PETS, "label": "dog"},
    )
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), *STEPS)
    got = results(target)
    assert code == 1 and got["good"]["label"] == "dog" and "option_scores" in got["good"]
    assert got["none"]["error"] == '"label" "fish" is not one of the options ("cat", "dog")'
    assert got["free"]["error"].startswith('"label" goes with an answer among a few options')
    assert 'line 1 (id none): "label" "fish"' in err and "1 of 3 answered" in err


@pytest.mark.parametrize(
    ("schema", "label", "index"),
    [
        ({"type": "boolean"}, False, 1),
        ({"enum": [1, True, None]}, True, 1),
        ({"enum": [1, True, None]}, None, 2),
        ({"enum": [1, True, None]}, 1, 0),
    ],
)
def test_a_label_is_matched_as_json_so_true_is_not_1(schema, label, index):
    assert label_index(ask_from("Which?", {"schema": schema}), label) == index


def test_a_label_of_a_value_the_options_lack_is_refused_whatever_its_type():
    ask = ask_from("Which?", {"schema": {"enum": [1, 2]}})
    for label in (True, "1", 1.5, [1], {"a": 1}):
        with pytest.raises(SettingError, match="is not one of the options"):
            label_index(ask, label)
    assert json.dumps(label_index(ask, 2)) == "1"


def test_weights_that_cannot_be_kept_are_said_once_and_every_answer_is_still_written(
    members, capsys, tmp_path, monkeypatch
):
    from specem_local.errors import SpecemError

    kept_weights = importlib.import_module("specem_local.engine.task_weights")  # the package names a function so

    def full_disk(path, text, mode=None):
        raise SpecemError(f"{path}: no space left on the device")

    monkeypatch.setattr(kept_weights, "replace_file", full_disk)
    code, got, err = batch(
        members, capsys, tmp_path, [*labelled(3), {"id": "later", "prompt": "Which pet?", "schema": PETS}]
    )
    assert code == 0, err
    assert set(got) == {"l0", "l1", "l2", "later"} and all("error" not in record for record in got.values())
    assert got["l0"]["label"] == "dog" and "option_scores" in got["l2"]
    said = "warning: the batch's labels taught nothing that lasts: "
    assert err.count(said) == 1 and f"{said}{tmp_path}" in err and "no space left" in err
    assert "its weights were not fitted" in err and "4 of 4 answered" in err


def test_answers_run_at_once_each_teach_once_and_the_last_fit_holds_every_label(members, capsys, tmp_path):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *labelled(8))
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), "--parallel", "4", "--task", "pets")
    assert code == 0, err
    got = results(target)
    assert all(record["label"] == "dog" and "option_scores" in record for record in got.values()) and len(got) == 8
    kept = task_weights(members, "pets")
    assert kept is not None and kept.items == 8 and "its weights fitted on 8 labelled answers" in err
    assert f"{sum(record['right'] for record in got.values())} of 8 labelled answers right" in err


class Watched:
    """A stream as ``BatchLearning.watch`` sees one: it hands over its watcher."""

    def watch(self, seen):
        self.seen = seen
        return self


def learning_for(members, tmp_path):
    from specem_local.commands.batch_learning import BatchLearning

    return BatchLearning(members, "", tmp_path / "in.jsonl")


def test_a_cancelled_answer_teaches_nothing_and_counts_for_nothing(members, tmp_path):
    from specem_local.events import FinalEvent

    pets(members)
    learning, stream = learning_for(members, tmp_path), Watched()
    ask = ask_from("Which pet?", {"schema": PETS, "task": "pets"})
    learning.watch(0, ask, 1, stream)
    stream.seen(FinalEvent("", "cancelled", 0, 0, 0.1, None, {}, 0.0, {}, False))
    assert learning.answered(0) == {} and learning.answered(7) == {} and not learning.asked
    del stream.seen
    learning.watch(1, ask, None, stream)  # no label: nothing watched
    assert not hasattr(stream, "seen") and learning.answered(1) == {}


def test_only_whole_labelled_records_of_out_are_learnt_from_again(members, tmp_path):
    pets(members)
    learning = learning_for(members, tmp_path)
    ask = ask_from("Which pet?", {"schema": {"enum": ["café", "thé"]}})
    good = {"asked:a": [-1.0, -2.0], "asked:b": [-2.0, -1.0]}
    for record in (
        {"label": "thé", "option_scores": {"asked:a": [-1.0]}},  # a score missing
        {"label": "thé", "option_scores": {"asked:a": "-1, -2"}},  # not a list
        {"label": "thé", "option_scores": []},
        {"label": "thé", "option_scores": {}},
        {"label": "thé", "option_scores": {"asked:a": [None, -1.0]}},  # not numbers
        {"label": "thé", "option_scores": {"asked:a": ["x", -1.0]}},
        {"label": "thé", "option_scores": {"asked:a": [True, -1.0]}},
        {"label": "thé", "option_scores": {"asked:a": [float("nan"), -1.0]}},
        {"label": "thé", "option_scores": {**good, "asked:gone": [-1.0, -2.0]}},  # a member no longer here
        {"label": "thé", "option_scores": good, "options": ['"café"', '"milk"']},  # other options
        {"label": "thé", "option_scores": good, "options": '"café", "thé"'},
        {"label": "thé", "option_scores": good, "options": {'"café"': 0, '"thé"': 1}},  # its keys are no list
        {"option_scores": good, "options": ['"café"']},
        {"id": "1", "text": '"thé"'},  # answered before it had a label
    ):
        learning.resumed(ask, 1, record)
    assert not learning.labelled["choices"] and learning.unscored == 14
    learning.resumed(ask, 1, {"label": "thé"})  # drafted: it taught nothing the first time, nor now
    assert not learning.labelled["choices"] and learning.unscored == 14
    learning.resumed(ask, 1, {"label": "café", "option_scores": good})  # IN's label wins (an edited IN)
    [kept] = learning.labelled["choices"]
    assert kept.answer == 1 and kept.scores == good and kept.options.texts == ('"café"', '"thé"')
    learning.resumed(ask, 0, {"option_scores": {"asked:a": [-3, -4.0]}, "options": ['"thé"', '"café"']})
    assert learning.labelled["choices"][1].scores == {"asked:a": [-4.0, -3.0]}  # put in IN's order
    numbers = ask_from("Which?", {"schema": {"enum": [1, 2]}})  # texts "1" and "2"
    learning.resumed(numbers, 0, {"option_scores": good, "options": [1, 2]})  # the values, not their texts
    assert len(learning.labelled["choices"]) == 2 and learning.unscored == 15
    assert learning.task_of(ask_from("x", {"task": "mine"})) == "mine" and learning.task_of(ask) == "choices"
    named = type(learning)(members, "pets", tmp_path / "in.jsonl")  # --task pets
    assert named.task_of(ask) == "pets" and named.task_of(ask_from("x", {"task": ""})) == "choices"  # as answered


def test_a_lines_own_task_is_the_one_it_teaches(members, capsys, tmp_path):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *({**line, "task": "shelter"} for line in labelled(2)))
    assert run(capsys, "--batch", str(source), "-o", str(target), "--parallel", "1", "--task", "pets")[0] == 0
    assert task_weights(members, "pets") is None
    kept = task_weights(members, "shelter")
    assert kept is not None and kept.task == "shelter" and kept.items == 2


def test_a_label_error_names_the_label_field_and_cuts_long_values(members):
    ask = ask_from("Which?", {"schema": PETS})
    with pytest.raises(SettingError) as refused:
        label_index(ask_from("Which?", {}), "dog")
    assert str(refused.value) == (
        '"label" goes with an answer among a few options: give the line a "schema" whose "enum" (or "const"s) lists '
        '2 to 20 values, none an object, a list or a number with a fraction, none whose text begins another\'s ("1" '
        'and "10")'
    )
    assert refused.value.field == "label"
    with pytest.raises(SettingError) as refused:
        label_index(ask, "é" * 100)
    assert str(refused.value) == f'"label" "{"é" * 79} is not one of the options ("cat", "dog")'
    assert refused.value.field == "label"
    many = ask_from("Which?", {"schema": {"enum": [f"option {i:02d} " + "x" * 20 for i in range(12)]}})
    with pytest.raises(SettingError) as refused:
        label_index(many, "none")
    assert str(refused.value).endswith(f"({', '.join(json.dumps(o) for o in options_texts(many))[:200]})")
    assert label_index(ask_from("Which?", {"schema": {"enum": ["café", "thé"]}}), "thé") == 1


def options_texts(ask):
    from specem_local.commands.batch_learning import options_of

    found = options_of(ask)
    assert found is not None
    return found.values


def test_answers_less_sure_than_min_confidence_are_written_for_review_with_their_labels(members, capsys, tmp_path):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    same = {"prompt": "Which pet?", "schema": PETS, "label": "dog"}  # no id, twice: the second gets "-2"
    lines(source, *labelled(4), same, same, {"id": "free", "prompt": "Which pet?", "schema": PETS})
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), *STEPS, "--min-confidence", "0.7")
    assert code == 0, err
    got = results(target)
    twins = [record for record in got.values() if record["id"].startswith("#")]
    assert len(twins) == 2 and {r["id"][-2:] == "-2" for r in twins} == {True, False}
    assert all(r["label"] == "dog" and "option_scores" in r for r in twins)
    review = [json.loads(line) for line in (tmp_path / "out.review.jsonl").read_text().splitlines()]
    unsure = [record for record in got.values() if record["confidence"] < 0.7]
    assert 0 < len(unsure) < len(got)
    assert sorted(review, key=lambda r: r["line"]) == sorted(unsure, key=lambda r: r["line"])


def test_an_options_round_scored_only_the_asked_way_a_choice_point_teaches_nothing(members, tmp_path):
    import dataclasses

    from specem_local.events import FinalEvent, RoundEvent
    from tests.engine.conftest import fake_ensemble

    pets(members)
    with fake_ensemble(*members) as ensemble:
        events = list(ensemble.stream("Which pet?", schema=PETS, task="pets"))
    [scored] = [event for event in events if isinstance(event, RoundEvent)]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    asked_only = dataclasses.replace(
        scored,
        candidates=tuple(
            dataclasses.replace(c, scores={k: v for k, v in c.scores.items() if k.startswith("asked:")})
            for c in scored.candidates
        ),
    )
    ask = ask_from("Which pet?", {"schema": PETS, "task": "pets"})
    for index, round_ in enumerate((asked_only, scored)):
        learning, stream = learning_for(members, tmp_path), Watched()
        learning.watch(index, ask, 1, stream)
        stream.seen(round_)
        stream.seen(final)
        fields = learning.answered(index)
        assert fields["label"] == "dog" and ("option_scores" in fields) is (round_ is scored)
        assert len(learning.labelled["pets"]) == (1 if round_ is scored else 0)


def test_calibrates_limit_is_20_by_default_one_or_more_and_its_help_says_how_few_sufficed(capsys):
    from specem_local.commands.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["calibrate", "items.jsonl"]).limit == 20
    assert parser.parse_args(["calibrate", "items.jsonl", "--limit", "1"]).limit == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["calibrate", "items.jsonl", "--limit", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["calibrate", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "use the first N items (default 20; with --task, about 10 sufficed on the tasks in docs/choices.md)" in said


def test_a_data_dir_that_cannot_be_made_is_one_warning_and_every_answer_is_written(
    members, capsys, tmp_path, monkeypatch
):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "file" / "data"))
    code, got, err = batch(
        members, capsys, tmp_path, [*labelled(2), {"id": "later", "prompt": "Which pet?", "schema": PETS}]
    )
    assert code == 0, err
    assert set(got) == {"l0", "l1", "later"} and all("error" not in record for record in got.values())
    said = "warning: the batch's labels taught nothing that lasts: cannot keep the task weights in "
    assert err.count(said) == 1 and "Not a directory" in err and "3 of 3 answered" in err


def test_past_every_fit_the_weights_are_refitted_as_the_lines_grow_by_a_tenth_and_at_the_end(
    members, tmp_path, monkeypatch
):
    from specem_local.commands import batch_learning
    from specem_local.commands.batch_learning import Labelled
    from specem_local.engine.options import options_in

    pets(members)
    options = options_in(PETS)

    def fits(every: int, lines: int, task: str) -> tuple[list[int], int]:
        monkeypatch.setattr(batch_learning, "EVERY_FIT", every)
        learning, fitted = learning_for(members, tmp_path), []
        for count in range(1, lines + 1):
            learning.labelled[task].append(Labelled({"asked:a": [-1.0, -2.0]}, options, count % 2))
            learning._fit(task)
            fitted.append(learning.kept[task][1] if task in learning.kept else 0)
        learning.said()
        return fitted, learning.kept[task][1]

    every_one = list(range(1, 13))
    assert fits(12, 17, "pets") == ([*every_one, 12, 14, 14, 16, 16], 17)  # 13 < 12 + a tenth; the end fits all
    assert task_weights(members, "pets").items == 17
    assert fits(0, 3, "other") == ([1, 2, 3], 3)  # none refitted by count: the first at once, then each a tenth more


def test_labels_that_teach_nothing_on_a_rerun_and_a_batch_with_no_task_are_said(members, capsys, tmp_path):
    pets(members)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *({key: value for key, value in line.items() if key != "label"} for line in labelled(2)))
    assert run(capsys, "--batch", str(source), "-o", str(target), "--parallel", "1")[0] == 0
    lines(source, *labelled(2), {"id": "later", "prompt": "Which pet?", "schema": PETS, "label": "dog"})
    pets(members)
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), "--parallel", "1")
    assert code == 0, err
    assert (
        "specem: note: 2 labelled lines OUT already holds teach nothing: answered before they had a label, by other "
        "members or among other options; take their results out of OUT to answer them again\n"
    ) in err
    assert (
        "specem: note: the labelled lines named no task, so they taught 'choices', the weights of every task without "
        'its own: name it (--task NAME, or "task" on the lines) to keep it apart\n'
    ) in err
    assert task_weights(members, "anything").items == 1  # the one new labelled line
