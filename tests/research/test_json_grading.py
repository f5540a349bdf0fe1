"""A JSON answer (``specem eval --schema``) is graded only when it is whole: an answer cut by
``max_tokens`` or the context, or one that does not parse, is wrong whatever numbers its text
holds (the plain grader would read the last one)."""

from __future__ import annotations

import json

import pytest

from specem_local.commands.cli import main
from specem_local.labelled import Task

SIX_SEVENS = Task("1", "What is six times seven?", "42")
WHOLE = '{"reasoning": "six sevens are 42", "answer": 42}'


def test_a_whole_json_answer_is_graded_by_its_answer_field():
    assert SIX_SEVENS.grade(WHOLE, "eos", structured=True) == ("42", True)
    assert SIX_SEVENS.grade('{"reasoning": "it is 42", "answer": 41}', "eos", structured=True) == ("41", False)


@pytest.mark.parametrize("finish_reason", ["length", "context", "cancelled"])
def test_a_cut_json_answer_is_wrong(finish_reason):
    cut = '{"reasoning": "six sevens are 42, so the answer is 42'
    assert SIX_SEVENS.grade(cut, finish_reason, structured=True) == (None, False)
    assert SIX_SEVENS.grade(WHOLE, finish_reason, structured=True) == (None, False)  # even if it parses


def test_a_json_answer_that_does_not_parse_is_wrong_even_when_it_ended():
    assert SIX_SEVENS.grade('{"reasoning": "42", "answer": 42', "eos", structured=True) == (None, False)
    assert SIX_SEVENS.grade("The answer is 42.", "eos", structured=True) == (None, False)


def test_plain_answers_are_graded_as_before():
    assert SIX_SEVENS.grade("Six sevens: the answer is 42.") == ("42", True)
    assert SIX_SEVENS.grade("Six sevens: 6 * 7 = 42", "length") == ("42", True)  # plain: the last number
    assert SIX_SEVENS.grade(WHOLE) == ("42", True)


def test_a_cut_tool_call_envelope_is_wrong():
    task = Task("t", "Area?", "", tools=({"type": "function", "function": {"name": "area"}},))
    assert task.grade('{"tool_calls": [{"name": "area", "arguments": {"base": 1', "length") == (None, False)


def test_eval_schema_does_not_credit_an_answer_cut_by_max_tokens(members, tmp_path, capsys):
    """The member writes the right number in its reasoning and is cut before the answer field:
    before the fix, the cut text did not parse and its last number (42) was taken as right."""
    members += [("a", '{"reasoning": "six sevens are 42 and that is all there is to it", "answer": 42}')]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "1", "question": "What is six times seven?", "answer": 42}\n')
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"reasoning": {"type": "string"},
                                  "answer": {"type": "number"}}, "required": ["reasoning", "answer"],
                                  "additionalProperties": False}))  # fmt: skip
    out = tmp_path / "out"
    assert main(["eval", str(tasks), "--schema", str(schema), "--max-tokens", "40", "--output", str(out)]) == 0
    [item] = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    for name in ("ensemble", "a"):
        result = item["systems"][name]
        assert result["finish_reason"] == "length" and "42" in result["text"], result
        assert result["correct"] is False and result["extracted"] is None
    assert json.loads((out / "report.json").read_text())["systems"]["ensemble"]["correct"] == 0
