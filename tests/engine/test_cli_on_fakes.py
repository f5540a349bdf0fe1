"""``specem run`` in-process on fake members (issue 44: behaviours the issues demanded that no
test held): ``--format json``, ``--grammar FILE`` (Lark and GBNF), ``--regex``, the line that
says a member left the answer, and the same line in the history's export. The fakes write
prose, so only the format makes the printed answer what it is."""

from __future__ import annotations

import json

import pytest

from specem_local.commands.cli import main
from specem_local.engine import Ensemble
from specem_local.storage.chat_files import chat_markdown
from specem_local.storage.history import History
from tests.engine.conftest import fake_ensemble, fake_member
from tests.engine.test_lost_members import LoseAt

PROSE = "Well, the answer is yes, I think."


@pytest.fixture
def members(monkeypatch, tmp_path):
    """The ensemble ``specem run`` loads: whatever the test puts in the list."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    chosen: list = []

    def from_config(cls, config=None, **overrides):
        return fake_ensemble(*chosen, **{k: v for k, v in overrides.items() if v is not None})

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))
    return chosen


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["run", "--max-tokens", "60", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_format_json_prints_a_json_object_alone(members, capsys):
    members += [fake_member("a", PROSE), fake_member("b", '{"answer": "yes"} and then more words', runner_up="}",
                                                     n_params=3000)]  # fmt: skip
    code, out, err = run(capsys, "--format", "json", "Yes or no?")
    assert code == 0, err
    assert json.loads(out) == {"answer": "yes"} and out.count("\n") == 1  # the format ended it after the object


@pytest.mark.parametrize("grammar", ['start: "yes" | "no"\n', 'root ::= "yes" | "no"\n'], ids=["lark", "gbnf"])
def test_a_grammar_file_lark_or_gbnf_shapes_the_answer(members, capsys, tmp_path, grammar):
    members += [fake_member("a", PROSE), fake_member("b", "no, never")]
    path = tmp_path / "answer.grammar"
    path.write_text(grammar)
    code, out, err = run(capsys, "--grammar", str(path), "Yes or no?")
    assert code == 0, err
    assert out.strip() in ("yes", "no")


def test_a_regex_shapes_the_answer(members, capsys):
    members += [fake_member("a", "forty-two, of course"), fake_member("b", "42 it is")]
    code, out, err = run(capsys, "--regex", "[0-9]{2}", "Six times seven?")
    assert code == 0, err
    assert out.strip() == "42"


def test_a_member_that_leaves_the_answer_is_said_in_run_and_in_the_export(members, capsys):
    members += [
        fake_member("a", PROSE, on_decode=LoseAt(6)),
        fake_member("b", PROSE, words=[" answer"]),
        fake_member("c", PROSE, words=[" think"]),
    ]
    code, out, err = run(capsys, "--no-model-exit", "Is it?")
    assert code == 0, err
    assert out.strip() == PROSE  # the others finished it
    said = [line for line in err.splitlines() if "left the answer" in line]
    assert len(said) == 1 and said[0].startswith("[a left the answer: ")
    [chat] = History().chats()
    exported = chat_markdown(History().load(chat.id))
    assert "*a left the answer: " in exported
