"""Kept records read back to the letter (``events.event_from_dict``, ``chat_files.chat_from_json``):
what is read, what is refused, and each refusal's words, so that a damaged history names what is
wrong with it and a record kept by an older version is still read."""

from __future__ import annotations

import datetime
import json

import pytest

from specem_local.engine.prompting import Message, ToolUse
from specem_local.errors import SettingError
from specem_local.events import event_from_dict
from specem_local.storage import chat_files
from specem_local.storage.chat_files import LAST_MOMENT, chat_from_json, read_chat_file
from tests.storage.test_history_hostile import a_round, chat_file

LONG = 10**45  # a number whose text is longer than any refusal shows of it


def token(**changed) -> dict:
    return {"token": "a", "logprob": -0.1, "bytes": [97], "top": [], **changed}


def refusal(rounds: list) -> str:
    with pytest.raises(ValueError) as caught:
        chat_from_json(chat_file("c", rounds))
    return str(caught.value)


def test_an_alternative_kept_before_bytes_were_gets_the_bytes_of_its_text():
    [read] = event_from_dict(a_round(logprobs=[token(top=[["é", -0.5], ["\ud800", -1.0]])])).logprobs
    assert read.top == (("é", -0.5, (195, 169)), ("\ud800", -1.0, (63,)))  # half a surrogate: a "?"


@pytest.mark.parametrize("byte", [0, 255])
def test_bytes_from_0_to_255_are_read(byte):
    [read] = event_from_dict(a_round(logprobs=[token(bytes=[byte], top=[["a", -0.1, [byte]]])])).logprobs
    assert read.bytes == (byte,) and read.top[0][2] == (byte,)


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        ({"bytes": [256]}, "a token's bytes are numbers from 0 to 255, not 256"),
        ({"bytes": [-1]}, "a token's bytes are numbers from 0 to 255, not -1"),
        ({"bytes": [True]}, "a token's bytes are numbers from 0 to 255, not True"),
        ({"bytes": [LONG]}, f"a token's bytes are numbers from 0 to 255, not {str(LONG)[:40]}"),
        ({"top": [["a", float("inf"), [97]]]}, "a log-probability is a finite number, not inf"),
        ({"top": [["a", "x", [97]]]}, "a log-probability is a finite number, not x"),
        ({"top": [["a", -0.1, 5]]}, "a token record is not one ('int' object is not iterable)"),
        ({"top": [[5, -0.1]]}, "a token's alternative is [text, logprob, bytes], not [5, -0.1]"),
    ],
)
def test_a_token_record_that_is_none_says_what_is_wrong(changed, said):
    assert refusal([a_round(logprobs=[token(**changed)])]) == said


def test_a_record_of_no_known_type_shows_its_first_60_characters():
    record = {"type": "x", "note": "y" * 100}
    with pytest.raises(ValueError) as caught:
        event_from_dict(record)
    assert str(caught.value) == f"not an event record: {str(record)[:60]}"


def test_a_chat_file_is_read_with_its_times_and_title_or_refused_in_its_words():
    chat = chat_from_json({**chat_file("c", []), "created": 0, "updated": LAST_MOMENT})
    assert (chat.created, chat.updated, chat.title) == (0, LAST_MOMENT, "c")
    untitled = {key: value for key, value in chat_file("c", []).items() if key != "title"}
    assert chat_from_json(untitled).title == "Chat"
    with pytest.raises(ValueError, match="before the year 10000"):
        chat_from_json({**chat_file("c", []), "updated": LAST_MOMENT + 1})
    with pytest.raises(ValueError) as caught:
        chat_from_json({**chat_file("c", []), "turns": {}})
    assert str(caught.value) == "not a chat file (no id, or turns that are not a list)"
    turns = [{"role": "robot", "content": "x"}]
    with pytest.raises(ValueError) as caught:
        chat_from_json({**chat_file("c", []), "turns": turns})
    assert str(caught.value) == f"not a turn: {str(turns[0])[:60]}"
    for bad in ({"kind": 3}, {"alternatives": {}}):
        with pytest.raises(ValueError, match="a turn's kind must be text and its alternatives a list"):
            chat_from_json({**chat_file("c", []), "turns": [{"role": "user", "content": "x", **bad}]})
    final_as_round = {"role": "assistant", "content": "a", "final": a_round()}
    with pytest.raises(ValueError) as caught:
        chat_from_json({**chat_file("c", []), "turns": [final_as_round]})
    assert str(caught.value) == "a turn's rounds and final record are of the wrong type"


