"""``specem run --batch`` and ``Ensemble.answers`` against a hostile user (issue 53): a bad line or
item never costs the others, a rerun makes OUT whole whatever it held, JSONL is split where
JSONL ends lines, a bad OUT is one line before any model loads, and the command's ``--think``
reaches lines that carry their own format. Each case was a traceback, a lost batch or a hang."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from specem_local.commands import batch
from specem_local.engine import Ensemble
from specem_local.errors import SettingError
from specem_local.storage.history import History
from tests.engine.test_batch_on_fakes import echoes, lines, results
from tests.engine.test_cli_on_fakes import members, run
from tests.engine.test_places import ensemble
from tests.storage.test_read_only import read_only

__all__ = ["members"]  # the fixture

SURROGATE_ID = '{"id": "\\ud800", "prompt": "ember"}'


def test_bad_lines_of_every_kind_are_recorded_and_every_good_line_answered(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(
        source,
        {"id": "good1", "prompt": "apple"},
        {"id": "strings", "messages": ["hello"]},
        {"id": "no-content", "messages": [{"role": "user"}]},
        {"id": "list", "prompt": ["hello"]},
        SURROGATE_ID,
        {"id": "number", "prompt": 5},
        {"id": "good2", "messages": [{"role": "user", "content": "river"}]},
    )
    code, out, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 1 and out == "" and "Traceback" not in err
    got = results(target)
    assert got["good1"]["text"].startswith("You said apple") and got["good2"]["text"].startswith("You said river")
    assert "messages[0] must be an object" in got["strings"]["error"]
    assert "messages[0].content must be text" in got["no-content"]["error"]
    assert "messages[0] must be an object" in got["list"]["error"]
    assert 'needs a "prompt"' in got["number"]["error"]
    [surrogate] = [record for record in got.values() if record["line"] == 5]
    assert "valid Unicode" in surrogate["error"]
    assert "5 of 7 answered" not in err and "2 of 7 answered" in err and "5 failed" in err


def test_answers_hands_back_bad_items_and_a_bug_in_one_item_without_losing_the_others(monkeypatch):
    with ensemble(2) as running:
        got = {a.index: a for a in running.answers(["apple", None, {"prompt": 5}, "river", {"prompt": ["x"]}])}
        assert got[0].final.text.startswith("You said apple") and got[3].final.text.startswith("You said river")
        assert all(isinstance(got[i].error, SettingError) for i in (1, 2, 4))
        assert "not nothing" in str(got[1].error) and "not int '5'" in str(got[2].error)
        real = Ensemble.stream

        def stream(self, prompt, **options):
            if getattr(prompt, "prompt", prompt) == "stone":
                raise TypeError("a bug in one item")
            return real(self, prompt, **options)

        monkeypatch.setattr(Ensemble, "stream", stream)
        got = {a.index: a for a in running.answers(["apple", "stone", "river"])}
        assert isinstance(got[1].error, TypeError)
        assert got[0].final.text.startswith("You said apple") and got[2].final.text.startswith("You said river")


def test_a_duplicate_ids_error_before_the_first_lines_answer_does_not_skip_it_on_resume(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "x", "prompt": "apple"}, {"id": "x", "prompt": "river"})
    target.write_text(json.dumps({"id": "x", "line": 2, "error": "the id 'x' is used by an earlier line"}) + "\n")
    code, _, _ = run(capsys, "--batch", str(source), "-o", str(target))  # the run that was interrupted goes on
    records = [json.loads(x) for x in target.read_text().splitlines()]
    assert code == 1
    [answered] = [r for r in records if "text" in r]
    assert answered["line"] == 1 and answered["text"].startswith("You said apple")
    assert [r["line"] for r in records if "error" in r] == [2]  # said once, not once a run


def test_a_fixed_line_is_answered_on_the_rerun_and_out_keeps_one_record_per_line(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "a", "prompt": "apple"}, {"id": "b", "prompt": "river", "colour": "red"})
    assert run(capsys, "--batch", str(source), "-o", str(target))[0] == 1
    lines(source, {"id": "a", "prompt": "apple"}, {"id": "b", "prompt": "river"})
    members[:] = echoes()
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 0 and "1 of 1 answered" in err
    records = [json.loads(x) for x in target.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["a", "b"] and all("error" not in r for r in records)


def test_lines_without_an_id_keep_their_answers_when_in_is_edited(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"prompt": "apple"}, {"prompt": "river"}, {"prompt": "apple"})
    assert run(capsys, "--batch", str(source), "-o", str(target))[0] == 0
    first = results(target)
    assert len(first) == 3 and len({r["id"] for r in first.values()}) == 3  # a repeat gets an id of its own
    lines(source, {"prompt": "stone"}, {"prompt": "apple"}, {"prompt": "river"}, {"prompt": "apple"})
    members[:] = echoes()
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 0 and "1 of 1 answered" in err
    after = results(target)
    assert set(first) < set(after) and len(after) == 4
    [new] = [r for i, r in after.items() if i not in first]
    assert new["text"].startswith("You said stone") and new["line"] == 1


def test_a_whole_last_record_without_its_newline_is_kept(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "a", "prompt": "apple"}, {"id": "b", "prompt": "river"})
    assert run(capsys, "--batch", str(source), "-o", str(target))[0] == 0
    target.write_text(target.read_text().rstrip("\n"))  # an editor or a copy dropped the last newline
    members[:] = echoes()
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 0 and "0 of 0 answered" in err
    assert sorted(results(target)) == ["a", "b"] and target.read_text().endswith("}\n")


def test_jsonl_lines_end_at_newlines_only_and_a_bom_is_not_part_of_line_one(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    text = '\ufeff{"id": "a", "prompt": "apple\u2028pie"}\n{"id": "b", "prompt": "river\u0085bank"}\r\n'
    source.write_text(text, encoding="utf-8")
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 0, err
    got = results(target)
    assert sorted(got) == ["a", "b"] and got["a"]["text"].startswith("You said apple")


def test_an_error_quoting_a_lone_surrogate_is_still_written_as_json(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, '{"id": "a", "prompt": "apple", "\\udc80": 1}', {"id": "b", "prompt": "river"})
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
    assert code == 1 and "Traceback" not in err
    got = results(target)
    assert "unknown key" in got["a"]["error"] and got["b"]["text"].startswith("You said river")


@pytest.fixture
def loads(members, monkeypatch):
    """Whether ``specem run`` loaded its models."""
    loaded: list[bool] = []
    original = Ensemble.from_config

    def from_config(cls, config=None, **overrides):
        loaded.append(True)
        return original.__func__(cls, config, **overrides)

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))
    return loaded


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("folder", "a folder"),
        ("missing/out.jsonl", "does not exist"),
        ("/dev/full", "not a regular file"),
        ("pipe", "not a regular file"),  # /dev/stdout into a pipe: read back to resume, it waited forever
    ],
)
def test_a_bad_out_is_one_line_before_any_model_loads(members, loads, capsys, tmp_path, monkeypatch, output, says):
    members += echoes()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    lines(tmp_path / "in.jsonl", {"id": "a", "prompt": "apple"})
    code, _, err = run(capsys, "--batch", "in.jsonl", "-o", output)
    assert code == 2 and says in err and err.count("\n") == 1 and not loads


def test_a_read_only_out_is_one_line_before_any_model_loads(members, loads, capsys, tmp_path):
    members += echoes()
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "out.jsonl").write_text("")
    lines(tmp_path / "in.jsonl", {"id": "a", "prompt": "apple"})
    with read_only(folder):
        code, _, err = run(capsys, "--batch", str(tmp_path / "in.jsonl"), "-o", str(folder / "out.jsonl"))
    assert code == 2 and "cannot be written" in err and err.count("\n") == 1 and not loads


@contextlib.contextmanager
def small_disk(folder: Path) -> Iterator[Path]:
    """A folder on a disk of 64 KiB that a test can fill (a tmpfs: root, as CI runs)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.fail("this test mounts a small tmpfs: run it as root (as CI does)")
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_disk_that_fills_mid_batch_is_one_line_and_out_keeps_whole_lines(members, capsys, tmp_path, monkeypatch):
    members += echoes()
    source = tmp_path / "in.jsonl"
    long = "x" * 5000  # each record takes pages of its own, so a full disk fails the next one
    lines(source, *({"id": word + long, "prompt": word} for word in ("apple", "river", "stone")))
    original = batch.Progress.tick

    with small_disk(tmp_path / "disk") as disk:

        def tick(self):
            original(self)
            if self.done == 1:  # the disk fills up after the first result
                with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
                    filler.write(b"x" * 200_000)

        monkeypatch.setattr(batch.Progress, "tick", tick)
        target = disk / "out.jsonl"
        code, _, err = run(capsys, "--batch", str(source), "-o", str(target))
        assert code == 1 and "the results cannot be written" in err and "Traceback" not in err
        assert err.count("\n") == 1
        [record] = [json.loads(x) for x in target.read_text().splitlines()]
        assert record["text"].startswith("You said")


