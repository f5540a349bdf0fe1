"""``specem serve --mcp CONFIG``: a Responses API request opts in to an MCP server of the config
with ``{"type": "mcp", "server_label": NAME}`` (issue 57), and the server runs the agent loop
itself, as OpenAI's API runs remote MCP servers. Driven by the ``openai`` client against a live
server over fake members that call a tool until they read its result
(``tests/engine/test_functions.py``'s scripted fakes), with a real MCP stdio server
(``tests/mcp/tools_server.py``) started through ``McpTools``: the whole loop, streamed the same,
a tool that fails, the chain limit, ``allowed_tools``, a server that did not start, each refusal
a 400 naming the field (the next request answered), ``previous_response_id`` and echoed items
continuing the loop's conversation, and ``specem serve --mcp`` on the command line."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from specem_local.commands.cli import main
from specem_local.engine import Ensemble, ToolCall
from specem_local.mcp import McpTools
from specem_local.server import EnsembleServer, ServerOptions
from specem_local.server.mcp_rounds import called_and_answered
from specem_local.storage.history import History
from tests.conftest import poll_until
from tests.engine.conftest import fake_ensemble, fake_member
from tests.engine.test_functions import FORCED, calls_until, scripted
from tests.mcp.servers import EXITS, gone, marker, processes, python, tools_server, write_config
from tests.server.live import free_port, health, serving

pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="the MCP tests find servers in /proc")

ADD = '{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}'
FAIL = '{"tool_calls": [{"name": "fail", "arguments": {"why": "testing"}}]}'
HELLO = '{"tool_calls": [{"name": "say_hello", "arguments": {"name": "Ada"}}]}'
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALC = {"type": "mcp", "server_label": "calc", "require_approval": "never"}


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> Iterator[McpTools]:
    """The tools server (``calc``) and one that exits before it answers (``broken``), started
    once for the module, as ``specem serve --mcp`` starts them."""
    config = write_config(
        tmp_path_factory.mktemp("mcp") / "mcp.json", {"calc": tools_server(), "broken": python(EXITS)}
    )
    with McpTools.start(config, start_seconds=20, call_seconds=20) as started:
        yield started


def client_of(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)


@contextlib.contextmanager
def served(tools: McpTools | None, *members, **settings) -> Iterator[openai.OpenAI]:
    ensemble = fake_ensemble(*members, **{"max_tokens": 80, **settings})
    try:
        with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False), mcp=tools)) as url:
            yield client_of(url)
    finally:
        ensemble.close()


def both(script) -> list:
    return [scripted("a", script), scripted("b", script)]


def kinds(reply) -> list[str]:
    return [item.type for item in reply.output]


# -- the loop ------------------------------------------------------------------------------------------


def test_the_server_runs_the_mcp_tool_and_the_answer_reads_its_result(tools):
    members = both(calls_until("add returned:", ADD, "It is 5."))  # any result ends the loop: one round
    with served(tools, *members) as client:
        reply = client.responses.create(model="specem", input="Add 2 and 3.", tools=[CALC])
    assert kinds(reply) == ["mcp_list_tools", "mcp_call", "message"]
    listed, call, _ = reply.output
    assert listed.server_label == "calc" and listed.error is None
    assert {tool.name for tool in listed.tools} == {"add", "fail", "sleep", "say.hello"}
    assert next(t for t in listed.tools if t.name == "add").input_schema["properties"].keys() == {"a", "b"}
    assert call.server_label == "calc" and call.name == "add" and json.loads(call.arguments) == {"a": 2, "b": 3}
    assert call.output == "5" and call.error is None and call.status == "completed"
    assert call.id.startswith("mcp_") and listed.id.startswith("mcpl_")
    assert reply.output_text == "It is 5." and reply.status == "completed"
    assert "add returned: 5" in members[0].model.read  # the result the server got, read by the models
    assert reply.usage.output_tokens > len(ADD)  # both answers counted (the last alone is far shorter)
    assert reply.model_extra["x_specem"]["answers"] == 2


def test_each_answer_of_the_loop_goes_through_the_line_and_into_the_history(tools, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    ensemble = fake_ensemble(*both(calls_until("add returned: 5", ADD, "It is 5.")), max_tokens=80)
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=True), mcp=tools)) as url:
        reply = client_of(url).responses.create(model="specem", input="Add 2 and 3.", tools=[CALC])
        answered = health(url)["answered"]
    ensemble.close()
    assert reply.output_text == "It is 5." and answered == 2
    recorded = [[(turn.role, turn.content) for turn in History().load(chat.id).turns] for chat in History().chats()]
    assert len(recorded) == 2
    [after] = [turns for turns in recorded if ("tool", "5") in turns]
    assert after[0] == ("user", "Add 2 and 3.") and after[-1][0] == "assistant" and "It is 5." in after[-1][1]


def test_the_loop_streamed_shows_the_mcp_items_not_function_calls(tools):
    members = both(calls_until("add returned: 5", ADD, "It is 5."))
    with served(tools, *members) as client:
        events = list(client.responses.create(model="specem", input="Add 2 and 3.", tools=[CALC], stream=True))
        with client.responses.stream(model="specem", input="Add 2 and 3.", tools=[CALC]) as stream:
            accumulated = stream.get_final_response()
    names = [event.type for event in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.output_item.done"]  # fmt: skip
    assert events[2].item.type == "mcp_list_tools" and events[3].item.type == "mcp_list_tools"
    assert names.count("response.created") == 1 and names.count("response.completed") == 1
    assert names[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    assert not any(name.startswith("response.function_call_arguments") for name in names)
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert "function_call" not in added and added.count("mcp_call") == 1
    [done] = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "mcp_call"]
    assert done.name == "add" and done.output == "5" and done.status == "completed"
    final = events[-1].response
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output_text == "It is 5." and final.usage.output_tokens > len(ADD)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "It is 5."
    assert accumulated.output_text == "It is 5."


def test_a_tool_that_fails_is_an_error_item_and_the_loop_goes_on(tools):
    members = both(calls_until("fail returned: error", FAIL, "It failed."))
    with served(tools, *members) as client:
        reply = client.responses.create(model="specem", input="Try it.", tools=[CALC])
    assert kinds(reply) == ["mcp_list_tools", "mcp_call", "message"]
    call = reply.output[1]
    assert call.name == "fail" and call.status == "failed" and call.output is None
    said = call.error.content[0]["text"]
    assert call.error.type == "mcp_tool_execution_error" and "fail" in said and not said.startswith("error: ")
    assert reply.output_text == "It failed." and f"fail returned: error: {said}" in members[0].model.read


def test_a_call_that_does_not_answer_in_time_is_one_error_line(tmp_path):
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server()})
    sleep = '{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}'
    with McpTools.start(config, start_seconds=20, call_seconds=1) as slow:
        members = both(calls_until("sleep returned: error", sleep, "Too slow."))
        with served(slow, *members) as client:
            reply = client.responses.create(model="specem", input="Sleep.", tools=[CALC])
    call = reply.output[1]
    assert call.status == "failed" and "sleep did not answer in 1 s" in call.error.content[0]["text"]
    assert reply.output_text == "Too slow."


def test_after_8_rounds_of_results_the_answer_is_a_message(tools):
    def script(text: str) -> str:  # calls again and again unless told not to, and gives up after 10 results
        return '{"response": "Done."}' if FORCED in text or text.count("add returned: 5") >= 10 else ADD

    members = both(script)
    with served(tools, *members, max_tokens=100) as client:
        reply = client.responses.create(model="specem", input="Keep adding.", tools=[CALC])
    assert kinds(reply) == ["mcp_list_tools", *["mcp_call"] * 8, "message"]
    assert all(item.output == "5" for item in reply.output[1:-1])
    assert reply.output_text == "Done." and members[0].model.read.count("add returned: 5") == 8


def test_max_tool_calls_runs_that_many_and_then_asks_for_a_message(tools):
    def script(text: str) -> str:  # calls again and again unless told not to
        return '{"response": "Done."}' if FORCED in text else ADD

    members = both(script)
    with served(tools, *members, max_tokens=100) as client:
        reply = client.responses.create(model="specem", input="Keep adding.", tools=[CALC], max_tool_calls=2)
        assert reply.max_tool_calls == 2 and members[0].model.read.count("add returned: 5") == 2
        none = client.responses.create(model="specem", input="Add.", tools=[CALC], max_tool_calls=0)
    assert kinds(reply) == ["mcp_list_tools", "mcp_call", "mcp_call", "message"] and reply.output_text == "Done."
    assert kinds(none) == ["mcp_list_tools", "message"]  # its tools listed, not offered: the answer is a message
    asked = members[0].model.read.split("### Assistant:")[0]
    assert none.output_text == ADD and "Add." in asked and '"add"' not in asked  # written, never run


def test_two_rounds_of_results_are_three_answers_each_counted_in_the_usage(tools):
    def script(text: str) -> str:  # calls twice, then answers
        return '{"response": "It is 5."}' if text.count("add returned: 5") >= 2 else ADD

    with served(tools, *both(script)) as client:
        reply = client.responses.create(model="specem", input="Add twice.", tools=[CALC])
        once = client.responses.create(model="specem", input="Add once.", tools=[CALC], max_output_tokens=80)
    assert kinds(reply) == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    assert reply.model_extra["x_specem"]["answers"] == 3
    assert reply.usage.output_tokens >= 2 * len(ADD) + len('{"response": "It is 5."}') - 4  # all three answers
    assert once.usage.input_tokens < reply.usage.input_tokens  # each answer's prompt counted: the later are longer


def test_an_answer_cut_while_calling_an_mcp_tool_runs_nothing_and_says_so(tools):
    members = both(calls_until("never", ADD))
    with served(tools, *members, max_tokens=len(ADD) - 2) as client:  # the call whole, the envelope not closed
        reply = client.responses.create(model="specem", input="Add.", tools=[CALC])
    assert kinds(reply) == ["mcp_list_tools", "mcp_call"] and reply.status == "incomplete"
    call = reply.output[1]
    assert (call.name, call.status, call.output, call.error) == ("add", "incomplete", None, None)
    assert json.loads(call.arguments) == {"a": 2, "b": 3} and "add returned" not in members[0].model.read


def test_the_calls_and_their_results_are_read_by_the_next_answer_in_openais_shape():
    calls = [ToolCall("add", {"a": 2, "name": "Zoë"}, "call_1"), ToolCall("fail", {}, "call_2")]
    assert called_and_answered(calls, ["5", "error: no"]) == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "name": "Zoë"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "fail", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "tool", "tool_call_id": "call_2", "content": "error: no"},
    ]  # fmt: skip


def test_a_client_function_called_beside_an_mcp_tool_comes_back_and_the_mcp_call_still_runs(tools):
    weather = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    both_calls = f'{{"tool_calls": [{ADD[16:-2]}, {weather}]}}'
    with served(tools, *both(lambda text: both_calls), max_tokens=160) as client:
        reply = client.responses.create(model="specem", input="Add, and the weather.", tools=[WEATHER, CALC])
    assert kinds(reply) == ["mcp_list_tools", "mcp_call", "function_call"]
    assert reply.output[1].output == "5" and reply.output[2].name == "get_weather"


def test_allowed_tools_offers_only_those(tools):
    members = both(calls_until("returned:", HELLO, "Greeted."))
    with served(tools, *members) as client:
        only = {**CALC, "allowed_tools": {"tool_names": ["say.hello"]}}
        reply = client.responses.create(model="specem", input="Greet Ada.", tools=[only])
        read = members[0].model.read
        listed = client.responses.create(model="specem", input="Add.", tools=[{**CALC, "allowed_tools": ["add"]}])
    assert [tool.name for tool in reply.output[0].tools] == ["say.hello"]
    assert reply.output[1].name == "say.hello" and reply.output[1].output == "Hello, Ada!"
    assert '"name": "say_hello"' in read and '"name": "add"' not in read and '"name": "fail"' not in read
    assert [tool.name for tool in listed.output[0].tools] == ["add"]
    assert '"name": "add"' in members[0].model.read and '"name": "say_hello"' not in members[0].model.read


def test_a_server_that_did_not_start_is_listed_with_its_error(tools):
    with served(tools, fake_member("a", "No tools.", n_ctx=4096), fake_member("b", "No tools.", n_ctx=4096)) as client:
        reply = client.responses.create(model="specem", input="Hi.", tools=[{"type": "mcp", "server_label": "broken"}])
    assert kinds(reply) == ["mcp_list_tools", "message"]
    assert reply.output[0].tools == [] and "ended before it answered" in reply.output[0].error
    assert reply.output_text == "No tools."


# -- continuing the loop's conversation ----------------------------------------------------------------


def test_previous_response_id_continues_after_an_mcp_loop(tools):
    members = both(calls_until("add returned: 5", ADD, "It is 5."))
    with served(tools, *members) as client:
        first = client.responses.create(model="specem", input="Add 2 and 3.", tools=[CALC])
        again = client.responses.create(model="specem", input="Say it again.", previous_response_id=first.id,
                                        tools=[CALC])  # fmt: skip
    assert kinds(first) == ["mcp_list_tools", "mcp_call", "message"]
    assert again.output_text == "It is 5." and kinds(again) == ["mcp_list_tools", "message"]  # read: not called
    read = members[0].model.read
    assert "Add 2 and 3." in read and "add returned: 5" in read and "Say it again." in read


def test_echoed_mcp_items_are_read_as_the_call_and_its_result(tools):
    members = both(calls_until("say_hello returned: Hello, Ada!", HELLO, "Ada was greeted."))
    with served(tools, *members) as client:
        first = client.responses.create(model="specem", input="Greet Ada.", tools=[CALC], store=False)
        assert kinds(first) == ["mcp_list_tools", "mcp_call", "message"] and first.output[1].name == "say.hello"
        echoed = [item.model_dump(exclude_none=True) for item in first.output]
        turn = {"role": "user", "content": "Did it work?"}
        again = client.responses.create(model="specem", input=[*echoed, turn], tools=[CALC])
    assert kinds(again) == ["mcp_list_tools", "message"] and again.output_text == "Ada was greeted."
    read = members[0].model.read  # the server's name for it (say.hello) read as the models call it
    assert '"name": "say_hello"' in read and "say_hello returned: Hello, Ada!" in read and "Did it work?" in read


# -- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "param", "said"),
    [
        ({**CALC, "require_approval": "always"}, "tools[0].require_approval", "approved"),
        ({**CALC, "require_approval": {"always": {"tool_names": ["add"]}}}, "tools[0].require_approval", "approved"),
        ({**CALC, "server_url": "https://example.com/mcp"}, "tools[0].server_url", "'calc'"),
        ({**CALC, "connector_id": "connector_gmail"}, "tools[0].connector_id", "'calc'"),
        ({"type": "mcp", "server_label": "files"}, "tools[0].server_label", "'calc', 'broken'"),
        ({"type": "mcp"}, "tools[0].server_label", "'calc'"),
        ({**CALC, "allowed_tools": ["subtract"]}, "tools[0].allowed_tools", "'add'"),
        ({**CALC, "allowed_tools": "add"}, "tools[0].allowed_tools", "tool names"),
    ],
)
def test_what_is_not_offered_is_a_400_naming_the_field_and_the_next_is_answered(tools, tool, param, said):
    members = both(calls_until("add returned: 5", ADD, "It is 5."))
    with served(tools, *members) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="specem", input="Add 2 and 3.", tools=[tool])
        assert refused.value.body["param"] == param and said in refused.value.body["message"]
        assert client.responses.create(model="specem", input="Add 2 and 3.", tools=[CALC]).output_text == "It is 5."


def test_a_function_named_as_an_mcp_tool_is_a_400(tools):
    add = {**WEATHER, "name": "add"}
    with served(tools, *both(calls_until("add returned: 5", ADD, "It is 5."))) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="specem", input="Add.", tools=[add, CALC])
        assert refused.value.body["param"] == "tools[0].name"
        assert client.responses.create(model="specem", input="Add.", tools=[CALC]).output_text == "It is 5."


def test_a_server_started_without_mcp_says_so():
    with served(None, fake_member("a", "Hello.", n_ctx=4096), fake_member("b", "Hello.", n_ctx=4096)) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="specem", input="Hi.", tools=[CALC])
        assert refused.value.body["param"] == "tools[0].server_label"
        assert "without --mcp" in refused.value.body["message"]
        assert client.responses.create(model="specem", input="Hi.").output_text == "Hello."


# -- specem serve --mcp --------------------------------------------------------------------------------


@pytest.fixture
def no_models(monkeypatch):
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda cls, *a, **k: pytest.fail("a model loaded")))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"mcpServers": {"web": {"url": "https://example.com/mcp"}}}', "'web' is a url server"),
        ("{not json", "not JSON"),
    ],
)
def test_serve_with_a_bad_mcp_config_is_one_line_before_any_model_loads(no_models, capsys, tmp_path, text, said):
    bad = tmp_path / "mcp.json"
    bad.write_text(text)
    code = main(["serve", "--port", str(free_port()), "--mcp", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1 and err.startswith("specem: error: ")
    code = main(["serve", "--port", str(free_port()), "--mcp", str(tmp_path / "missing.json")])
    assert code == 2 and capsys.readouterr().err.count("\n") == 1


def test_serve_starts_the_mcp_servers_says_one_that_failed_and_ends_them(monkeypatch, capsys, tmp_path):
    mark = marker()
    config = write_config(tmp_path / "mcp.json", {"calc": tools_server(mark), "broken": python(EXITS, mark)})
    seen: dict = {}

    def served_until_stopped(server, host, port, log_level):
        seen["labels"] = [(s.label, len(s.tools), s.error is not None) for s in server.mcp_servers]
        seen["running"] = processes(mark)

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr("specem_local.server.run_until_stopped", served_until_stopped)
    monkeypatch.setattr("specem_local.commands.cli.config_from_args", lambda args: None)  # the fakes need none
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda cls, *a, **k: fake_ensemble(
        fake_member("a", "Hi."), fake_member("b", "Hi."))))  # fmt: skip
    code = main(["serve", "--port", str(free_port()), "--mcp", config, "--mcp-timeout", "20"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert seen["labels"] == [("calc", 4, False), ("broken", 0, True)] and seen["running"]
    warned = [line for line in err.splitlines() if "'broken'" in line]
    assert len(warned) == 1 and warned[0].startswith("specem: warning: the MCP server 'broken' ended before")
    assert "'calc', 'broken'" in out
    poll_until(lambda: gone(seen["running"]) and not processes(mark), 10, "the MCP servers to end with the server")
