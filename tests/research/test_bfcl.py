"""BFCL's AST rule as research/bfcl.py applies it, on items of BFCL's own data, and the
conversion of its function descriptions to tools."""

from __future__ import annotations

import json

from specem_local.labelled import calls_correct, load_tasks, tool_name
from specem_research.bfcl import json_schema
from tests.conftest import ROOT

TRIANGLE = {
    "name": "calculate_triangle_area",
    "parameters": {
        "type": "dict",
        "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}, "unit": {"type": "string"}},
        "required": ["base", "height"],
    },
}
TRUTH = [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]


def call(**arguments):
    return [{"name": "calculate_triangle_area", "arguments": arguments}]


def test_the_ast_rule_on_a_simple_item():
    assert calls_correct(call(base=10, height=5), [TRIANGLE], TRUTH)  # the optional unit may be left out
    assert calls_correct(call(base=10, height=5, unit="Units"), [TRIANGLE], TRUTH)  # strings: no case
    assert not calls_correct(call(base=10, height=6), [TRIANGLE], TRUTH)
    assert not calls_correct(call(base=10), [TRIANGLE], TRUTH)  # a required argument missing
    assert not calls_correct(call(base=10, height=5, colour="red"), [TRIANGLE], TRUTH)  # an unknown one
    assert not calls_correct(call(base="10", height=5), [TRIANGLE], TRUTH)  # the wrong type
    assert not calls_correct(call(base=10, height=5) * 2, [TRIANGLE], TRUTH)  # two calls
    assert not calls_correct([{"name": "other", "arguments": {}}], [TRIANGLE], TRUTH)


def test_an_integer_is_a_float_and_dotted_names_are_tools_with_underscores():
    hypot = {
        "name": "math.hypot",
        "parameters": {"type": "dict", "properties": {"x": {"type": "float"}}, "required": ["x"]},
    }
    truth = [{"math.hypot": {"x": [4.0]}}]
    assert tool_name("math.hypot") == "math_hypot"
    assert calls_correct([{"name": "math_hypot", "arguments": {"x": 4}}], [hypot], truth)
    assert not calls_correct([{"name": "math.hypot", "arguments": {"x": 4}}], [hypot], truth)
    assert json_schema(hypot["parameters"]) == {
        "type": "object",
        "properties": {"x": {"type": "number"}},
        "required": ["x"],
    }
    assert json_schema({"type": "dict", "properties": {"type": {"type": "tuple"}}}) == {
        "type": "object",
        "properties": {"type": {"type": "array"}},
    }  # a parameter named "type"


def test_the_vendored_items_load_as_tool_call_tasks_and_their_truth_grades_right():
    tasks = load_tasks(ROOT / "research" / "data" / "bfcl_simple_python_dev.jsonl")
    assert len(tasks) == 200 and all(t.tools and t.functions and t.calls for t in tasks)
    first = tasks[0]
    right = json.dumps({"tool_calls": call(base=10, height=5)})
    assert first.grade(right)[1] and not first.grade('{"response": "50"}')[1]
