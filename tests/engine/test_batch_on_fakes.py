"""``specem run --batch IN.jsonl -o OUT.jsonl`` in-process on fake members (issue 48): one result
per line with its id, a bad line said with its number while the others run, per-line formats
and settings, a rerun that skips what OUT holds, and Ctrl-C leaving OUT whole lines only."""

from __future__ import annotations

import json

import pytest

from specem_local.commands import batch
from tests.engine.conftest import fake_member
from tests.engine.test_cli_on_fakes import members, run
from tests.engine.test_places import Echo

__all__ = ["members"]  # the fixture


def echoes(count: int = 2):
    made = []
    for name in ("a", "b")[:count]:
        member = fake_member(name, "", n_ctx=4096, n_seq_max=16, n_params=3000 if name == "a" else 1000)
        member.model.__class__ = Echo
        made.append(member)
    return made


def lines(path, *items) -> None:
    path.write_text("".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items))


def results(path) -> dict[str, dict]:
    return {record["id"]: record for record in map(json.loads, path.read_text().splitlines())}


def test_a_batch_answers_every_good_line_and_says_each_bad_one_with_its_number(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(
        source,
        {"id": "a1", "prompt": "apple"},
        {"prompt": "river", "max_tokens": 8},
        "{not json",
        {"id": "c", "prompt": "stone", "colour": "red"},
        {"id": "d", "messages": [{"role": "user", "content": "cloud"}], "regex": "You said [a-z]+"},
        {"id": "e", "prompt": "ember", "schema": "{"},
    )
    code, out, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 1 and out == ""
    got = results(target)
    assert got["a1"]["text"].startswith("You said apple") and got["a1"]["finish_reason"] == "eos"
    [river] = [record for record in got.values() if record["line"] == 2]
    assert river["id"].startswith("#") and river["finish_reason"] == "length" and river["tokens"] <= 8
    assert got["d"]["text"] == got["d"]["parsed"] == "You said cloud"
    assert "not JSON" in got["line 3"]["error"] and "unknown keyword 'colour'" in got["c"]["error"]
    assert "schema" in got["e"]["error"]
    for said in ("line 3 (id line 3): not JSON", "line 4 (id c): unknown keyword 'colour'", "line 6 (id e)"):
        assert said in err
    assert "3 of 6 answered" in err and "3 failed" in err


def test_in_order_a_bad_line_is_written_in_its_place_among_the_answers(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    good = [{"id": word, "prompt": word} for word in ("apple", "river", "stone")]
    lines(source, good[0], "{not json", good[1], {"id": "c", "prompt": "x", "colour": "red"}, good[2], {"prompt": 3})
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), "--in-order")
    assert code == 1 and "3 of 6 answered" in err and "3 failed" in err
    written = [json.loads(x) for x in target.read_text().splitlines()]
    assert [record["line"] for record in written] == [1, 2, 3, 4, 5, 6]
    assert [("error" in record) for record in written] == [False, True, False, True, False, True]


def test_a_rerun_answers_only_what_out_does_not_hold(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, *({"id": word, "prompt": word} for word in ("apple", "river")))
    assert run(capsys, "--batch", str(source), "-o", str(target))[0] == 0
    with target.open("a") as cut:
        cut.write('{"id": "half a li')  # a line a crash cut short is dropped, not kept broken
    lines(source, *({"id": word, "prompt": word} for word in ("apple", "river", "stone", "cloud")))
    members[:] = echoes()  # the first run closed its models
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), "--in-order")
    assert code == 0 and "2 of 2 answered" in err
    assert [json.loads(x)["id"] for x in target.read_text().splitlines()] == ["apple", "river", "stone", "cloud"]


def test_ctrl_c_leaves_out_whole_and_a_rerun_finishes(members, capsys, tmp_path, monkeypatch):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    words = ["apple", "river", "stone", "cloud", "ember", "frost"]
    lines(source, *({"id": word, "prompt": word} for word in words))
    ticks = []
    original = batch.Progress.tick

    def tick(self):
        original(self)
        ticks.append(1)
        if len(ticks) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(batch.Progress, "tick", tick)
    code, _, _ = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 130
    first = target.read_text().splitlines()
    assert len(first) == 2 and all(json.loads(x)["text"].startswith("You said") for x in first)
    monkeypatch.setattr(batch.Progress, "tick", original)
    members[:] = echoes()
    assert run(capsys, "--batch", str(source), "-o", str(target))[0] == 0
    assert sorted(results(target)) == sorted(words)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--batch", "in.jsonl"], "--batch needs -o OUT.jsonl"),
        (["hello", "--batch", "in.jsonl", "-o", "out.jsonl"], "a prompt or --batch, not both"),
        ([], "give a prompt"),
        (["hello", "-o", "out.jsonl"], "-o/--output goes with --batch"),
        (["--batch", "missing.jsonl", "-o", "out.jsonl"], "--batch missing.jsonl"),
    ],
)
def test_bad_batch_arguments_are_one_line_before_any_model_loads(
    members, capsys, tmp_path, monkeypatch, arguments, says
):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *arguments)
    assert code == 2 and says in err and err.count("\n") == 1


def test_a_batch_line_may_carry_its_prediction_and_a_bad_one_is_its_error(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "p", "prompt": "apple", "prediction": "You said apple"}, {"id": "q", "prompt": "apple"},
          {"id": "bad", "prompt": "apple", "prediction": 7})  # fmt: skip
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
    got = results(target)
    assert code == 1 and got["p"]["text"] == got["q"]["text"] and got["p"]["text"].startswith("You said apple")
    assert got["p"]["predicted_tokens"] > 0 and "predicted_tokens" not in got["q"]
    assert "prediction must be text" in got["bad"]["error"] and "line 3 (id bad)" in err
