"""`specem calibrate` on what a user may give it, over fake members: tool-call items are offered
their tools (as the eval offers them), a damaged calibrators file is said before any answer and
never overwritten, a tasks file's U+2028 inside a string and a byte-order mark are read, the
advice when nothing is right, an ensemble that keeps no weights refused before it answers, and a
task fitted on scored options where the config scores none."""

from __future__ import annotations

import json

import pytest

from specem_local.backend.protocol import MemberLost, StepAbandoned
from specem_local.commands.cli import main
from specem_local.engine import Ensemble
from specem_local.storage.weights import WeightStore
from tests.engine.conftest import fake_ensemble, fake_member
from tests.engine.test_functions import scripted
from tests.engine.test_lost_members import LoseAt

CALL = '{"tool_calls": [{"name": "area", "arguments": {"base": 10}}]}'
TOOL = {"type": "function", "function": {"name": "area", "parameters": {
    "type": "object", "properties": {"base": {"type": "integer"}}, "required": ["base"]}}}  # fmt: skip
FUNCTION = {"name": "area", "parameters": {"type": "dict", "properties": {"base": {"type": "integer"}},
            "required": ["base"]}}  # fmt: skip


def tool_item(i: int, base: int) -> str:
    messages = [{"role": "user", "content": f"Area {i}?"}]
    item = {"id": f"t{i}", "messages": messages, "tools": [TOOL], "functions": [FUNCTION],
            "answer": [{"area": {"base": [base]}}]}  # fmt: skip
    return json.dumps(item) + "\n"


def offered_or_not(text: str) -> str:  # calls when it is told of the function, else says it cannot
    return CALL if "You can call these functions" in text else "I have nothing to call."


def use(monkeypatch, *members, store: WeightStore | None = None) -> None:
    monkeypatch.setattr(
        Ensemble, "from_config", classmethod(lambda cls, config=None, **_: fake_ensemble(*members, weight_store=store))
    )


