"""Tool calls (issue 38) on fake models: tools as given (OpenAI's specs, bare ones, Python
functions), the envelope every member is held to (tool_choice, parallel_tool_calls), earlier
calls and results rendered for every family, the reply parsed and streamed in pieces, and each
bad input one line naming its field."""

from __future__ import annotations

import json

import pytest

from specem_local.engine.tool_stream import ReplyStream
from specem_local.engine.tools import ToolCall, ToolReply, tools_from
from specem_local.errors import SettingError
from tests.engine.conftest import fake_ensemble, fake_member

CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ADD = {
    "name": "add",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "number"}},
        "required": ["a"],
        "additionalProperties": False,
    },
}
ASKED = [{"role": "user", "content": "Weather in Paris?"}]


def caller(**settings):
    """A member that wants to call the weather tool, one that wants to answer in words."""
    big = fake_member("big", CALL, n_params=3000, n_ctx=4096)
    small = fake_member("small", '{"response": "Sunny, I think."}', n_ctx=4096, words=['{"', '": '])
    return fake_ensemble(big, small, segment_tokens=5, **settings)


def get_weather(city: str, unit: str = "celsius") -> str:
    """The weather in a city.

    Args:
        city: the city's name
        unit: celsius or fahrenheit
    """
    return f"sunny in {city} ({unit})"


def test_a_python_function_is_a_tool_with_its_signature_and_docstring():
    [tool] = tools_from([get_weather])
    assert tool.name == "get_weather" and tool.description == "The weather in a city."
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city's name"},
            "unit": {"type": "string", "description": "celsius or fahrenheit"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_the_ensemble_calls_a_tool_and_answers_once_it_has_the_result():
    with caller() as ensemble:
        called = ensemble.chat(ASKED, tools=[get_weather, ADD], max_tokens=80)
        reply = called.parsed
        assert isinstance(reply, ToolReply) and reply.content is None
        assert [(c.name, c.arguments) for c in reply.calls] == [("get_weather", {"city": "Paris"})]
        assert reply.calls[0].id.startswith("call_")
        results = [
            *ASKED,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": reply.calls[0].id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps(reply.calls[0].arguments)},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": reply.calls[0].id, "content": get_weather("Paris")},
        ]
        answered = ensemble.chat(results, tools=[get_weather], tool_choice="none", max_tokens=80).parsed
        assert answered.calls == () and isinstance(answered.content, str)


def test_tool_choice_and_parallel_calls_shape_what_may_be_written():
    two = '{"tool_calls": [{"name": "add", "arguments": {"a": 1}}, {"name": "add", "arguments": {"a": 2}}]}'
    with fake_ensemble(fake_member("big", two, n_ctx=4096), fake_member("b", two, n_ctx=4096)) as ensemble:
        both = ensemble.chat(ASKED, tools=[ADD], max_tokens=200).parsed
        assert [c.arguments for c in both.calls] == [{"a": 1}, {"a": 2}]
        one = ensemble.chat(ASKED, tools=[ADD], parallel_tool_calls=False, max_tokens=200).parsed
        assert len(one.calls) == 1
        add = {"type": "function", "function": {"name": "add"}}
        named = ensemble.chat(ASKED, tools=[WEATHER, ADD], tool_choice=add, max_tokens=200).parsed
        assert {c.name for c in named.calls} == {"add"}
    with caller() as ensemble:
        required = ensemble.chat(ASKED, tools=[WEATHER], tool_choice="required", max_tokens=80).parsed
        assert required.calls and required.content is None
        words = ensemble.chat(ASKED, tools=[WEATHER], tool_choice="none", max_tokens=80).parsed
        assert words.calls == () and words.content is not None


