"""The history on what a hostile read gave it: chat files whose records have the wrong types (one
bad file must not stop every read), a pipe among the chat files (never read: it would block with
the database locked), chat ids that would be paths, a tool turn exported and imported again, a
log-probability that is not a number, and the default export name."""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

from specem_local.commands.cli import main
from specem_local.engine.drafted import Draft
from specem_local.engine.evidence import FLOOR, token_choices
from specem_local.errors import SpecemError
from specem_local.events import RoundEvent, event_from_dict
from specem_local.storage.chat_files import chat_from_json, chat_to_json
from specem_local.storage.chats import Chat, Turn
from specem_local.storage.history import History
from tests.engine.conftest import fake_ensemble, fake_member

TOKEN = {"token": "a", "logprob": -0.1, "bytes": [97], "top": [["a", -0.1, [97]]]}


def chat_file(chat_id: str, rounds: list) -> dict:
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "a", "rounds": rounds}]
    return {"version": 2, "id": chat_id, "title": chat_id, "created": 1.0, "updated": 2.0, "turns": turns}


def a_round(**changed) -> dict:
    """A round as the history keeps it (one answered by a fake member), with ``changed``."""
    with fake_ensemble(fake_member("m", "a"), max_tokens=4) as ensemble:
        event = next(e for e in ensemble.stream("Hi", logprobs=1) if isinstance(e, RoundEvent)).to_dict()
    assert isinstance(event_from_dict(event), RoundEvent)  # as it is, it is read
    return {**event, **changed}


@pytest.mark.parametrize(
    "rounds",
    [
        [{"type": []}],
        [{"type": {"round": 1}}],
        [a_round(logprobs=[{**TOKEN, "top": [5]}])],
        [a_round(logprobs=[{**TOKEN, "top": [[]]}])],
        [a_round(logprobs=[{**TOKEN, "top": [["a", None]]}])],
        [a_round(logprobs=[{**TOKEN, "top": [["a", -0.1, [300]]]}])],
        [a_round(logprobs=[{**TOKEN, "bytes": ["x"]}])],
    ],
)
def test_a_chat_file_of_the_wrong_types_is_left_out_and_the_rest_is_read(tmp_path, rounds):
    chats = tmp_path / "chats"
    chats.mkdir()
    (chats / "bad.json").write_text(json.dumps(chat_file("bad", rounds)))
    (chats / "good.json").write_text(json.dumps(chat_file("good", [])))
    history = History(tmp_path / "specem.db", chat_files=chats)
    assert [c.id for c in history.chats()] == ["good"]


@pytest.mark.timeout(30)
@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs")
def test_a_pipe_among_the_chat_files_is_never_read(tmp_path):
    chats = tmp_path / "chats"
    chats.mkdir()
    os.mkfifo(chats / "pipe.json")  # opened for reading, it would wait for a writer forever
    (chats / "good.json").write_text(json.dumps(chat_file("good", [])))
    assert [c.id for c in History(tmp_path / "specem.db", chat_files=chats).chats()] == ["good"]


@pytest.mark.parametrize("chat_id", ["x/../../escaped", "a\nb", "back\\slash", "", "x" * 201])
def test_a_chat_id_that_is_no_name_is_refused(chat_id):
    with pytest.raises(ValueError, match="a chat's id is 1 to 200 characters"):
        chat_from_json(chat_file(chat_id, []))


def test_a_tool_turn_exported_as_json_is_imported_again():
    turns = [Turn("user", "Weather?"), Turn("assistant", '{"tool_calls": []}'), Turn("tool", "sunny")]
    again = chat_from_json(chat_to_json(Chat("c1", "t", 1.0, 2.0, turns)))
    assert [t.role for t in again.turns] == ["user", "assistant", "tool"]


def test_a_logprob_from_a_row_of_infinities_is_the_floor_not_nan():
    row = np.array([np.inf, np.inf, 0.0])
    draft = Draft("a", False, [0], [row, row])
    [token] = token_choices(draft, 2, lambda t: bytes([97 + t]))
    assert token.logprob == FLOOR and all(lp == FLOOR for _, lp, _ in token.top)
    assert math.isfinite(json.loads(json.dumps(token.logprob)))


def test_the_default_export_name_holds_no_character_a_path_would_read(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    chats = tmp_path / "data" / "chats"
    chats.mkdir(parents=True)
    (chats / "odd.json").write_text(json.dumps(chat_file("my chat: ü?*", [])))
    monkeypatch.chdir(tmp_path)
    assert main(["history", "export", "my chat: ü?*"]) == 0
    assert [p.name for p in tmp_path.glob("specem-chat-*")] == ["specem-chat-my_chat__ü__.md"]
    assert capfd.readouterr().err == f"Exported to {tmp_path / 'specem-chat-my_chat__ü__.md'}\n"
    assert main(["history", "export", "my chat: ü?*", "--format", "json"]) == 0
    written = tmp_path / "specem-chat-my_chat__ü__.json"
    assert (
        json.loads(written.read_text())["id"] == "my chat: ü?*" and capfd.readouterr().err == f"Exported to {written}\n"
    )
    assert main(["history", "export", "my chat: ü?*", "-o", "-"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("# ") and err == "Exported to standard output\n"


def test_a_nul_in_a_search_separates_words(tmp_path):
    chats = tmp_path / "chats"
    chats.mkdir()
    data = chat_file("c", [])
    data["turns"][0]["content"] = "alpha and beta"
    (chats / "c.json").write_text(json.dumps(data))
    history = History(tmp_path / "specem.db", chat_files=chats)
    assert [m.chat_id for m in history.search("alpha\x00beta")] == ["c"]


def test_an_export_to_a_terminal_never_passes_a_titles_escape_codes(tmp_path, monkeypatch):
    import pty

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    chats = tmp_path / "data" / "chats"
    chats.mkdir(parents=True)
    (chats / "t.json").write_text(json.dumps({**chat_file("t", []), "title": "\x1b]0;pwned\x07"}))
    main_end, terminal = pty.openpty()
    try:
        assert main(["history", "export", "t", "-o", f"/dev/fd/{terminal}"]) == 0
        shown = os.read(main_end, 65536).decode()
    finally:
        os.close(main_end)
        os.close(terminal)
    assert "\x1b" not in shown and "\\x1b]0;pwned\\x07" in shown


def test_a_search_of_no_words_says_so(tmp_path):
    history = History(tmp_path / "specem.db", chat_files=tmp_path / "chats")
    for query in ("", "  ", "\x00"):
        with pytest.raises(SpecemError) as caught:
            history.search(query)
        assert str(caught.value) == "the search is empty; give a word to look for"