def test_a_chat_file_of_the_largest_size_is_read_and_one_byte_more_is_not(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(chat_file("c", [])))
    monkeypatch.setattr(chat_files, "MAX_CHAT_FILE", path.stat().st_size)
    assert read_chat_file(path).id == "c"
    monkeypatch.setattr(chat_files, "MAX_CHAT_FILE", path.stat().st_size - 1)
    with pytest.raises(ValueError, match="not a regular file of at most"):
        read_chat_file(path)


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (lambda: Message("assistant", "a\ud800"), "a assistant message is not valid Unicode text (a lone surrogate at "
         "character 1)"),
        (lambda: Message("assistant", "\ud800", calls=(ToolUse("f", {}),)), "a assistant message is not valid "
         "Unicode text (a lone surrogate at character 0)"),
        (lambda: Message("tool", "ok", name="f\ud800"), "a tool tool name is not valid Unicode text (a lone "
         "surrogate at character 1)"),
        (lambda: Message("assistant", "", calls=(ToolUse("f", {"x": "\ud800", "when": datetime.date(2026, 1, 2)}),)),
         "a assistant tool call's arguments is not valid Unicode text (a lone surrogate at character 7)"),
        (lambda: Message("assistant", "", calls=(ToolUse("f", {}, id="c\ud800"),)), "a assistant tool call id is "
         "not valid Unicode text (a lone surrogate at character 1)"),
        (lambda: Message("user", 5), "a user message's content must be text, got int"),  # type: ignore[arg-type]
        (lambda: Message("robot", "x"), "message role must be one of system, user, assistant, tool; got 'robot'"),
    ],
)  # fmt: skip
def test_a_message_that_is_no_prompt_text_says_which_part_and_where(message, said):
    with pytest.raises(SettingError) as caught:
        message()
    assert (str(caught.value), caught.value.field) == (said + ("; decode its bytes with errors='replace'" if
                                                               "Unicode" in said else ""), "messages")  # fmt: skip


def test_a_calls_arguments_that_are_not_json_are_read_as_their_text():
    Message("assistant", "", calls=(ToolUse("f", {"when": datetime.date(2026, 1, 2), "ü": "é"}),))  # no error


@pytest.mark.parametrize(
    ("origin", "answers", "items", "choices", "said"),
    [
        ("built-in", 0, 20, 0, "the built-in calibration (20 items)"),
        ("built-in", 0, 20, 14, "the built-in calibration (20 items) and 14 of your choices"),
        ("calibrated", 0, 20, 0, "calibrated on 20 items"),
        ("calibrated", 1, 20, 0, "calibrated on 20 items, then 1 answer"),
        ("calibrated", 3, 20, 2, "calibrated on 20 items, then 3 answers and 2 of your choices"),
        ("carried", 3, 0, 0, "carried over from 3 answers"),
        ("carried", 1, 0, 1, "carried over from 1 answer and 1 of your choices"),
        ("task", 0, 40, 0, "the task's weights, fitted on 40 labelled items"),
        ("task", 0, 0, 0, "the task's weights (no labels)"),
        ("uniform", 0, 0, 0, "every source equally (no weights kept for the task)"),
        ("prior", 0, 0, 0, "the prior"),
        ("prior", 0, 0, 5, "the prior and 5 of your choices"),
    ],
)
def test_where_the_weights_came_from_is_said_in_words(origin, answers, items, choices, said):
    from specem_local.events import origin_words

    assert origin_words(origin, answers, items, choices) == said
    if not choices:
        assert origin_words(origin, answers, items) == said  # none of your choices unless said
