"""The stored responses' plain parts (``server/kept.py``): ids given to items sent without one,
items listed in OpenAI's shapes, a page of them with each refusal said exactly, and the store
itself, in the history database (read back by another process) or in memory (the last
``MEMORY``), a history that cannot be written costing only the record."""

from __future__ import annotations

import logging
import re

import pytest

from specem_local.server.errors import ApiError
from specem_local.server.kept import KeptResponses, input_page, listed, with_ids
from specem_local.storage.history import History

ITEMS = [{"id": f"msg_{n}", "type": "message", "role": "user", "content": f"q{n}"} for n in range(5)]


def test_items_without_an_id_are_given_one_of_their_types_prefix():
    given = with_ids([{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c"},
                      {"type": "function_call_output", "call_id": "c"}, {"type": "reasoning"}, {"type": "mcp_call"},
                      {"id": "mine", "type": "message"}, {"id": "", "type": "message"}])  # fmt: skip
    prefixes = ["msg_", "fc_", "fco_", "rs_", "item_", None, "msg_"]
    for item, prefix in zip(given, prefixes):
        if prefix is None:
            assert item["id"] == "mine"
        else:
            assert re.fullmatch(re.escape(prefix) + "[0-9a-f]{32}", item["id"]), item
    assert given[0] == {"id": given[0]["id"], "role": "user", "content": "hi"}  # nothing else changes
    assert list(given[0]) == ["role", "content", "id"]
    assert len({item["id"] for item in given}) == len(given)


def test_a_message_is_listed_with_its_text_as_parts_and_other_items_as_they_are():
    assert listed({"id": "m", "role": "user", "content": "hi"}) == {
        "id": "m", "role": "user", "type": "message", "content": [{"type": "input_text", "text": "hi"}],
        "status": "completed"}  # fmt: skip
    assert listed({"id": "m", "type": "message", "role": "assistant", "content": "yes", "status": "incomplete"}) == {
        "id": "m", "type": "message", "role": "assistant", "status": "incomplete",
        "content": [{"type": "output_text", "text": "yes", "annotations": []}]}  # fmt: skip
    parts = [{"type": "input_text", "text": "hi"}]
    assert listed({"id": "m", "role": "system", "content": parts})["content"] is parts
    call = {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert listed(call) is call


def test_a_page_of_items_newest_first_unless_asked_and_after_an_id():
    page = input_page(ITEMS, {})
    assert [item["id"] for item in page["data"]] == ["msg_4", "msg_3", "msg_2", "msg_1", "msg_0"]
    assert (page["object"], page["first_id"], page["last_id"], page["has_more"]) == ("list", "msg_4", "msg_0", False)
    first = input_page(ITEMS, {"order": "asc", "limit": "2"})
    assert [item["id"] for item in first["data"]] == ["msg_0", "msg_1"] and first["has_more"]
    then = input_page(ITEMS, {"order": "asc", "limit": "2", "after": "msg_1"})
    assert [item["id"] for item in then["data"]] == ["msg_2", "msg_3"] and then["has_more"]
    last = input_page(ITEMS, {"order": "asc", "limit": "2", "after": "msg_3"})
    assert [item["id"] for item in last["data"]] == ["msg_4"] and not last["has_more"]
    assert input_page(ITEMS, {"after": "msg_0"}) == {"object": "list", "data": [], "first_id": None,
                                                      "last_id": None, "has_more": False}  # fmt: skip
    assert len(input_page(ITEMS * 30, {"limit": "100"})["data"]) == 100
    assert len(input_page(ITEMS * 30, {})["data"]) == 20


@pytest.mark.parametrize(
    ("query", "param", "message"),
    [
        ({"limit": "0"}, "limit", "limit must be a whole number from 1 to 100, not '0'"),
        ({"limit": "101"}, "limit", "limit must be a whole number from 1 to 100, not '101'"),
        ({"limit": "ten"}, "limit", "limit must be a whole number from 1 to 100, not 'ten'"),
        ({"limit": "9" * 50}, "limit", f"limit must be a whole number from 1 to 100, not {'9' * 40!r}"),
        ({"order": "up"}, "order", "order must be 'asc' or 'desc', not 'up'"),
        ({"order": "u" * 50}, "order", f"order must be 'asc' or 'desc', not {'u' * 40!r}"),
        ({"after": "m" * 80}, "after", f"after: the response read no item with id {'m' * 60!r}"),
    ],
)
def test_each_bad_query_is_a_400_naming_it(query, param, message):
    with pytest.raises(ApiError) as caught:
        input_page(ITEMS, query)
    assert (caught.value.status, caught.value.param, caught.value.message) == (400, param, message)


SAID = {"id": "msg_9", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]}
RESPONSE = {"id": "resp_1", "object": "response", "output": [SAID]}


def test_a_response_kept_in_the_history_is_there_for_another_process(tmp_path):
    kept = KeptResponses(History(tmp_path / "specem.db", chat_files=tmp_path / "chats"))
    kept.keep(RESPONSE, [{"role": "user", "content": "q"}])
    assert not kept.memory
    items, response = History(tmp_path / "specem.db", chat_files=tmp_path / "chats").kept_response("resp_1")  # type: ignore[misc]
    assert response == RESPONSE and items[1:] == RESPONSE["output"] and items[0]["id"].startswith("msg_")
    assert kept.items("resp_1") == items


def test_a_history_that_cannot_be_written_keeps_the_response_in_memory_and_says_so(tmp_path, caplog):
    class Broken(History):
        def keep_response(self, *_args):
            raise OSError("disk full")

    kept = KeptResponses(Broken(tmp_path / "specem.db", chat_files=tmp_path / "chats"))
    with caplog.at_level(logging.WARNING, logger="specem_local.server.kept"):
        kept.keep(RESPONSE, [])
    assert caplog.messages == ["specem serve: warning: response resp_1 kept in memory only: disk full"]
    assert kept.items("resp_1") == RESPONSE["output"]


def test_memory_keeps_the_last_responses_only(monkeypatch):
    monkeypatch.setattr(KeptResponses, "MEMORY", 3)
    kept = KeptResponses(None)
    for number in range(5):
        kept.keep({**RESPONSE, "id": f"resp_{number}"}, [])
    assert list(kept.memory) == ["resp_2", "resp_3", "resp_4"]
    assert kept.items("resp_1") is None and kept.items("resp_4") == RESPONSE["output"]
