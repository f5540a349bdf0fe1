"""``specem run --mcp CONFIG``: the agent loop of ``--functions`` with an MCP server's tools, on
fake members that call a tool until they read its result (``tests/engine/test_functions.py``'s
scripted fakes): each call on stderr, the answer on stdout; ``--functions`` beside it; a tool
that raises and a server that fails to start said to the models or on stderr once, the loop
going on; ``--approve``; every server ended when the command ends."""

from __future__ import annotations

import pytest

from specem_local.commands import run as run_module
from specem_local.engine import Ensemble
from tests.conftest import poll_until
from tests.engine.test_cli_on_fakes import members, run
from tests.engine.test_functions import calls_until, functions_file, scripted
from tests.mcp.servers import EXITS, gone, marker, processes, python, tools_server, write_config

__all__ = ["members"]  # the fixture

pytestmark = pytest.mark.skipif(not __import__("os").path.exists("/proc/self"), reason="servers found in /proc")

ADD = '{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}'
FAIL = '{"tool_calls": [{"name": "fail", "arguments": {"why": "testing"}}]}'


def mcp_loop(capsys, config: str, *flags: str) -> tuple[int, str, str]:
    return run(capsys, "--no-log", "--max-tokens", "80", "--mcp", config, "--mcp-timeout", "20", *flags, "Go")


def test_run_mcp_goes_through_a_whole_loop_and_ends_its_servers(members, capsys, tmp_path):
    mark = marker()
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server(mark), "broken": python(EXITS, mark)})
    seen: list[int] = []

    def script(text: str) -> str:
        seen.extend(pid for pid in processes(mark) if pid not in seen)  # the servers, while the loop runs
        return calls_until("add returned: 5", ADD, "It is 5.")(text)

    members += [scripted("a", script), scripted("b", script)]
    code, out, err = mcp_loop(capsys, config)
    assert code == 0, err
    assert out == "It is 5.\n"
    assert '[add({"a": 2, "b": 3}) → 5]' in err
    said = [line for line in err.splitlines() if "'broken'" in line]
    assert len(said) == 1 and said[0].startswith("specem: warning: the MCP server 'broken' ended before it answered")
    assert '"name": "add"' in members[0].model.read and '"name": "say_hello"' in members[0].model.read
    assert seen
    poll_until(lambda: gone(seen) and not processes(mark), 10, "the servers to end with the command")


def test_a_tool_that_raises_is_the_result_the_models_read(members, capsys, tmp_path):
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server()})
    members += [scripted("a", calls_until("fail returned: error", FAIL)), scripted("b", calls_until("returned", FAIL))]
    code, out, err = mcp_loop(capsys, config)
    assert code == 0, err
    assert out == "Done.\n" and '[fail({"why": "testing"}) → error: ' in err
    assert "fail returned: error: " in members[0].model.read


def test_functions_and_mcp_together_offer_both_and_run_each_where_it_lives(members, capsys, tmp_path):
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server()})
    weather = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    both = f'{{"tool_calls": [{ADD[16:-2]}, {weather}]}}'
    members += [scripted("a", calls_until("18 C", both)), scripted("b", calls_until("18 C", both))]
    code, out, err = mcp_loop(capsys, config, "--functions", functions_file(tmp_path), "--max-tokens", "200")
    assert code == 0, err
    assert out == "Done.\n"
    assert '[add({"a": 2, "b": 3}) → 5]' in err and '[get_weather({"city": "Paris"}) → 18 C and sunny in Paris]' in err


def test_approve_asks_before_an_mcp_call_and_a_declined_one_is_not_run(members, capsys, tmp_path, monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(run_module, "terminal_asker", lambda: lambda question: asked.append(question) and False)
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server()})
    members += [scripted("a", calls_until("declined", ADD)), scripted("b", calls_until("declined", ADD))]
    code, out, err = mcp_loop(capsys, config, "--approve")
    assert code == 0, err
    assert asked == ['Run add({"a": 2, "b": 3})?'] and out == "Done.\n"
    assert "→ 5]" not in err and "declined to run add" in members[0].model.read


def test_the_chain_limit_holds_for_mcp_tools(members, capsys, tmp_path):
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server()})
    members += [scripted("a", calls_until("never", ADD)), scripted("b", calls_until("never", ADD))]
    code, out, err = mcp_loop(capsys, config, "--chain-limit", "2")
    assert code == 0, err
    assert out == "Done.\n" and err.count("[add(") == 2


def test_what_mcp_cannot_do_is_one_line_before_any_model_loads(members, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda cls, *a, **k: pytest.fail("a model loaded")))
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"web": {"url": "https://example.com/mcp"}}}')
    code, _, err = run(capsys, "--mcp", str(bad), "Go")
    assert code == 2 and "'web' is a url server" in err and err.count("\n") == 1
    dead = write_config(tmp_path / "dead.json", {"broken": python(EXITS)})
    code, _, err = run(capsys, "--mcp", dead, "Go")
    assert code == 2 and "no tools to offer" in err and err.count("specem: error") == 1
    for flags in (["--batch", "in.jsonl", "-o", "out.jsonl"], ["--tools", "tools.json"]):
        code, _, err = run(capsys, "--mcp", dead, *flags, *([] if "--batch" in flags else ["Go"]))
        assert code == 2 and err.count("\n") == 1 and "--mcp" in err
