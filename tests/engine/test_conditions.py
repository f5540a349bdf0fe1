"""Conditions rewritten into keywords llguidance follows (issue 43): for each form, the rewritten
schema must accept exactly the values the schema as written accepts, judged by ``jsonschema``
over every combination of a few keys and values, and must hold no ``if``, ``not`` or ``oneOf``
left for llguidance to leave out. A form that cannot be said exactly stays as written (and is
refused by the compiler)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import jsonschema
import pytest

from specem_local.engine import schemas
from specem_local.engine.conditions import integers_except, not_one_of
from specem_local.engine.formats import output_format_from
from specem_local.errors import SettingError

NOT_OBJECTS: list[Any] = [None, True, 0, 1.5, "text", [], ["x"]]


def objects(**choices: list[Any]) -> list[dict[str, Any]]:
    """Every object with each key absent or one of its values (``...`` is absent)."""
    keys = list(choices)
    values = [[..., *options] for options in choices.values()]
    return [{k: v for k, v in zip(keys, combo) if v is not ...} for combo in itertools.product(*values)]


def conditions_left(schema: Any) -> set[str]:
    found, stack = set(), [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found |= {key for key in ("if", "then", "else", "not", "oneOf") if key in node}
            stack += [value for key, value in node.items() if key != "properties"] + list(
                node.get("properties", {}).values()
            )
        elif isinstance(node, list):
            stack += node
    return found


def assert_same_values(schema: dict[str, Any], instances: list[Any]) -> dict[str, Any]:
    served, _ = schemas.rewritten(schema)
    assert conditions_left(served) == set(), json.dumps(served)
    written, rewritten = jsonschema.Draft202012Validator(schema), jsonschema.Draft202012Validator(served)
    for value in instances:
        assert written.is_valid(value) == rewritten.is_valid(value), (value, json.dumps(served))
    assert any(written.is_valid(v) for v in instances) and not all(written.is_valid(v) for v in instances)
    return served


DISCRIMINATED = {
    "type": "object",
    "properties": {"kind": {"type": "string", "enum": ["a", "b", "c"]}, "size": {"type": "integer"}},
    "allOf": [
        {"if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["size"]}},
        {"if": {"properties": {"kind": {"const": "b"}}, "required": ["kind"]},
         "then": {"properties": {"size": {"maximum": 2}}}, "else": {"required": ["name"]}},
    ],
}  # fmt: skip


def test_a_discriminated_union_of_if_then_else_is_one_branch_per_value():
    instances = objects(kind=["a", "b", "c", "d", 3], size=[1, 5], name=["n"]) + NOT_OBJECTS
    assert_same_values(DISCRIMINATED, instances)


def test_an_if_on_a_string_without_an_enum_sends_the_other_strings_through_a_pattern():
    schema = {"type": "object", "properties": {"kind": {"type": "string"}},
              "if": {"properties": {"kind": {"enum": ["ab", "a.b"]}}}, "then": {"required": ["x"]},
              "else": {"required": ["y"]}}  # fmt: skip
    instances = objects(kind=["ab", "a.b", "a", "abc", "axb", "", "b"], x=[1], y=[1])
    assert_same_values(schema, instances)


def test_an_if_whose_key_is_described_elsewhere_covers_every_other_value_and_non_objects():
    """v2ray's inbound config: the tested key's schema is behind the allOf's reference, so a
    value of any type may meet the test; the test says ``"type": "object"``."""
    schema = {"required": ["protocol"], "allOf": [
        {"if": {"type": "object", "properties": {"protocol": {"const": "http"}}, "required": ["protocol"]},
         "then": {"required": ["port"]}},
        {"if": {"type": "object", "properties": {"protocol": {"const": "socks"}}, "required": ["protocol"]},
         "then": {"properties": {"port": {"minimum": 1000}}}},
    ]}  # fmt: skip
    instances = objects(protocol=["http", "socks", "ftp", 7, None], port=[80, 1080]) + NOT_OBJECTS
    assert_same_values(schema, instances)


def test_a_key_whose_schema_is_a_reference_is_followed():
    schema = {"type": "object", "definitions": {"kind": {"enum": ["STRUCT", "RECORD", "INT"]}},
              "properties": {"type": {"$ref": "#/definitions/kind"}},
              "if": {"properties": {"type": {"enum": ["STRUCT", "RECORD"]}}},
              "then": {"required": ["fields"]}}  # fmt: skip
    instances = objects(type=["STRUCT", "RECORD", "INT"], fields=[[]])
    assert_same_values(schema, instances)


def test_conditions_on_different_keys_are_each_said_apart():
    schema = {"allOf": [{"if": {"properties": {"a": {"const": "x"}}}, "then": {"required": ["c"]}},
                        {"if": {"properties": {"b": {"const": "y"}}}, "then": {"required": ["d"]}}]}  # fmt: skip
    assert_same_values(schema, objects(a=["x", "z"], b=["y", "z"], c=[1], d=[1]) + NOT_OBJECTS)


def test_a_not_of_required_keys_is_one_of_them_absent():
    for negated in (
        {"required": ["a"]},
        {"required": ["a", "b"]},
        {"allOf": [{"required": ["a"]}, {"required": ["b"]}]},
    ):
        assert_same_values({"not": negated}, objects(a=[1], b=[2], c=[3]) + NOT_OBJECTS)
    appveyor = {
        "type": "object",
        "allOf": [{"not": {"required": ["skip_tags"]}}, {"not": {"required": ["skip_commits"]}}],
    }
    assert_same_values(appveyor, objects(skip_tags=[True], skip_commits=[False], image=["x"]))


def test_a_not_of_listed_values_is_every_other_value():
    winget = {"type": "array", "items": {"type": "integer", "not": {"enum": [0, 3]}}}
    assert_same_values(winget, [[n] for n in range(-3, 6)] + [[1, 0], []])
    travis = {"properties": {"provider": {"not": {"enum": ["script", "npm"]}}}}
    assert_same_values(travis, objects(provider=["script", "npm", "s3", "", "scripts", 1, None, ["script"]]))
    assert_same_values({"type": "boolean", "not": {"const": True}}, [True, False, 1])


def test_a_not_of_a_keys_values_is_the_key_present_with_another_value_and_no_more():
    golangci = {"required": ["allow"], "not": {"properties": {"allow": {"const": "reject"}}}}
    assert_same_values(golangci, objects(allow=["reject", "error", 2], x=[1]) + NOT_OBJECTS)
    template = {"type": "object", "properties": {"id": {"type": "string"}},
                "not": {"required": ["id"], "properties": {"id": {"enum": ["x", "y"]}}}}  # fmt: skip
    assert_same_values(template, objects(id=["x", "y", "z", ""], other=[1]))


def test_a_one_of_required_keys_is_exactly_one_of_them():
    for branches in ([["src"], ["handle"]], [["a", "b"], ["c"]], [["a"], ["a", "b"]], [["a"], ["b"], ["c"]]):
        schema = {"properties": {"src": {"type": "string"}}, "oneOf": [{"required": keys} for keys in branches]}
        assert_same_values(schema, objects(src=["s"], handle=["h"], a=[1], b=[2], c=[3]) + NOT_OBJECTS)


def test_a_branch_that_contradicts_its_node_is_dropped_not_served():
    """llguidance refuses a whole schema with an unsatisfiable branch (typo3's error handlers)."""
    schema = {"type": "object", "additionalProperties": False, "required": ["kind"],
              "properties": {"kind": {"enum": ["page", "php"]}, "page": {"type": "string"}},
              "allOf": [{"if": {"properties": {"kind": {"const": "php"}}}, "then": {"required": ["class"]}},
                        {"if": {"properties": {"kind": {"const": "page"}}},
                         "then": {"required": ["page"]}}]}  # fmt: skip
    served = assert_same_values(schema, objects(**{"kind": ["page", "php"], "page": ["p"], "class": ["C"]}))
    assert len(served["anyOf"]) == 1  # the php branch could never hold
    compiled = output_format_from(schema=schema)  # and llguidance serves what is left
    assert compiled is not None and compiled.notes == ()


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"n": {"type": "number"}}, "if": {"properties": {"n": {"const": 1}}},
         "then": {"required": ["m"]}},
        {"type": "array", "if": {"items": {"type": "string"}}, "then": {"minItems": 1}},
        {"type": "object", "if": {"properties": {"a": {"const": "x"}, "b": {"const": "y"}}},
         "then": {"required": ["c"]}},
        {"type": "integer", "not": {"minimum": 3}},
        {"type": "object", "if": {"properties": {"k": {"type": "string", "const": 3}}}, "then": {"required": ["m"]}},
        {"type": "number", "not": {"enum": [1.5]}},
    ],
)  # fmt: skip
def test_a_condition_that_cannot_be_said_exactly_stays_as_written_and_is_refused(schema):
    served, _ = schemas.rewritten(schema)
    assert conditions_left(served) and served == schema
    with pytest.raises(SettingError, match="cannot be followed"):
        output_format_from(schema=schema)


def test_the_pattern_for_strings_not_listed_matches_every_other_string():
    listed = ["a.b", "]", "^x", "a-b", "\\", "", "ab", "abc"]
    pattern = re.compile(not_one_of(listed))
    for text in listed:
        assert not pattern.search(text), text
    for text in ["a", "axb", "abcd", "b", " ", "]]", "x", "a-", "\\\\", "\n", "é"]:
        assert pattern.search(text), text


def test_the_ranges_for_integers_not_listed_cover_every_other_integer():
    ranges = integers_except([3, 0, 1, 7])
    covered = {n for n in range(-5, 12) for r in ranges if r.get("minimum", -99) <= n <= r.get("maximum", 99)}
    assert covered == set(range(-5, 12)) - {0, 1, 3, 7}


def test_the_real_schemas_with_conditions_compile_and_say_no_approximation_for_them():
    compiled = output_format_from(schema=DISCRIMINATED)
    assert compiled is not None and not any("if" in note or "oneOf" in note for note in compiled.notes)
    one_of = output_format_from(
        schema={"properties": {"src": {"type": "string"}}, "oneOf": [{"required": ["src"]}, {"required": ["handle"]}]}
    )
    assert one_of is not None and one_of.notes == ()
