"""MCP servers' tools from synchronous code (``specem_local.mcp``): a config in the common
``mcpServers`` shape, or a one-line ``SettingError``; each stdio server started, its tools
offered as the engine's tool specs, called with a timeout; a server that exits at once, one
that never answers and a command that does not exist are one line each and the rest goes on;
nothing left running after ``close()``. The servers are real processes (``tools_server.py``,
written with the SDK's MCPServer), started through a config that points at ``sys.executable``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from specem_local.engine import tools
from specem_local.engine.tools import NAME, tools_from
from specem_local.errors import SettingError
from specem_local.mcp import McpTools, listing, read_config, result_text
from specem_local.mcp.listing import MAX_RESULT, Listed, offered
from specem_local.mcp.listing import NAME as MCP_NAME
from tests.conftest import poll_until
from tests.mcp.servers import EXITS, HANGS, gone, marker, processes, python, tools_server, write_config

pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="the tests find the servers in /proc")

START = 6.0  # seconds a server may take to start here (a hanging one costs this)
CALL = 2.0  # seconds a call may take


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """One of each: the tools server, one that exits at once, one that never answers, and a
    command that does not exist; started once for the module's tests."""
    mark = marker()
    config = write_config(
        tmp_path_factory.mktemp("mcp") / "mcp.json",
        {
            "calc": tools_server(mark),
            "broken": python(EXITS, mark),
            "silent": python(HANGS, mark),
            "missing": {"command": "/no/such/program"},
        },
    )
    began = time.monotonic()
    with McpTools.start(config, start_seconds=START, call_seconds=CALL) as tools:
        tools.began = time.monotonic() - began  # type: ignore[attr-defined]
        running = processes(mark)
        yield tools
    poll_until(lambda: gone(running) and not processes(mark), 10, "the servers' processes to end")


# -- the config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not JSON"),
        ('{"servers": {}}', '"mcpServers"'),
        ('{"mcpServers": []}', '"mcpServers"'),
        ('{"mcpServers": {"web": {"url": "http://localhost:8000/mcp"}}}', "'web' is a url server"),
        ('{"mcpServers": {"web": {"type": "sse", "command": "x"}}}', "'web' is a sse server"),
        ('{"mcpServers": {"x": {"args": ["a"]}}}', "'x' has no \"command\""),
        ('{"mcpServers": {"x": {"command": ""}}}', "'x' has no \"command\""),
        ('{"mcpServers": {"x": "npx server"}}', "'x' must be an object"),
        ('{"mcpServers": {"x": {"command": "npx", "args": "-y server"}}}', '"args" must be a list of strings'),
        ('{"mcpServers": {"x": {"command": "npx", "env": {"PORT": 80}}}}', '"env" must be an object of strings'),
        ('{"mcpServers": {"x": {"command": "npx", "cwd": 3}}}', '"cwd" must be'),
    ],
)
def test_a_bad_config_is_one_line_naming_what_is_wrong(tmp_path, text, said):
    path = tmp_path / "mcp.json"
    path.write_text(text)
    with pytest.raises(SettingError) as refused:
        read_config(path)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert refused.value.field == "mcp" and str(path) in str(refused.value)


def test_a_missing_config_is_one_line(tmp_path):
    with pytest.raises(SettingError) as refused:
        McpTools.start(tmp_path / "nowhere.json")
    assert "nowhere.json" in str(refused.value) and "\n" not in str(refused.value)


def test_the_common_shape_is_read_and_disabled_servers_are_left_out(tmp_path):
    config = {
        "mcpServers": {
            "files": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"DEBUG": "1"}},
            "local": {"type": "stdio", "command": "uvx", "cwd": "~/tools"},
            "off": {"command": "npx", "disabled": True},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    files, local = read_config(path)
    assert (files.name, files.command, files.args, files.env) == (
        "files",
        "npx",
        ("-y", "server-filesystem", "/tmp"),
        {"DEBUG": "1"},
    )
    assert local.cwd == str(Path("~/tools").expanduser()) and local.args == ()


# -- listing and calling -------------------------------------------------------------------------------