def test_the_commands_think_reaches_a_line_with_its_own_schema(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    schema = {"type": "string", "enum": ["apple", "river"]}
    lines(source, {"id": "a", "prompt": "apple", "schema": schema})
    assert run(capsys, "--batch", str(source), "-o", str(target), "--think", "24", "--max-tokens", "120")[0] == 0
    assert results(target)["a"]["reasoning"].startswith("You said apple")
    members[:] = echoes()
    assert run(capsys, "--batch", str(source), "-o", str(tmp_path / "plain.jsonl"))[0] == 0
    assert "reasoning" not in results(tmp_path / "plain.jsonl")["a"]


def test_batch_answers_are_recorded_in_the_history_unless_told_not_to(members, capsys, tmp_path):
    members += echoes()
    source = tmp_path / "in.jsonl"
    lines(source, {"id": "a", "prompt": "apple"}, {"id": "b", "messages": [{"role": "user", "content": "river"}]})
    assert run(capsys, "--batch", str(source), "-o", str(tmp_path / "out.jsonl"))[0] == 0
    chats = History().chats()
    assert sorted(c.title for c in chats) == ["apple", "river"] and all(c.origin == "run" for c in chats)
    [chat] = [c for c in chats if c.title == "apple"]
    assert History().load(chat.id).turns[-1].content.startswith("You said apple")
    members[:] = echoes()
    assert run(capsys, "--batch", str(source), "-o", str(tmp_path / "again.jsonl"), "--no-log")[0] == 0
    assert len(History().chats()) == 2