def test_tool_call_items_are_offered_their_tools_both_ways(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    items = tmp_path / "items.jsonl"
    items.write_text("".join(tool_item(i, 10 if i < 3 else 7) for i in range(6)))
    use(monkeypatch, scripted("a", offered_or_not), scripted("b", offered_or_not),
        store=WeightStore(tmp_path / "specem.db"))  # fmt: skip
    assert main(["calibrate", str(items)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["MODEL", "RIGHT", "ALONE", "WEIGHT", "BEFORE", "WEIGHT", "NOW"]
    rows = {line.split()[0]: line.split()[1] for line in lines[2:]}
    assert rows == {"a": "3/6", "b": "3/6"}  # the calls graded by BFCL's rule: right where base is 10
    use(monkeypatch, scripted("a", offered_or_not), scripted("b", offered_or_not))
    assert main(["calibrate", str(items), "--confidence"]) == 0
    assert "(3 right)" in capsys.readouterr().out


def test_a_damaged_calibrators_file_is_said_before_any_answer_and_kept_as_it_was(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    items = tmp_path / "items.jsonl"
    items.write_text(
        "".join(json.dumps({"question": f"Q{i}?", "answer": "42" if i % 2 else "7"}) + "\n" for i in range(4))
    )
    members = [fake_member("a", "It is 42."), fake_member("b", "So 42.")]
    use(monkeypatch, *members)
    kept = tmp_path / "confidence.json"
    for damaged in ("garbage", '{"not": "a list"}', "[1, 2]"):
        kept.write_text(damaged)
        assert main(["calibrate", str(items), "--confidence"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"specem: error: the confidence calibrators in {kept} ") and err.count("\n") == 1
        assert "delete it to start afresh" in err and kept.read_text() == damaged
        assert members[0].model.decodes == 0  # nothing was answered
    kept.unlink()
    assert main(["calibrate", str(items), "--confidence"]) == 0
    assert [e["check"] for e in json.loads(kept.read_text())] == ["none"]
    assert not list(tmp_path.glob("confidence.json.*"))  # written whole, nothing left beside it


def test_a_tasks_file_with_u2028_in_a_string_and_a_byte_order_mark_is_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    items = tmp_path / "items.jsonl"
    lines = [json.dumps({"question": f"Q{i}\u2028\u0085?", "answer": "42" if i % 2 else "7"}, ensure_ascii=False)
             for i in range(4)]  # fmt: skip
    items.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    use(monkeypatch, fake_member("a", "It is 42."), fake_member("b", "So 42."))
    assert main(["calibrate", str(items), "--confidence"]) == 0
    assert "confidence calibrated on 4 items" in capsys.readouterr().out


def test_nothing_right_asks_for_easier_items_and_everything_right_for_harder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    items = tmp_path / "items.jsonl"
    for answer, advice in (("7", "easier"), ("42", "harder")):
        items.write_text("".join(json.dumps({"question": f"Q{i}?", "answer": answer}) + "\n" for i in range(3)))
        use(monkeypatch, fake_member("a", "It is 42."), fake_member("b", "So 42."))
        assert main(["calibrate", str(items), "--confidence"]) == 1
        assert f"give more items, or {advice} ones" in capsys.readouterr().err


def test_an_ensemble_that_keeps_no_weights_is_refused_before_it_answers(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"question": "Q?", "answer": "42"}) + "\n")
    members = [fake_member("a", "It is 42."), fake_member("b", "So 42.")]
    use(monkeypatch, *members)
    assert main(["calibrate", str(items)]) == 1
    assert "keeps no weights" in capsys.readouterr().err and members[0].model.decodes == 0


def test_a_task_is_fitted_on_scored_options_where_the_ensemble_does_not_score_them(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    members = fake_member("a", '"cat"'), fake_member("b", '"dog"')
    use_settings = fake_ensemble(*members, score_options=False)
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda *_, **__: use_settings))
    items = tmp_path / "pets.jsonl"
    items.write_text('{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}\n' * 4)
    assert main(["calibrate", str(items), "--task", "pets"]) == 0
    out = capsys.readouterr().out
    assert "asked:b" in out and "scored:a" in out  # every member's options, both ways


@pytest.mark.parametrize("stopped", [MemberLost, StepAbandoned])
def test_an_item_a_member_was_lost_on_stops_the_task_fit_in_one_line_keeping_nothing(stopped, monkeypatch, capsys,
                                                                                     tmp_path):  # fmt: skip
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    items = tmp_path / "pets.jsonl"
    items.write_text("".join(f'{{"id": "p{i}", "question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}}\n'
                             for i in range(4)))  # fmt: skip
    use(monkeypatch, fake_member("a", '"cat"', on_decode=LoseAt(6, stopped)), fake_member("b", '"dog"'))
    assert main(["calibrate", str(items), "--task", "pets"]) == 1
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("specem: error: --task pets: item p") and "was not scored by every member (" in said
    assert said.endswith("); nothing was kept: run it again") and ("a was lost" in said) == (stopped is MemberLost)
    assert ("(the answer was stopped)" in said) == (stopped is StepAbandoned)
    assert not (tmp_path / "option_weights.json").exists()
    use(monkeypatch, fake_member("a", '"cat"'), fake_member("b", '"dog"'))
    assert main(["calibrate", str(items), "--task", "pets"]) == 0  # the next run fits and keeps them
    assert (tmp_path / "option_weights.json").exists()


def test_every_member_lost_on_an_item_is_named(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    items = tmp_path / "pets.jsonl"
    items.write_text('{"id": "p0", "question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}\n' * 1)
    members = [fake_member(n, f'"{w}"', on_decode=LoseAt(1)) for n, w in (("a", "cat"), ("b", "dog"))]
    use(monkeypatch, *members, fake_member("c", '"cat"'))
    assert main(["calibrate", str(items), "--task", "pets"]) == 1
    said = capsys.readouterr().err
    assert "item p0 was not scored by every member (a was lost (" in said and "); b was lost (" in said


def test_keeping_a_calibrator_replaces_the_one_for_the_same_members_and_check_and_keeps_the_rest(tmp_path, monkeypatch):
    from specem_local.engine.evidence import Calibrator
    from specem_local.engine.learned import keep_calibrator, key_of

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "new" / "data"))  # no folder yet: made
    members = [fake_member("a", "It is 42."), fake_member("b", "So 42.")]
    fitted = Calibrator((0.0,), 0.0, (0.0,), "mine", answers=10)
    path = keep_calibrator(members, "none", fitted)
    old = {"key": key_of(members), "calibrator": {"weights": [1.0]}}  # kept before checks were named: "none"
    other = {"key": "x", "check": "none", "calibrator": {}}
    path.write_text(json.dumps([old, other, {"key": key_of(members), "check": "samples", "calibrator": {}}]))
    keep_calibrator(members, "none", fitted)
    entries = json.loads(path.read_text())
    assert [(e["key"], e.get("check")) for e in entries] == [
        ("x", "none"), (key_of(members), "samples"), (key_of(members), "none")]  # fmt: skip
    assert path.read_text() == json.dumps(entries, indent=1) + "\n"  # as a person reads it


def test_a_tasks_file_names_its_bad_line_and_an_item_without_an_id_is_its_line_number(tmp_path):
    from specem_local.errors import SpecemError
    from specem_local.labelled import load_tasks

    items = tmp_path / "items.jsonl"
    items.write_text('{"question": "Q?", "answer": "4"}\n\n{"question": "R?", "answer": "5", "id": "r"}\n{bad\n')
    with pytest.raises(SpecemError) as caught:
        load_tasks(items)
    assert str(caught.value) == f"{items}:4: not JSON (Expecting property name enclosed in double quotes at column 2)"
    items.write_text('{"question": "Q?", "answer": "4"}\n\n{"question": "R?", "answer": "5", "id": "r"}\n')
    assert [task.id for task in load_tasks(items)] == ["1", "r"]
    with pytest.raises(SpecemError) as caught:
        load_tasks(tmp_path / "none.jsonl")
    assert str(caught.value).startswith(f"tasks file {tmp_path / 'none.jsonl'}: ")
