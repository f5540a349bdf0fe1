"""The Responses API's way back as plain functions (no server, no models): the ``response``
object in each state, its output items (reasoning, message, function calls, an MCP loop's
``mcp_list_tools`` and ``mcp_call``), and the stream's events in order with their numbers and
indices. The same through the ``openai`` client against a live server: test_responses_routes.py
and test_mcp_routes.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from specem_local.engine import ToolCall, ToolReply
from specem_local.events import StartEvent
from specem_local.mcp import Offered
from specem_local.server import responses_format as rf
from specem_local.server import responses_output as ro
from specem_local.server.replies import Piece, Whole
from specem_local.server.responses_mcp import McpServer
from tests.server.test_replies import final_of, round_of

START = StartEvent(("a", "b"), ("a", "b"), {"a": 0.5, "b": 0.5}, {"a": 12, "b": 15}, False)
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
NOW = Offered("weather__now", "weather", "now", {"type": "function", "function": {"name": "weather__now",
              "description": "The time there", "parameters": {"type": "object"}}})  # fmt: skip
SERVER = McpServer("weather", (NOW,))


def request(**fields: Any) -> rf.Request:
    servers = [SERVER, McpServer("broken", (), "the MCP server 'broken' did not start: no such command")]
    return rf.parse_request({"model": "specem", "input": "Weather in Zürich?", **fields}, servers=servers)


def mcp_request() -> rf.Request:
    servers = [{"type": "mcp", "server_label": "weather"}, {"type": "mcp", "server_label": "broken"}]
    return request(tools=[WEATHER, *servers])


def test_a_response_in_progress_then_completed_or_incomplete_with_the_usage_of_every_answer():
    asked = request(temperature=0.2, metadata={"k": "v"})
    shown = ro.response(asked, None, None, [])
    assert shown == {
        "id": asked.id, "object": "response", "created_at": asked.created, "status": "in_progress",
        "model": "specem", "output": [], "error": None, "incomplete_details": None, "parallel_tool_calls": True,
        "tool_choice": "auto", "previous_response_id": None, "store": True, "instructions": None,
        "temperature": 0.2, "top_p": None, "max_output_tokens": None, "metadata": {"k": "v"}, "max_tool_calls": None,
        "tools": [], "text": {"format": {"type": "text"}}, "truncation": "disabled",
    }  # fmt: skip
    final = dataclasses.replace(final_of("Sunny."), reasoning_tokens=4)
    done = ro.response(asked, START, final, [{"type": "message"}])
    assert done["status"] == "completed" and done["output"] == [{"type": "message"}]
    assert done["usage"] == {
        "input_tokens": 15, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 24,
    }  # fmt: skip
    assert done["x_specem"]["wins"] == {"a": 3} and "answers" not in done["x_specem"]
    start = dataclasses.replace(START, absent={"c": "its file is missing"}, notes=("approximate",))
    facts = ro.response(asked, start, final, [])["x_specem"]
    assert facts["absent"] == {"c": "its file is missing"} and facts["notes"] == ["approximate"]
    earlier = Whole(dataclasses.replace(START, prompt_tokens={"a": 30}), dataclasses.replace(final, tokens=5))
    looped = ro.response(asked, START, final, [], [earlier, earlier])
    assert looped["usage"]["input_tokens"] == 15 + 30 + 30 and looped["usage"]["output_tokens"] == 9 + 5 + 5
    assert looped["usage"]["output_tokens_details"] == {"reasoning_tokens": 12} and looped["x_specem"]["answers"] == 3
    assert looped["usage"]["total_tokens"] == 75 + 19
    stopped = ro.response(asked, START, final_of("x", "cancelled"), [])  # the server stopped it
    assert (stopped["status"], stopped["incomplete_details"]) == ("cancelled", None)
    for finish, status in (("length", "incomplete"), ("context", "incomplete"), ("stop", "completed")):
        cut = ro.response(asked, START, final_of("x", finish), [])
        reason = {"reason": "max_output_tokens"} if status == "incomplete" else None
        assert (cut["status"], cut["incomplete_details"]) == (status, reason)


def test_a_whole_answers_items_are_its_reasoning_then_its_calls_or_its_message():
    thought = dataclasses.replace(final_of("Sunny."), reasoning="Look outside.")
    [reasoning, message] = ro.output_items(Whole(START, thought), tools=False)
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_") and len(reasoning["id"]) == 35
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Look outside."}]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Look outside."}]
    assert message == {"type": "message", "id": message["id"], "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]}  # fmt: skip
    assert message["id"].startswith("msg_") and len(message["id"]) == 36
    [empty] = ro.output_items(Whole(START, final_of("")), tools=False)  # nothing said: an empty message still
    assert empty["content"] == [{"type": "output_text", "text": "", "annotations": []}]
    calls = (ToolCall("get_weather", {"city": "Zürich"}, "call_1"), ToolCall("weather__now", {}, "call_2"))
    ran = [{"type": "mcp_call", "id": "mcp_2"}]
    items = ro.output_items(Whole(START, final_of("{}", parsed=ToolReply(calls))), True, ran, {"weather__now"})
    assert items == [ran[0], {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
                              "arguments": '{"city": "Zürich"}', "status": "completed"}]  # fmt: skip


def test_each_mcp_server_opted_in_is_listed_with_its_tools_or_why_it_has_none():
    listed = ro.mcp_list_items(mcp_request())
    assert [item["id"][:5] for item in listed] == ["mcpl_", "mcpl_"] and len(listed[0]["id"]) == 37
    assert [{k: v for k, v in item.items() if k != "id"} for item in listed] == [
        {"type": "mcp_list_tools", "server_label": "weather", "error": None,
         "tools": [{"name": "now", "description": "The time there", "input_schema": {"type": "object"},
                    "annotations": None}]},
        {"type": "mcp_list_tools", "server_label": "broken", "tools": [],
         "error": "the MCP server 'broken' did not start: no such command"},
    ]  # fmt: skip
    bare = Offered("x__y", "x", "y", {"type": "function", "function": {"name": "x__y", "description": ""}})
    quiet = dataclasses.replace(mcp_request(), mcp=(McpServer("x", (bare,)),))
    assert ro.mcp_list_items(quiet)[0]["tools"] == [
        {"name": "y", "description": None, "input_schema": None, "annotations": None}
    ]


@pytest.mark.parametrize(
    ("result", "output", "error", "status"),
    [
        ("12:00", "12:00", None, "completed"),
        ("error: the call timed out", None,
         {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "the call timed out"}]}, "failed"),
        (None, None, None, "incomplete"),  # not run: the answer was cut
    ],
)  # fmt: skip
def test_an_mcp_call_is_its_result_or_the_error_it_ended_in(result, output, error, status):
    item = ro.mcp_call_item(NOW, ToolCall("weather__now", {"city": "Zürich"}, "call_7"), result)
    assert item == {"type": "mcp_call", "id": "mcp_7", "server_label": "weather", "name": "now",
                    "arguments": '{"city": "Zürich"}', "output": output, "error": error, "status": status}  # fmt: skip


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"].removeprefix("response.") for event in events]


def test_a_stream_is_numbered_each_item_added_written_and_done_in_order():
    writer = ro.Events(request(tools=[WEATHER]))
    said = list(writer.started())
    said += writer.piece(Piece(round_of("Hmm", 1, "reasoning"), reasoning="Hmm"))
    said += writer.piece(Piece(round_of(".", 2, "reasoning"), reasoning="."))
    said += writer.piece(Piece(round_of("It is", 3), text="It is"))
    said += writer.piece(Piece(round_of(" sunny", 4), text=" sunny"))
    call = ToolCall("get_weather", {"city": "Zürich"}, "call_9")
    said += writer.piece(Piece(round_of("{}", 5), calls=((0, call),)))
    said += writer.ended(START, final_of("x"))
    assert [event["sequence_number"] for event in said] == list(range(1, len(said) + 1))
    assert kinds(said) == [
        "created", "in_progress",
        "output_item.added", "reasoning_text.delta", "reasoning_text.delta", "reasoning_text.done", "output_item.done",
        "output_item.added", "content_part.added", "output_text.delta", "output_text.delta", "output_text.done",
        "content_part.done", "output_item.done",
        "output_item.added", "function_call_arguments.delta", "function_call_arguments.done", "output_item.done",
        "completed",
    ]  # fmt: skip
    assert said[0]["response"]["status"] == "in_progress" and said[1]["response"] == said[0]["response"]
    thought_id = said[2]["item"]["id"]
    assert thought_id.startswith("rs_") and len(thought_id) == 35 and said[6]["item"]["id"] == thought_id
    assert said[2]["item"] == {"type": "reasoning", "id": thought_id, "summary": []} and said[2]["output_index"] == 0
    assert said[3] == {"type": "response.reasoning_text.delta", "sequence_number": 4, "item_id": thought_id,
                       "output_index": 0, "content_index": 0, "delta": "Hmm"}  # fmt: skip
    assert said[5] == {"type": "response.reasoning_text.done", "sequence_number": 6, "item_id": thought_id,
                       "output_index": 0, "content_index": 0, "text": "Hmm."}  # fmt: skip
    assert said[6]["item"]["content"] == [{"type": "reasoning_text", "text": "Hmm."}] and said[6]["output_index"] == 0
    message_id = said[7]["item"]["id"]
    assert message_id.startswith("msg_") and said[7]["output_index"] == 1
    assert said[7]["item"] == {"type": "message", "id": message_id, "status": "in_progress", "role": "assistant",
                               "content": []}  # fmt: skip
    assert said[8] == {"type": "response.content_part.added", "sequence_number": 9, "item_id": message_id,
                       "output_index": 1, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}  # fmt: skip
    assert said[9] == {"type": "response.output_text.delta", "sequence_number": 10, "item_id": message_id,
                       "output_index": 1, "content_index": 0, "delta": "It is", "logprobs": []}  # fmt: skip
    assert said[11] == {"type": "response.output_text.done", "sequence_number": 12, "item_id": message_id,
                        "output_index": 1, "content_index": 0, "text": "It is sunny", "logprobs": []}  # fmt: skip
    assert said[12]["part"] == {"type": "output_text", "text": "It is sunny", "annotations": []}
    assert (said[12]["item_id"], said[12]["output_index"], said[12]["content_index"]) == (message_id, 1, 0)
    assert said[13]["item"]["content"][0]["text"] == "It is sunny" and said[13]["item"]["status"] == "completed"
    assert said[13]["item"]["id"] == message_id
    added, delta, done, item_done = said[14:18]
    assert added["output_index"] == 2 and added["item"] == {"type": "function_call", "id": "fc_9",
        "call_id": "call_9", "name": "get_weather", "arguments": "", "status": "in_progress"}  # fmt: skip
    assert delta == {"type": "response.function_call_arguments.delta", "sequence_number": 16, "item_id": "fc_9",
                     "output_index": 2, "delta": '{"city": "Zürich"}'}  # fmt: skip
    assert done == {"type": "response.function_call_arguments.done", "sequence_number": 17, "item_id": "fc_9",
                    "output_index": 2, "name": "get_weather", "arguments": '{"city": "Zürich"}'}  # fmt: skip
    assert item_done["item"]["status"] == "completed" and item_done["output_index"] == 2
    completed = said[-1]["response"]
    assert completed["status"] == "completed" and [i["type"] for i in completed["output"]] == [
        "reasoning", "message", "function_call"]  # fmt: skip
    assert completed["usage"]["input_tokens"] == 15


def test_a_stream_that_wrote_nothing_ends_with_an_empty_message_unless_it_had_tools_and_a_cut_one_is_incomplete():
    bare = ro.Events(request())
    said = [*bare.started(), *bare.ended(START, final_of("", "length"))]
    assert kinds(said) == ["created", "in_progress", "output_item.added", "content_part.added", "output_text.delta",
                           "output_text.done", "content_part.done", "output_item.done", "incomplete"]  # fmt: skip
    assert said[-1]["response"]["output"][0]["content"] == [{"type": "output_text", "text": "", "annotations": []}]
    spoke = ro.Events(request())
    said = [*spoke.started(), *spoke.piece(Piece(round_of("Hi", 1), text="Hi")), *spoke.ended(START, final_of("Hi"))]
    assert kinds(said)[-5:] == ["output_text.delta", "output_text.done", "content_part.done", "output_item.done",
                                "completed"]  # fmt: skip
    assert [item["content"][0]["text"] for item in said[-1]["response"]["output"]] == ["Hi"]  # no empty one after
    stopped = ro.Events(request())
    said = [*stopped.started(), *stopped.ended(START, final_of("Hi", "cancelled"))]
    assert said[-1]["type"] == "response.incomplete" and said[-1]["response"]["status"] == "cancelled"
    tooled = ro.Events(request(tools=[WEATHER]))
    said = [*tooled.started(), *tooled.ended(START, final_of(""))]
    assert kinds(said) == ["created", "in_progress", "completed"] and said[-1]["response"]["output"] == []


def test_an_mcp_loop_lists_its_servers_skips_the_calls_it_runs_and_counts_every_answer():
    asked = mcp_request()
    writer = ro.Events(asked)
    said = list(writer.started())
    assert kinds(said) == ["created", "in_progress", "output_item.added", "output_item.done",
                           "output_item.added", "output_item.done"]  # fmt: skip
    assert [e["output_index"] for e in said[2:]] == [0, 0, 1, 1] and said[2]["item"] == said[3]["item"]
    assert said[2]["item"]["type"] == "mcp_list_tools" and said[4]["item"]["server_label"] == "broken"
    said += writer.piece(Piece(round_of("Let me see", 1), text="Let me see"))
    ran = ToolCall("weather__now", {}, "call_3")
    assert list(writer.piece(Piece(round_of("{}", 2), calls=((0, ran),)))) == []  # the server runs it
    beside = ro.Events(asked)
    theirs = ToolCall("get_weather", {}, "call_4")
    both = list(beside.piece(Piece(round_of("{}", 1), calls=((0, ran), (1, theirs)))))
    assert [e["item"]["id"] for e in both if e["type"] == "response.output_item.done"] == ["fc_4"]  # the client's
    first = Whole(START, final_of("{}", parsed=ToolReply((ran,))))
    result = ro.mcp_call_item(NOW, ran, "12:00")
    answered = list(writer.answered(first, [result]))
    assert kinds(answered) == ["output_text.done", "content_part.done", "output_item.done",
                               "output_item.added", "output_item.done"]  # fmt: skip
    assert answered[3]["output_index"] == 3 and answered[3]["item"] == result
    ended = list(writer.ended(START, final_of("Noon.")))
    assert kinds(ended) == ["completed"]  # a message was written: no empty one added
    shown = ended[0]["response"]
    assert [i["type"] for i in shown["output"]] == ["mcp_list_tools", "mcp_list_tools", "message", "mcp_call"]
    assert shown["x_specem"]["answers"] == 2 and shown["usage"]["output_tokens"] == 18
    assert [e["sequence_number"] for e in said + answered + ended] == list(range(1, 16))


@pytest.mark.parametrize(("finish", "kept"), [("eos", True), ("length", True), ("cancelled", False)])
def test_a_streamed_response_is_kept_for_later_unless_the_server_stopped_it(finish, kept):
    import asyncio

    from specem_local.server import writers

    async def answer():
        for event in (START, round_of("Hi", 1), final_of("Hi", finish)):
            yield event

    async def written():
        return [shown async for shown in writers.response_events(request(), answer(), keeping.append)]

    keeping: list[list[dict[str, Any]]] = []
    said = asyncio.run(written())
    assert (len(keeping) == 1) is kept and said[-1]["event"] == ("response.incomplete" if finish != "eos" else
                                                                 "response.completed")  # fmt: skip


def test_a_streamed_response_that_fails_after_it_began_ends_with_an_error_event_in_its_words():
    import asyncio

    from specem_local.errors import NoMemberLeft
    from specem_local.server import writers

    async def answer():
        yield START
        yield round_of("Grüß", 1)
        raise NoMemberLeft("every member was lost")  # a 503: said as the answer's failure

    async def written():
        return [shown async for shown in writers.response_events(request(instructions="Grüß"), answer(),
                                                                   keeping.append)]  # fmt: skip

    keeping: list[list[dict[str, Any]]] = []
    said = asyncio.run(written())
    assert '"instructions": "Grüß"' in said[0]["data"] and '"delta": "Grüß"' in "".join(s["data"] for s in said)
    failed = json.loads(said[-1]["data"])
    assert said[-1]["event"] == "error" and keeping == []
    assert failed == {"type": "error", "code": None, "param": None, "sequence_number": failed["sequence_number"],
                      "message": "the answer failed: every member was lost"}  # fmt: skip
    assert failed["sequence_number"] == json.loads(said[-2]["data"])["sequence_number"] + 1
