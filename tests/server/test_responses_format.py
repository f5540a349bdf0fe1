"""The Responses API's request read as the ensemble's ask, as plain functions (issue 57): the
cases the routes' tests leave to the parser, each a 400 naming its field where it is wrong."""

from __future__ import annotations

import dataclasses

import pytest

from specem_local.mcp import Offered
from specem_local.server import responses_format as rf
from specem_local.server.errors import ApiError
from specem_local.server.responses_mcp import McpServer

CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


def test_function_calls_in_a_row_are_one_assistant_turn_and_a_later_turn_a_new_one():
    items = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "call twice"},
        CALL,
        {**CALL, "call_id": "c2"},
    ]
    messages = rf.messages_of(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert [call["id"] for call in messages[-1]["tool_calls"]] == ["c1", "c2"] and "tool_calls" not in messages[1]


@pytest.mark.parametrize("role", [["user"], 3, None, "robot"])
def test_a_message_whose_role_is_not_one_of_the_four_is_a_400_naming_it(role):
    with pytest.raises(ApiError) as caught:
        rf.messages_of([{"role": "user", "content": "a"}, {"type": "message", "role": role, "content": "b"}])
    assert caught.value.status == 400 and caught.value.param == "input[1].role"


def test_tool_choice_names_a_function_or_an_mcp_servers_tool_or_requires_a_call():
    weather = Offered("weather__now", "weather", "now", {"type": "function", "function": {"name": "weather__now"}})
    servers = [McpServer("weather", (weather,))]
    assert rf._tool_choice({"type": "function", "name": "f"}, servers) == {
        "type": "function",
        "function": {"name": "f"},
    }
    assert rf._tool_choice({"type": "mcp", "server_label": "weather"}, servers) == "required"
    chosen = rf._tool_choice({"type": "mcp", "server_label": "weather", "name": "now"}, servers)
    assert chosen == {"type": "function", "function": {"name": "weather__now"}}
    for choice in ({"type": "mcp", "server_label": "other"}, {"type": "mcp", "server_label": "weather", "name": "x"}):
        with pytest.raises(ApiError) as caught:
            rf._tool_choice(choice, servers)
        assert caught.value.status == 400 and caught.value.param == "tool_choice"
    assert rf._tool_choice("auto", servers) == "auto"
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}
    served = 'give "auto", "required", "none", a function ({"type": "function", "name": ...}) or an MCP server\'s tool'
    refusals = ((allowed, "tool_choice of type 'allowed_tools' is not served: offer only those tools"),
                ({"type": "file_search"}, f"tool_choice of type 'file_search' is not served: {served}"))  # fmt: skip
    for choice, said in refusals:
        with pytest.raises(ApiError) as caught:
            rf._tool_choice(choice, servers)
        assert caught.value.message.startswith(said) and caught.value.param == "tool_choice"


@pytest.mark.parametrize("key", ["server_url", "connector_id", "tunnel_id"])
def test_a_remote_mcp_server_is_a_400_naming_the_field(key):
    body = {"tools": [{"type": "mcp", "server_label": "weather", key: "https://example.com"}]}
    with pytest.raises(ApiError) as caught:
        rf._tools(body, None, [McpServer("weather")])
    assert caught.value.param == f"tools[0].{key}" and "remote MCP servers" in caught.value.message


def test_tools_that_are_not_a_list_or_come_with_a_text_format_are_a_400_naming_the_field():
    with pytest.raises(ApiError) as caught:
        rf._tools({"tools": {"type": "function"}}, None)
    assert (caught.value.param, caught.value.message) == ("tools", "tools must be a list")
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    with pytest.raises(ApiError) as caught:
        rf._tools({"tools": [tool]}, rf.FormatAsk(json=True))
    assert (caught.value.param, caught.value.message) == ("text.format", "give tools or text.format, not both")


def test_truncation_drops_the_oldest_exchange_and_keeps_the_instructions():
    system, first, answered = (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
    )
    result, second = {"role": "tool", "tool_call_id": "c", "content": "r"}, {"role": "user", "content": "2"}
    ask = rf.parse_request({"model": "specem", "input": "x"}).ask
    shorter = rf.truncated(dataclasses.replace(ask, prompt=[system, first, answered, result, second]))
    assert shorter is not None and shorter.prompt == [system, second] and shorter.settings == ask.settings
    assert rf.truncated(dataclasses.replace(ask, prompt=[system, first, answered, result])) is None
