"""MCP tools in the chat app: the settings name an MCP config; the ensemble is offered its
servers' tools; an answer that calls one has it run, its result shown under the call and
kept in the history, and the ensemble answers again with it. A server that fails to start is
said once and the rest goes on; quitting ends every server. Fake members that call ``add``
until they read its result; the server is real (``tests/mcp/tools_server.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specem_local.storage.history import History
from specem_tui.screens.chat import ChatScreen
from specem_tui.screens.settings import SettingsScreen
from tests.conftest import poll_until
from tests.engine.test_functions import calls_until, scripted
from tests.mcp.servers import EXITS, gone, marker, processes, python, tools_server, write_config
from tests.tui.pilot import answered, ask, chat_ready, data_dir, wait_until
from tests.tui.test_chat import app_with

__all__ = ["data_dir"]  # the autouse fixture

pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="the servers are found in /proc")

ADD = '{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}'


async def test_the_chat_offers_mcp_tools_runs_a_call_and_answers_with_its_result(tmp_path):
    mark = marker()
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server(mark), "broken": python(EXITS, mark)})
    script = calls_until("add returned: 5", ADD, "It is 5.")
    app = app_with(scripted("a", script), scripted("b", script))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        app.screen.query_one("#mcp-config").value = str(tmp_path / "not-there.json")
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SettingsScreen)  # refused: no such file; the form stays
        app.screen.query_one("#mcp-config").value = config
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        await wait_until(pilot, lambda: app.chat_tools is not None, 60)
        running = processes(mark)
        assert running
        said = [str(n.message) for n in app._notifications]
        assert sum("'broken'" in line for line in said) == 1  # said once, the rest goes on
        assert any(line.startswith("4 MCP tools offered: add, fail, sleep, say_hello") for line in said)
        assert "MCP tools: 4" in str(app.screen.query_one("#status").render())

        await ask(pilot, app, "What is 2 + 3?")
        screen = app.screen
        await wait_until(pilot, lambda: answered(app) and screen.calling is None and len(screen.chat.turns) == 4, 60)
        roles = [(turn.role, turn.content) for turn in screen.chat.turns]
        assert roles == [
            ("user", "What is 2 + 3?"),
            ("assistant", ADD),
            ("tool", "5"),
            ("assistant", '{"response": "It is 5."}'),
        ]
        await pilot.pause()
        shown = app.export_screenshot().replace("&#160;", " ")
        for part in ("Calls a tool", "add(", "Tool result", "It is 5."):
            assert part in shown, part
        kept = History().load(screen.chat.id)
        assert [(turn.role, turn.content) for turn in kept.turns] == roles
        await ask(pilot, app, "Thanks!")  # the chat goes on after a loop, the tools still offered
        await wait_until(pilot, lambda: answered(app) and len(screen.chat.turns) == 6, 60)
        assert screen.chat.turns[-1].content == '{"response": "It is 5."}' and screen.chat.turns[-1].error is None
    poll_until(lambda: gone(running) and not processes(mark), 15, "the MCP servers to end with the app")
    assert app.chat_tools is None


async def test_esc_while_a_tool_runs_stops_the_loop_and_the_calls_are_kept(tmp_path):
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server()})
    sleep, add = '{"name": "sleep", "arguments": {"seconds": 3}}', '{"name": "add", "arguments": {"a": 1, "b": 1}}'
    slow = f'{{"tool_calls": [{sleep}, {add}]}}'
    app = app_with(scripted("a", calls_until("never", slow)), scripted("b", calls_until("never", slow)))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        app.use_mcp(config)
        await wait_until(pilot, lambda: app.chat_tools is not None, 60)
        await ask(pilot, app, "Sleep, then add.")
        screen = app.screen
        await wait_until(pilot, lambda: screen.calling is not None, 60)
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.calling is None, 30)
        await pilot.pause()
        assert screen.inflight is None  # no answer after a stop
        assert [turn.role for turn in screen.chat.turns] == ["user", "assistant", "tool", "tool"]
        assert screen.chat.turns[2].content == "woke"
        assert screen.chat.turns[3].content.startswith("error: the user stopped the calls")
        assert [turn.role for turn in History().load(screen.chat.id).turns] == ["user", "assistant", "tool", "tool"]


async def test_quitting_while_a_tool_runs_ends_its_server_and_does_not_wait_for_the_call(tmp_path):
    mark = marker()
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server(mark)})
    forever = '{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 600}}]}'
    app = app_with(scripted("a", calls_until("never", forever)), scripted("b", calls_until("never", forever)))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        app.use_mcp(config)
        await wait_until(pilot, lambda: app.chat_tools is not None, 60)
        running = processes(mark)
        await ask(pilot, app, "Sleep.")
        screen = app.screen
        await wait_until(pilot, lambda: screen.calling is not None, 60)
        began = time.monotonic()
    assert time.monotonic() - began < 20  # the call in flight ended with its server
    poll_until(lambda: gone(running) and not processes(mark), 15, "the MCP server to end with the app")
