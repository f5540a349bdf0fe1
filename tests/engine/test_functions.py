"""``specem run --functions FILE.py`` as an ``llm --functions`` user expects it (a hostile
tester's findings): ``--chain-limit N`` is N rounds of results, then a message that reads
them (0: no limit); ``--approve`` asks before each call; signatures a call cannot fill are
refused up front, in one line; whatever a function does (a result with no JSON form,
``sys.exit()``) the models read ``error: ...`` and the loop goes on. The fakes answer as a
script says from what they read, and keep the last prompt they read."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import pytest

from specem_local.commands import functions as functions_module
from specem_local.commands import run as run_module
from specem_local.commands.cli import main
from specem_local.commands.functions import call_function, load_functions, terminal_asker
from specem_local.engine import Ensemble
from specem_local.engine.member import Member
from specem_local.engine.prompting import PLAIN_ANSWER_HEADER, PromptFormat
from specem_local.engine.tools import ToolCall, tools_from
from specem_local.errors import SettingError
from specem_local.models.config import ModelSpec
from tests.engine.test_cli_on_fakes import members, run
from tests.engine.test_tool_turns import QWEN_TOOLS
from tests.fake_model import FakeModel

__all__ = ["members"]  # the fixture

WEATHER_PY = '''
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18 C and sunny in {city}"
'''
CALL_WEATHER = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
FORCED = "Do not call a function now"  # the instruction of tool_choice "none"


class Scripted(FakeModel):
    """Writes what ``script`` says from the text it reads (the prompt and its answer so far);
    under a chat template, its answer is what follows the template's last ``header``."""

    def __init__(self, script: Callable[[str], str], header: str = PLAIN_ANSWER_HEADER) -> None:
        super().__init__("", n_ctx=8192)
        self.script, self.header, self.read = script, header, ""

    def next_logits(self, history):
        text = b"".join(self.pieces[t] for t in history).decode("utf-8", "replace")
        self.read = text
        self.target = self.script(text).encode()
        if self.header != PLAIN_ANSWER_HEADER:  # the base class finds the answer after the plain header
            history = self.tokenize(PLAIN_ANSWER_HEADER + text.rpartition(self.header)[2])
        return super().next_logits(history)


def scripted(name: str, script: Callable[[str], str], template: str | None = None) -> Member:
    header = "<|im_start|>assistant\n" if template else PLAIN_ANSWER_HEADER
    return Member(ModelSpec(name=name, path=f"{name}.gguf"), Scripted(script, header), PromptFormat(template))


def calls_until(seen: str, call: str = CALL_WEATHER, answer: str = "Done.") -> Callable[[str], str]:
    """Call until ``seen`` is in what it reads (a result), then answer; told not to call, answer."""
    return lambda text: f'{{"response": "{answer}"}}' if seen in text or FORCED in text else call


def functions_file(tmp_path, source: str = WEATHER_PY) -> str:
    path = tmp_path / "functions.py"
    path.write_text(source)
    return str(path)


def loop(capsys, functions: str, *flags: str) -> tuple[int, str, str]:
    """``specem run --functions`` on the members, "Go" asked, not recorded."""
    return run(capsys, "--no-log", "--max-tokens", "80", "--functions", functions, *flags, "Go")


# -- 1. --chain-limit: N rounds of results, then a message -------------------------------------------


@pytest.mark.parametrize(("given", "rounds"), [(["--chain-limit", "2"], 2), ([], 5)], ids=["2", "default"])
def test_the_chain_limit_is_rounds_of_results_then_a_message_that_reads_them(members, capsys, tmp_path, given, rounds):
    members += [scripted("a", calls_until("never")), scripted("b", calls_until("never"))]
    code, out, err = loop(capsys, functions_file(tmp_path), *given)
    assert code == 0, err
    assert out == "Done.\n"
    assert err.count("[get_weather(") == rounds  # each call run is one the models read
    assert members[0].model.read.count("18 C and sunny in Paris") == rounds


def test_chain_limit_0_is_no_limit(members, capsys, tmp_path):
    step = '{"tool_calls": [{"name": "step", "arguments": {}}]}'
    ticking = functions_file(tmp_path, "def step() -> str:\n    return 'tock'\n")

    def script(text: str) -> str:
        return '{"response": "Seven."}' if text.count("tock") >= 7 else step

    members += [scripted("a", script), scripted("b", script)]
    code, out, err = loop(capsys, ticking, "--chain-limit", "0")
    assert code == 0, err
    assert out == "Seven.\n" and err.count("[step(") == 7
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "0: no limit" in " ".join(capsys.readouterr().out.split())


# -- 2. --approve ------------------------------------------------------------------------------------