def test_a_servers_tools_are_offered_as_the_engines_tool_specs(started):
    names = [spec["function"]["name"] for spec in started.specs]
    assert names == ["add", "fail", "sleep", "say_hello"]  # "say.hello" made a tool name
    add = started.specs[0]
    assert add["type"] == "function" and add["function"]["description"] == "Add two numbers."
    assert add["function"]["parameters"]["properties"]["a"]["type"] == "integer"
    assert add["function"]["parameters"]["required"] == ["a", "b"]
    assert [tool.name for tool in tools_from(started.specs)] == names  # the engine takes them as they are


def test_a_call_returns_its_text_and_a_dotted_name_reaches_its_tool(started):
    assert started.call("add", {"a": 2, "b": 3}) == "5"
    assert started.call("say_hello", {"name": "Ada"}) == "Hello, Ada!"


def test_a_tool_that_raises_is_an_error_result_and_the_next_call_goes_on(started):
    result = started.call("fail", {"why": "on purpose"})
    assert result.startswith("error: ") and "fail" in result and "\n" not in result
    wrong = started.call("add", {"a": 2, "b": "three"})  # arguments the server refuses
    assert wrong.startswith("error: ")
    assert started.call("add", {"a": 20, "b": 22}) == "42"


def test_a_call_past_its_timeout_is_an_error_result_and_the_next_call_goes_on(started):
    began = time.monotonic()
    result = started.call("sleep", {"seconds": 600})
    assert time.monotonic() - began < CALL + 3
    assert result == "error: sleep did not answer in 2 s (the MCP server 'calc')"
    assert started.call("add", {"a": 1, "b": 1}) == "2"


def test_servers_that_exit_hang_or_do_not_exist_are_one_line_each_and_the_rest_goes_on(started):
    problems = started.problems
    assert len(problems) == 3 and all("\n" not in line for line in problems)
    broken, silent, missing = problems
    assert broken.startswith("the MCP server 'broken' ended before it answered")
    assert "no API key given" in broken  # the last line it said on stderr
    assert silent == f"the MCP server 'silent' did not answer in {START:g} s; its tools are left out"
    assert missing.startswith("the MCP server 'missing' could not be started (/no/such/program: ")
    assert all(line.endswith("its tools are left out") for line in problems)
    assert START - 0.5 < started.began < START + 3  # at once, not one after another; the silent one waited for
    assert "specem-mcp" in [thread.name for thread in threading.enumerate()]  # their loop's thread, named
    assert started.call("add", {"a": 2, "b": 2}) == "4"


def test_a_name_no_server_offers_is_an_error_result(started):
    assert started.call("nothing", {}) == "error: no MCP tool is named nothing"


def test_names_two_servers_share_are_prefixed_and_each_reaches_its_own(tmp_path):
    config = write_config(tmp_path / "mcp.json", {"one": tools_server(), "two.b": tools_server()})
    with McpTools.start(config, start_seconds=START * 2, call_seconds=CALL) as tools:
        assert tools.problems == []
        names = [spec["function"]["name"] for spec in tools.specs]
        assert names[:4] == ["one_add", "one_fail", "one_sleep", "one_say_hello"]
        assert names[4:] == ["two_b_add", "two_b_fail", "two_b_sleep", "two_b_say_hello"]
        assert all(NAME.fullmatch(name) for name in names)
        assert tools.call("two_b_add", {"a": 1, "b": 2}) == "3"


# -- closing -------------------------------------------------------------------------------------------


def test_close_ends_every_server_even_one_mid_call_and_one_that_never_answered(tmp_path):
    mark = marker()
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server(mark), "silent": python(HANGS, mark)})
    tools = McpTools.start(config, start_seconds=START, call_seconds=600)
    running = processes(mark)
    assert len(running) >= 1  # the tools server (the silent one may be on its way out)
    said: list[str] = []
    calling = threading.Thread(target=lambda: said.append(tools.call("sleep", {"seconds": 600})))
    calling.start()
    time.sleep(0.5)  # the call is in flight
    began = time.monotonic()
    tools.close()
    assert time.monotonic() - began < 15
    assert tools._thread is not None and not tools._thread.is_alive()  # the event loop's thread has ended
    calling.join(10)
    assert said and said[0].startswith("error: ")
    poll_until(lambda: gone(running) and not processes(mark), 10, "the servers' processes to end")
    assert tools.call("add", {"a": 1, "b": 2}).startswith("error: the MCP server 'calc' is not running")
    tools.close()  # twice is fine


