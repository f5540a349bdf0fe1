"""One typed ask at every door (issue 54): a misspelt or missing field of the ask fails the type
checker where a front end builds it, and a misspelt key fails the parser of each door that takes
keys (the Python API's keywords, a batch line, the command line), never the answer."""

from __future__ import annotations

import json

import pytest
from mypy import api as mypy

from specem_local.commands.batch import parse_line
from specem_local.commands.cli import build_parser
from specem_local.engine import Ask, FormatAsk, ask_from
from specem_local.errors import SettingError

MISSPELT = """
from specem_local.engine import Ask, FormatAsk
Ask("hi", thinkk=True)
FormatAsk(shema={})
Ask("hi").setings
Ask()
"""


def test_a_misspelt_or_missing_field_of_the_ask_fails_the_type_checker(tmp_path):
    source = tmp_path / "front_end.py"
    source.write_text(MISSPELT)
    out, _, status = mypy.run([str(source), "--no-incremental", "--cache-dir", str(tmp_path / "cache")])
    assert status == 1
    for said in ('Unexpected keyword argument "thinkk"', 'Unexpected keyword argument "shema"',
                 'has no attribute "setings"', 'Missing positional argument "prompt"'):  # fmt: skip
        assert said in out, out


@pytest.mark.parametrize(("key", "meant"), [("shema", "schema"), ("temprature", "temperature"), ("thinks", "think")])
def test_a_misspelt_keyword_of_the_python_api_is_a_setting_error_with_a_did_you_mean(key, meant):
    with pytest.raises(SettingError, match=f"unknown keyword '{key}'; did you mean '{meant}'") as refused:
        ask_from("hi", {key: 1})
    assert refused.value.field == key


def test_the_python_apis_keywords_sort_into_the_ask():
    ask = ask_from("hi", {"schema": {"type": "object"}, "max_tokens": 9, "think": "low", "models": ["a"]})
    assert ask == Ask("hi", {"max_tokens": 9}, FormatAsk(schema={"type": "object"}), "low", ("a",))
    with pytest.raises(SettingError, match="models must be a list"):
        ask_from("hi", {"models": "a"})


def test_a_misspelt_key_of_a_batch_line_is_its_error_record():
    line = parse_line(json.dumps({"id": "x", "prompt": "hi", "shema": {}}), 1, {})
    assert line.ask is None and line.error is not None and "did you mean 'schema'" in line.error


def test_a_misspelt_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["run", "--shema", "s.json", "hi"])
    assert stopped.value.code == 2 and "unrecognized arguments: --shema" in capsys.readouterr().err


def test_a_compiled_format_passes_through_the_keywords_and_none_is_no_format():
    from specem_local.engine import FormatAsk as Asked

    compiled = Asked(regex="[0-9]+").compiled()
    assert ask_from("hi", {"output_format": compiled}).output is compiled
    assert ask_from("hi", {}).output is None
    assert ask_from("hi", {"max_tokens": 5}).compiled_format() is None


def test_the_format_asked_compiles_each_kind_it_names():
    assert FormatAsk(json=True).compiled().kind == "json"  # type: ignore[union-attr]
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
    assert FormatAsk(tools=tools).compiled().kind == "tools"  # type: ignore[union-attr]
    assert FormatAsk().compiled() is None


@pytest.mark.parametrize(
    ("options", "says", "field"),
    [
        (
            {"output_format": "json"},
            "output_format must be a format from output_format_from (or give schema=, ...)",
            "output_format",
        ),
        ({"models": "a"}, "models must be a list of the loaded models' names", "models"),
    ],
)
def test_an_ask_keyword_of_the_wrong_kind_is_said_to_the_letter(options, says, field):
    with pytest.raises(SettingError) as refused:
        ask_from("hi", options)
    assert str(refused.value) == says and refused.value.field == field


def test_a_compiled_format_and_the_formats_own_keys_are_one_or_the_other():
    compiled = FormatAsk(json=True).compiled()
    with pytest.raises(SettingError) as refused:
        ask_from("hi", {"output_format": compiled, "schema": {}})
    assert str(refused.value) == "give output_format or the format's own keys (schema, tools, ...), not both"
    assert refused.value.field == "output_format"
