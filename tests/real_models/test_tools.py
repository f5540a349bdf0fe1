"""Agents against a real ``specem serve`` with the demo trio (issues 38 and 47): the ``openai``
client in a full loop (question, call, tool result, answer), streamed and not; the ``ollama``
client with a Python function as its tool; LangChain's ``ChatOpenAI`` with ``bind_tools``; the
Python API; ``specem run --tools`` and ``--functions``. Every loop must end with an answer in
words that uses the tool's result, after one call: a loop that calls again fails."""

from __future__ import annotations

import json
import subprocess
import sys

import ollama
import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from specem_research.load import start_server
from tests.conftest import ROOT, stop_process

# The issue's own question; one that insists on the tool ("Use the tool.") gets the same call
# again from these members (docs/tools.md#agent-loops).
QUESTION = "What is the weather in Paris?"


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: the name of the city
    """
    return f"It is 18 degrees and sunny in {city}."


def uses_the_result(answer: str | None) -> bool:
    return bool(answer) and "18" in str(answer)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the name of the city"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("tools-serve")
    process, base = start_server(env={"SPECEM_DATA_DIR": str(data)})
    yield base
    stop_process(process, 30)


def run_agent(client: openai.OpenAI, stream: bool) -> tuple[list[dict], str]:
    """The loop docs/api.md shows: call the tools the model asks for, send the results back,
    until it answers in words (three turns at most, ``tool_choice`` left to the models)."""
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    called = []
    for _ in range(3):
        request = dict(model="specem", messages=messages, tools=[WEATHER], temperature=0, max_tokens=120)
        content, calls = complete(client, request) if not stream else stream_completion(client, request)
        if not calls:
            return called, content
        messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        for call in calls:
            arguments = json.loads(call["function"]["arguments"])
            called.append(arguments)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": get_weather(**arguments)})
    raise AssertionError("no answer in words after three turns")


def complete(client: openai.OpenAI, request: dict) -> tuple[str | None, list[dict]]:
    message = client.chat.completions.create(**request).choices[0].message
    return message.content, [call.model_dump() for call in message.tool_calls or []]


def stream_completion(client: openai.OpenAI, request: dict) -> tuple[str | None, list[dict]]:
    """Concatenate the deltas as OpenAI's clients do: content, and per call index its id, name
    and argument fragments."""
    content, calls = "", {}
    for chunk in client.chat.completions.create(**request, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or []:
            empty = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            call = calls.setdefault(piece.index, empty)
            call["id"] = piece.id or call["id"]
            call["function"]["name"] += piece.function.name or ""
            call["function"]["arguments"] += piece.function.arguments or ""
    return content or None, [calls[index] for index in sorted(calls)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_openai_agent_loop_calls_the_tool_and_answers(server, stream):
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=600)
    called, answer = run_agent(client, stream)
    assert called == [{"city": "Paris"}]  # one call, then the answer: never the same call again
    assert uses_the_result(answer), answer


def test_the_ollama_client_with_a_python_function_as_its_tool(server):
    client = ollama.Client(host=server)
    messages: list = [{"role": "user", "content": QUESTION}]
    response = client.chat(model="specem", messages=messages, tools=[get_weather], options={"temperature": 0})
    calls = response.message.tool_calls or []
    assert calls and calls[0].function.name == "get_weather" and calls[0].function.arguments["city"]
    messages.append(response.message)
    for call in calls:
        messages.append({"role": "tool", "content": get_weather(**call.function.arguments), "tool_name": "get_weather"})
    final = client.chat(model="specem", messages=messages, tools=[get_weather], options={"temperature": 0})
    assert not final.message.tool_calls and uses_the_result(final.message.content), final.message


def test_langchain_chat_openai_with_bind_tools_completes_the_task(server):
    model = ChatOpenAI(base_url=f"{server}/v1", api_key="unused", model="specem", temperature=0, max_retries=0)
    asked = [HumanMessage(QUESTION)]
    first = model.bind_tools([get_weather], tool_choice="get_weather").invoke(asked)
    [call] = first.tool_calls
    assert call["name"] == "get_weather" and call["args"]["city"]
    result = ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])
    final = model.bind_tools([get_weather]).invoke([*asked, first, result])
    assert not final.tool_calls and uses_the_result(final.content), final


def test_a_python_api_loop_ends_with_the_result(server):
    """The same loop through ``Ensemble.chat`` (its own models, not the server's)."""
    from specem_local import Ensemble
    from tests.conftest import demo_config

    with Ensemble.from_config(demo_config(greedy=True, max_tokens=120, fresh_weights=False)) as ensemble:
        messages: list = [{"role": "user", "content": QUESTION}]
        first = ensemble.chat(messages, tools=[get_weather]).parsed
        assert [c.arguments for c in first.calls] == [{"city": "Paris"}]
        called = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                  for c in first.calls]  # fmt: skip
        messages += [{"role": "assistant", "content": None, "tool_calls": called}]
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": get_weather("Paris")} for c in called]
        final = ensemble.chat(messages, tools=[get_weather]).parsed
        assert not final.calls and uses_the_result(final.content), final


def test_specem_run_functions_goes_through_the_loop(tmp_path):
    functions = tmp_path / "weather.py"
    functions.write_text(
        "def get_weather(city: str) -> str:\n"
        '    """Get the current weather in a city."""\n'
        '    return f"It is 18 degrees and sunny in {city}."\n'
    )
    command = [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy", "--functions", str(functions),
               "--max-tokens", "120", QUESTION]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("get_weather(") == 1 and uses_the_result(result.stdout), result


def test_specem_run_tools_prints_the_calls(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER]))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specem_local",
            "run",
            "--no-log",
            "--greedy",
            "--tools",
            str(tools),
            "--max-tokens",
            "120",
            QUESTION,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert isinstance(printed, list) and printed[0]["name"] == "get_weather"
