"""Conditions rewritten, held to their exact output and to the values they accept (judged by
``jsonschema`` as in ``test_conditions.py``): a ``then`` that is ``false``, an ``if`` of
alternatives, keys a pattern admits, a ``not`` of an integer key, the branches written for a
``oneOf`` of keys and for values a key cannot take, and an ``if`` that cannot be said."""

from __future__ import annotations

from specem_local.engine import schemas
from tests.engine.test_conditions import NOT_OBJECTS, assert_same_values, conditions_left, objects


def test_a_then_that_is_false_makes_every_value_passing_the_test_invalid():
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}},
              "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]}, "then": False}  # fmt: skip
    assert_same_values(schema, objects(kind=["a", "b", "c"], x=[1]) + NOT_OBJECTS)


def test_an_if_of_alternatives_on_one_key_is_one_branch_per_value():
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b", "c"]}},
              "if": {"anyOf": [{"properties": {"kind": {"const": "a"}}}, {"properties": {"kind": {"const": "b"}}}]},
              "then": {"required": ["x"]}}  # fmt: skip
    assert_same_values(schema, objects(kind=["a", "b", "c", "d"], x=[1]))


def test_an_if_of_alternatives_with_more_to_say_stays_as_written():
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}},
              "if": {"anyOf": [{"properties": {"kind": {"const": "a"}}}], "required": ["kind"]},
              "then": {"required": ["x"]}}  # fmt: skip
    served, notes = schemas.rewritten(schema)
    assert served == schema and conditions_left(served) == {"if", "then"} and notes == ()


def test_a_key_a_pattern_admits_is_no_contradiction_of_a_closed_object():
    schema = {"type": "object", "additionalProperties": False, "patternProperties": {"^x": {}},
              "properties": {"kind": {"enum": ["a", "b"]}},
              "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x1"]}}  # fmt: skip
    assert_same_values(schema, objects(kind=["a", "b"], x1=[1], y=[1]))


def test_a_not_of_an_integer_keys_value_is_every_other_integer():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}},
              "not": {"properties": {"n": {"const": 3}}, "required": ["n"]}}  # fmt: skip
    assert_same_values(schema, objects(n=[1, 2, 3, 4, 5], m=[1]))


def test_a_one_of_required_keys_is_each_branch_with_the_others_keys_absent():
    schema = {"oneOf": [{"required": ["a", "b"]}, {"required": ["c"]}]}
    served, notes = schemas.rewritten(schema)
    absent_a_or_b = {"anyOf": [{"properties": {"a": False}}, {"properties": {"b": False}}]}
    assert served == {
        "anyOf": [
            {"type": "object", "required": ["a", "b"], "allOf": [{"properties": {"c": False}}]},
            {"type": "object", "required": ["c"], "allOf": [absent_a_or_b]},
        ]
    }
    assert notes == ()


def test_a_tested_value_the_key_cannot_take_gets_no_branch():
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}},
              "if": {"properties": {"kind": {"enum": ["a", "z"]}}}, "then": {"required": ["x"]}}  # fmt: skip
    served, _ = schemas.rewritten(schema)
    assert served == {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}},
        "anyOf": [
            {"properties": {"kind": {"const": "a"}}, "required": ["kind"], "allOf": [{"required": ["x"]}]},
            {"properties": {"kind": {"enum": ["b"]}}, "required": ["kind"]},
            {"properties": {"kind": False}, "allOf": [{"required": ["x"]}]},
        ],
    }