def test_a_reply_streams_as_its_pieces():
    stream = ReplyStream()
    pieces = [stream.feed(CALL[i : i + 7]) for i in range(0, len(CALL), 7)]
    names = [call.name for _, moved in pieces for _, call, _, named in moved if named]
    arguments = "".join(fragment for _, moved in pieces for _, _, fragment, _ in moved)
    assert names == ["get_weather"] and json.loads(arguments) == {"city": "Paris"}
    message = ReplyStream()
    text = '{"response": "It is \\u00e9t\\u00e9 \\ud83d\\ude00 now.\\n"}'
    assert "".join(message.feed(text[i : i + 3])[0] for i in range(0, len(text), 3)) == "It is été 😀 now.\n"


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "letters, digits"),
        ({"tools": [{"type": "function", "function": {"name": "x" * 1024}}]}, "tools", "1 to 64"),
        ({"tools": [dict(ADD, name=f"f{i}") for i in range(500)]}, "tools", "at most 128"),
        ({"tools": [dict(ADD, parameters={"type": "string"})]}, "tools", "JSON Schema of an object"),
        (
            {"tools": [dict(ADD, parameters={"type": "object", "properties": {"a": {"type": "strin"}}})]},
            "tools",
            "cannot be enforced",
        ),
        ({"tools": [ADD, ADD]}, "tools", "two functions are named 'add'"),
        (
            {"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "'nope', which is not one of the tools",
        ),
        ({"tools": [ADD], "schema": {"type": "object"}}, "tools", "give one of"),
        ({"tools": [ADD], "tool_choice": {"type": "function", "function": []}}, "tool_choice", "must be"),
        ({"tools": [ADD], "tool_choice": {"type": "function", "function": "add"}}, "tool_choice", "must be"),
        ({"tools": [ADD], "tool_choice": ["add"]}, "tool_choice", "must be"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ],
)
def test_bad_tools_are_one_line_naming_the_field_and_the_next_answer_comes(given, field, says):
    with caller() as ensemble:
        with pytest.raises(SettingError) as caught:
            ensemble.stream(ASKED, **given)
        assert caught.value.field == field and says in str(caught.value) and "\n" not in str(caught.value)
        assert ensemble.chat(ASKED, tools=[WEATHER], max_tokens=80).parsed.calls


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([*ASKED, {"role": "tool", "tool_call_id": "call_x", "content": "sunny"}], "answers no earlier tool call"),
        (
            [
                *ASKED,
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{x"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "1"},
            ],
            "arguments is not JSON",
        ),
    ],
)
def test_a_conversation_with_broken_calls_is_one_line(messages, says):
    with caller() as ensemble, pytest.raises(SettingError, match=says):
        ensemble.stream(messages, tools=[WEATHER])


def test_an_empty_list_is_no_tools():
    with caller() as ensemble:
        final = ensemble.chat(ASKED, tools=[], max_tokens=8)
    assert final.parsed is None and final.tokens == 8
    assert ToolCall("f", {}).id != ToolCall("f", {}).id


def test_the_agent_loop_in_docs_api_md_runs():
    """docs/api.md's loop, as written, on fake models that call the tool until they read its
    result: it calls once, sends the result back and prints the answer in words."""
    import contextlib
    import io
    import re

    from tests.conftest import ROOT
    from tests.engine.test_agent_loops import agent

    text = (ROOT / "docs" / "api.md").read_text("utf-8")
    section = text[text.index("### Tool calls") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    printed = io.StringIO()
    namespace = {"Ensemble": lambda: fake_ensemble(agent("a", n_params=3000), agent("b"), max_tokens=120)}
    with contextlib.redirect_stdout(printed):
        exec(code.replace("from specem_local import Ensemble\n", ""), namespace)
    assert printed.getvalue() == "It is 18 C and sunny.\n"
    assert [m["role"] for m in namespace["messages"]] == ["user", "assistant", "tool"]


def test_an_assistants_calls_are_recorded_as_the_envelope_the_ensemble_answers_in():
    from specem_local.engine.tools import as_recorded

    weather = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    openai_call = {"id": "c1", "type": "function", "function": weather}
    ollama_call = {"function": {"name": "add", "arguments": {"a": 1}}}
    message = {"role": "assistant", "content": None, "tool_calls": [openai_call, ollama_call]}
    calls = [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 1}}]
    assert json.loads(as_recorded(message)) == {"tool_calls": calls}
    assert as_recorded({"role": "user", "content": "hi"}) == "hi"


def test_a_cut_envelope_hands_on_its_whole_calls_only():
    from specem_local.engine.tool_stream import whole_part

    whole = '{"name": "f", "arguments": {"s": "a \\"}\\" b", "n": {"m": [1]}}}'
    cut = '{"tool_calls": [' + whole + ', {"name": "g", "arguments": {"x": "'
    assert [(c.name, c.arguments) for c in whole_part(cut).calls] == [("f", {"s": 'a "}" b', "n": {"m": [1]}})]
    assert whole_part('{"response": "Half a sen') == ToolReply(content="Half a sen")
