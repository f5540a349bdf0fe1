"""A whole agent loop on fake members (issue 47): ``specem run --functions FILE.py`` calls the
user's Python function, gives the models its result and prints the answer that uses it; the
history keeps the calls, the results and the answer, and reads back as OpenAI's messages. The
fake calls the tool until it reads the tool's result in its prompt, and then answers with it."""

from __future__ import annotations

import json

from specem_local.engine.tools import render_messages
from specem_local.storage.chat_files import chat_markdown
from specem_local.storage.chats import Chat, Turn
from specem_local.storage.history import History
from tests.engine.conftest import fake_member
from tests.engine.test_cli_on_fakes import members, run
from tests.fake_model import FakeModel

__all__ = ["members"]  # the fixture

CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
WEATHER_PY = '''
import json

def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18 C and sunny in {city}"

def _helper():
    return "not a tool"
'''


class Agent(FakeModel):
    """Calls get_weather until " 18 " is in what it reads (the tool's result); then says it."""

    def next_logits(self, history):
        text = b"".join(self.pieces[t] for t in history)
        self.target = ('{"response": "It is 18 C and sunny."}' if b" 18 " in text else CALL).encode()
        return super().next_logits(history)


def agent(name: str, **options):
    member = fake_member(name, CALL, n_ctx=4096, **options)
    member.model.__class__ = Agent
    return member


def test_run_with_functions_goes_through_the_whole_loop(members, capsys, tmp_path):
    members += [agent("a"), agent("b", n_params=3000)]
    functions = tmp_path / "weather.py"
    functions.write_text(WEATHER_PY)
    code, out, err = run(capsys, "--max-tokens", "80", "--functions", str(functions), "Weather in Paris?")
    assert code == 0, err
    assert out == "It is 18 C and sunny.\n"
    assert 'get_weather({"city": "Paris"}) → 18 C and sunny in Paris' in err
    [summary] = History().chats()
    chat = History().load(summary.id)
    assert [t.role for t in chat.turns] == ["user", "assistant", "tool", "assistant"]
    assert chat.turns[1].content == CALL and chat.turns[2].content == "18 C and sunny in Paris"
    exported = chat_markdown(chat)
    assert "Tool result" in exported and "18 C and sunny in Paris" in exported
    again = render_messages(chat.messages())  # the loop reads back as the engine takes it
    assert again[1].calls[0].name == "get_weather" and again[2].role == "tool" and again[2].name == "get_weather"


def test_a_loop_that_never_answers_ends_with_a_message_at_the_chain_limit(members, capsys, tmp_path):
    members += [fake_member("a", CALL, n_ctx=4096), fake_member("b", CALL, n_ctx=4096)]
    functions = tmp_path / "weather.py"
    functions.write_text(WEATHER_PY)
    code, _, err = run(capsys, "--max-tokens", "80", "--functions", str(functions), "--chain-limit", "2", "Go")
    assert code == 0 and err.count("get_weather(") == 2  # 2 rounds of results, then a message (test_functions.py)


def test_a_function_that_raises_gives_the_models_its_error(members, capsys, tmp_path):
    members += [agent("a"), agent("b")]
    functions = tmp_path / "broken.py"
    functions.write_text("def get_weather(city: str) -> str:\n    raise ValueError('no such city')\n")
    code, _, err = run(capsys, "--max-tokens", "80", "--functions", str(functions), "--chain-limit", "1", "Go")
    assert "→ error: ValueError: no such city" in err and code == 0  # the loop goes on


def test_bad_functions_files_are_one_line_before_any_model_loads(members, capsys, tmp_path):
    broken, empty = tmp_path / "broken.py", tmp_path / "empty.py"
    broken.write_text("def f(:\n")
    empty.write_text("import json\n")
    for path, says in (
        (broken, "the file failed to run (SyntaxError"),
        (empty, "defines no public function"),
        (tmp_path / "missing.py", "no such file"),
    ):
        code, _, err = run(capsys, "--functions", str(path), "Go")
        assert code == 2 and says in err and err.count("\n") == 1
    good = tmp_path / "weather.py"
    good.write_text(WEATHER_PY)
    code, _, err = run(capsys, "--functions", str(good), "--tools", str(empty), "Go")
    assert code == 2 and "not both" in err


def test_a_stored_loop_reads_back_with_each_result_answering_its_call():
    chat = Chat(
        turns=[
            Turn("user", "Weather in Paris and Rome?"),
            Turn(
                "assistant",
                json.dumps(
                    {
                        "tool_calls": [
                            {"name": "get_weather", "arguments": {"city": "Paris"}},
                            {"name": "get_time", "arguments": {"city": "Rome"}},
                        ]
                    }
                ),
            ),
            Turn("tool", "sunny"),
            Turn("tool", "noon"),
            Turn("assistant", '{"response": "Sunny; noon."}'),
        ]
    )
    messages = chat.messages()
    ids = [call["id"] for call in messages[1]["tool_calls"]]
    assert [m.get("tool_call_id") for m in messages[2:4]] == ids
    assert [m.name for m in render_messages(messages)[2:4]] == ["get_weather", "get_time"]