def test_a_call_runs_only_once_approved_and_a_declined_one_is_said_to_the_models():
    ran, asked = [], []

    def get_weather(city: str) -> str:
        ran.append(city)
        return "sunny"

    def answer(yes: bool) -> Callable[[str], bool]:
        return lambda question: asked.append(question) is None and yes

    call = ToolCall("get_weather", {"city": "Paris"})
    declined = call_function([get_weather], call, answer(False))
    assert ran == [] and declined.startswith("error: ") and "declined" in declined
    assert call_function([get_weather], call, answer(True)) == "sunny" and ran == ["Paris"]
    assert asked == ['Run get_weather({"city": "Paris"})?'] * 2


@pytest.mark.parametrize("flag", ["--approve", "--tools-approve"])
def test_approve_asks_before_each_call_and_the_models_read_that_the_user_declined(
    members, capsys, tmp_path, monkeypatch, flag
):
    asked: list[str] = []
    monkeypatch.setattr(run_module, "terminal_asker", lambda: lambda question: asked.append(question) and False)
    members += [scripted("a", calls_until("declined")), scripted("b", calls_until("declined"))]
    code, out, err = loop(capsys, functions_file(tmp_path), flag)
    assert code == 0, err
    assert asked == ['Run get_weather({"city": "Paris"})?'] and out == "Done.\n"
    assert "18 C" not in err and "declined" in members[0].model.read


def test_approve_without_a_terminal_is_one_line_before_any_model_loads(members, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(functions_module, "TERMINAL", str(tmp_path / "no-terminal"))
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda cls, *a, **k: pytest.fail("a model loaded")))
    code, _, err = run(capsys, "--functions", functions_file(tmp_path), "--approve", "Go")
    assert code == 2 and "--approve" in err and "terminal" in err and err.count("\n") == 1
    code, _, err = run(capsys, "--approve", "Go")  # and without --functions, nothing to approve
    assert code == 2 and "--functions" in err and err.count("\n") == 1


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_the_terminal_asker_asks_on_the_terminal_and_takes_y_as_yes(monkeypatch):
    main_end, terminal_end = os.openpty()
    try:
        monkeypatch.setattr(functions_module, "TERMINAL", os.ttyname(terminal_end))
        ask = terminal_asker()
        os.write(main_end, b"y\n")
        assert ask("Run f({})?")
        os.write(main_end, b"\n")
        assert not ask("Run g({})?")  # Enter alone is no
        shown = os.read(main_end, 4096).decode()
        assert "Run f({})? [y/N] " in shown and "Run g({})? [y/N] " in shown
    finally:
        os.close(main_end)
        os.close(terminal_end)


# -- 3. signatures as schemas a call can fill ----------------------------------------------------------


def test_star_args_and_positional_only_parameters_are_refused_naming_them(members, capsys, tmp_path):
    def total(*numbers: int) -> int:
        return sum(numbers)

    def square(x: int, /) -> int:
        return x * x

    for function, named in ((total, "total(*numbers)"), (square, "square(x, /)")):
        with pytest.raises(SettingError) as refused:
            tools_from([function])
        assert refused.value.field == "tools" and named in str(refused.value)
    code, _, err = run(capsys, "--functions", functions_file(tmp_path, "def total(*numbers):\n    return 0\n"), "Go")
    assert code == 2 and "total(*numbers)" in err and err.count("\n") == 1


def test_extra_arguments_are_refused_by_the_schema_unless_the_function_takes_kwargs():
    def strict(city: str) -> str:
        return city

    def loose(city: str, **options: str) -> str:
        return f"{city} {options}"

    [closed, opened] = tools_from([strict, loose])
    assert closed.parameters["additionalProperties"] is False
    assert opened.parameters["additionalProperties"] is True and list(opened.parameters["properties"]) == ["city"]
    assert call_function([loose], ToolCall("loose", {"city": "Rome", "unit": "C"})) == "Rome {'unit': 'C'}"