def test_close_from_another_thread_cuts_a_start_short(tmp_path):
    mark = marker()
    config = write_config(tmp_path / "mcp.json", {"silent": python(HANGS, mark)})
    tools = McpTools(config, start_seconds=120)
    closing = threading.Timer(1.0, tools.close)
    closing.start()
    began = time.monotonic()
    tools.open()  # what the chat app does while the servers start, and the app quits
    assert time.monotonic() - began < 10
    assert tools.problems == ["the MCP server 'silent' was closed before it started; its tools are left out"]
    closing.join(15)
    poll_until(lambda: not processes(mark), 10, "the server's process to end")
    tools.open()  # closed: nothing starts
    assert not processes(mark)


# -- what is offered and what is read (pure) -----------------------------------------------------------


def test_the_tool_name_rule_is_the_engines():
    assert MCP_NAME.pattern == NAME.pattern


def test_long_names_are_cut_and_names_made_the_same_are_told_apart():
    long = "x" * 80
    tools, notes = offered([Listed("s", long, "", {}), Listed("s", "a.b", "", {}), Listed("s", "a_b", "", {})])
    assert [tool.name for tool in tools] == ["x" * 64, "a_b", "a_b_2"] and notes == []
    assert [tool.tool for tool in tools] == [long, "a.b", "a_b"]  # the server is called by its own name
    assert tools[0].spec["function"]["parameters"] == {"type": "object"}


def test_a_tool_whose_schema_is_not_an_objects_is_left_out_in_one_line():
    tools, notes = offered([Listed("s", "ok", "", {"type": "object"}), Listed("s", "odd", "", {"type": "string"})])
    assert [tool.name for tool in tools] == ["ok"] and notes == [
        "the MCP tool s/odd is left out: its inputSchema is not an object's"
    ]


def test_past_128_tools_the_rest_are_left_out_and_said():
    tools, notes = offered([Listed("s", f"t{i}", "", {}) for i in range(130)])
    assert len(tools) == 128 and len(notes) == 1 and "2 MCP tools" in notes[0]


def test_results_as_the_models_read_them():
    from mcp import types

    image = types.ImageContent(type="image", data="AAAA", mime_type="image/png")
    link = types.ResourceLink(type="resource_link", name="notes", uri="file:///notes.txt")
    embedded = types.EmbeddedResource(
        type="resource", resource=types.TextResourceContents(uri="file:///a.txt", text="inside")
    )
    blob = types.EmbeddedResource(
        type="resource", resource=types.BlobResourceContents(uri="file:///b.bin", blob="AA==")
    )
    text = types.TextContent(type="text", text="Here:")
    result = types.CallToolResult(content=[text, image, link, embedded, blob])
    assert result_text(result) == (
        "Here:\n[an image, image/png]\n[a link to file:///notes.txt]\ninside\n[a resource: file:///b.bin]"
    )
    failed = types.CallToolResult(content=[types.TextContent(type="text", text="no such city")], is_error=True)
    assert result_text(failed) == "error: no such city"
    assert result_text(types.CallToolResult(content=[], structured_content={"celsius": 18})) == '{"celsius": 18}'
    assert result_text(types.CallToolResult(content=[])) == "(no content)"
    huge = types.CallToolResult(content=[types.TextContent(type="text", text="y" * (MAX_RESULT + 10))])
    assert result_text(huge).endswith(f"[cut at {MAX_RESULT:,} characters]")


def test_the_listings_bounds_are_the_engines_which_it_keeps_apart_from():
    """The mcp package does not import the engine; its copies of the engine's bounds must agree."""
    assert listing.NAME.pattern == tools.NAME.pattern and listing.MAX_NAME == 64
    assert (listing.MAX_TOOLS, listing.MAX_DESCRIPTION) == (tools.MAX_TOOLS, tools.MAX_DESCRIPTION)