def test_arguments_that_do_not_bind_are_an_error_result_and_nothing_runs():
    ran = []

    def logged(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            ran.append(kwargs)
            return function(*args, **kwargs)

        return wrapper

    @logged
    def add(a: int, b: int) -> int:
        return a + b

    result = call_function([add], ToolCall("add", {"a": 1, "b": 2, "c": 3}))
    assert result.startswith("error: TypeError:") and "'c'" in result and ran == []
    assert call_function([add], ToolCall("add", {"a": 1, "b": 2})) == "3"


def test_untyped_parameters_take_their_defaults_type_or_any_value():
    def f(anything, n=5, ratio=0.5, flag=False, name="x", tags=None):
        return None

    [tool] = tools_from([f])
    assert tool.parameters["properties"] == {
        "anything": {},
        "n": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "name": {"type": "string"},
        "tags": {},
    }
    assert tool.parameters["required"] == ["anything"]


def test_an_async_function_is_awaited():
    async def double(n: int) -> int:
        return 2 * n

    assert call_function([double], ToolCall("double", {"n": 21})) == "42"


# -- 4. what a function does is a result, never the end of the command ---------------------------------


class Unshowable:
    def __str__(self) -> str:
        raise RuntimeError("no")


def circular() -> list:
    loop: list = []
    loop.append(loop)
    return loop


class Unsaid(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def raising(error: BaseException) -> Callable[[], object]:
    def f() -> object:
        raise error

    return f


@pytest.mark.parametrize(
    "function",
    [
        lambda: {(1, 2): 3},
        circular,
        lambda: "half an emoji \ud83d",
        lambda: {"value": Unshowable()},
        raising(SystemExit(3)),
        raising(ValueError("half an emoji \ud83d")),
        raising(Unsaid()),
    ],
    ids=["tuple-keys", "circular", "lone-surrogate", "str-raises", "sys-exit", "surrogate-message", "unsaid-error"],
)
def test_what_has_no_text_form_is_an_error_result(function):
    function.__name__ = "f"
    result = call_function([function], ToolCall("f", {}))
    assert result.startswith("error: ")
    result.encode("utf-8")  # text a prompt can hold


def test_ctrl_c_in_a_function_still_stops_the_command():
    with pytest.raises(KeyboardInterrupt):
        call_function([raising(KeyboardInterrupt())], ToolCall("f", {}))


def test_a_file_that_calls_sys_exit_as_it_loads_is_one_line(members, capsys, tmp_path):
    code, _, err = run(capsys, "--functions", functions_file(tmp_path, "import sys\n\nsys.exit(0)\n"), "Go")
    assert code == 2 and "the file failed to run (SystemExit" in err and err.count("\n") == 1


def test_a_function_calling_sys_exit_does_not_end_the_loop(members, capsys, tmp_path):
    leaving = functions_file(tmp_path, "import sys\n\ndef get_weather(city: str) -> str:\n    sys.exit(3)\n")
    members += [scripted("a", calls_until("SystemExit")), scripted("b", calls_until("SystemExit"))]
    code, out, err = loop(capsys, leaving)
    assert code == 0, err
    assert out == "Done.\n" and "→ error: SystemExit: 3]" in err


# -- 5. one-line breakages ---------------------------------------------------------------------------


def test_only_functions_the_file_defines_are_offered(members, capsys, tmp_path):
    source = "from os.path import join\nfrom json import dumps as to_json\n" + WEATHER_PY
    path = functions_file(tmp_path, source)
    assert [f.__name__ for f in load_functions(path)] == ["get_weather"]
    members += [scripted("a", calls_until("18 C")), scripted("b", calls_until("18 C"))]
    code, _, err = loop(capsys, path)
    assert code == 0, err
    assert '"name": "get_weather"' in members[0].model.read
    assert '"join"' not in members[0].model.read and '"to_json"' not in members[0].model.read


def test_the_function_the_call_names_is_the_one_run(members, capsys, tmp_path):
    def first() -> str:
        return "first ran"

    def second() -> str:
        return "second ran"

    assert call_function([first, second], ToolCall("second", {})) == "second ran"
    source = "def first() -> str:\n    return 'first ran'\n\ndef second() -> str:\n    return 'second ran'\n"
    call = '{"tool_calls": [{"name": "second", "arguments": {}}]}'
    members += [scripted("a", calls_until(" ran", call)), scripted("b", calls_until(" ran", call))]
    code, _, err = loop(capsys, functions_file(tmp_path, source))
    assert code == 0, err
    assert "second({}) → second ran" in err and "first ran" not in members[0].model.read


def test_arguments_reach_the_function_as_parsed_values(members, capsys, tmp_path):
    source = "def add(a: int, b: int) -> int:\n    return a + b\n"
    call = '{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}'
    script = calls_until("returned", call)
    members += [scripted("a", script), scripted("b", script)]
    code, _, err = loop(capsys, functions_file(tmp_path, source))
    assert code == 0, err
    assert 'add({"a": 2, "b": 3}) → 5]' in err and "add returned: 5\n" in members[0].model.read


def test_a_result_that_is_not_text_reaches_the_models_as_json(members, capsys, tmp_path):
    source = "def get_weather(city: str) -> dict:\n    return {'city': city, 'celsius': 18, 'sunny': True}\n"
    members += [scripted("a", calls_until("celsius")), scripted("b", calls_until("celsius"))]
    code, _, err = loop(capsys, functions_file(tmp_path, source))
    assert code == 0, err
    assert 'get_weather returned: {"city": "Paris", "celsius": 18, "sunny": true}' in members[0].model.read


def test_results_are_in_the_templates_own_tool_format_where_it_has_one(members, capsys, tmp_path):
    members += [scripted("qwen", calls_until("18 C"), QWEN_TOOLS), scripted("plain", calls_until("18 C"))]
    code, out, err = loop(capsys, functions_file(tmp_path))
    assert code == 0, err
    assert out == "Done.\n"
    qwen, plain = (member.model.read for member in members)
    assert "<|im_start|>user\n<tool_response>\n18 C and sunny in Paris\n</tool_response><|im_end|>" in qwen
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in qwen
    assert "get_weather returned: 18 C and sunny in Paris" in plain and "tool_response" not in plain
