"""The schemas people have (issue 43), as pure functions: what is checked before a compiler sees
a schema, what is rewritten so llguidance can serve it (exactly, or with a note), and the outline
the members are told when the whole schema would crowd their context."""

from __future__ import annotations

import json

import pytest

from specem_local.engine import schemas
from specem_local.errors import SettingError


def test_depth_with_references_followed_counts_each_link_and_a_cycle_once():
    def chain(links: int) -> dict:
        defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(links)}
        return {"$defs": {**defs, f"d{links}": {"type": "string"}}, "$ref": "#/$defs/d0"}

    assert schemas.depth_followed(chain(30)) >= schemas.depth_followed(chain(3)) + 27  # a level per link
    loop = {"$defs": {"t": {"properties": {"kid": {"$ref": "#/$defs/t"}}}}, "$ref": "#/$defs/t"}
    assert schemas.depth_followed(loop) < 10  # recursion is a rule that refers to itself, not depth
    shared = {"$defs": {"leaf": {"type": "string"}},
              "properties": {f"p{i}": {"$ref": "#/$defs/leaf"} for i in range(1000)}}  # fmt: skip
    assert schemas.depth_followed(shared) < 10  # each definition visited once: linear


def test_checks_name_where_in_the_schema_the_value_is():
    with pytest.raises(SettingError, match=r"^format\.properties\.n\.maximum: an integer of 70 bits"):
        schemas.check({"properties": {"n": {"maximum": 1 << 69}}}, "schema", "format")
    with pytest.raises(SettingError, match="-inf is not a JSON number"):
        schemas.check({"minimum": float("-inf")})
    schemas.check({"maximum": (1 << 64) - 1, "minimum": -(1 << 63), "multipleOf": 0.5})  # the 64-bit edges pass


def test_a_refs_siblings_go_as_its_draft_says():
    old = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"x": {"type": "integer"}},
           "properties": {"a": {"$ref": "#/definitions/x", "minimum": 3, "title": "A"}}}  # fmt: skip
    served, notes = schemas.rewritten(old)
    assert served["properties"]["a"] == {"$ref": "#/definitions/x"} and notes == ()
    new = {"$defs": {"x": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/x", "minimum": 3, "title": "A"}}}
    served, _ = schemas.rewritten(new)
    assert served["properties"]["a"] == {"$ref": "#/$defs/x", "minimum": 3}  # 2020-12: siblings apply
    assert new["properties"]["a"]["title"] == "A"  # the caller's schema is left as it was


def test_intersections_llguidance_refuses_are_rewritten_to_the_same_schema():
    schema = {
        "definitions": {"node": {"type": "object", "properties": {"kids": {"$ref": "#/definitions/node"}}}},
        "properties": {
            "one": {"allOf": [{"$ref": "#/definitions/node"}, {"required": ["kids"]}]},
            "either": {"anyOf": [{"$ref": "#/definitions/node"}], "type": "object"},
            "gone": {"not": {}},
        },
    }
    served, notes = schemas.rewritten(schema)
    assert served["properties"]["one"]["allOf"][0] == schema["definitions"]["node"]
    assert "type" not in served["properties"]["either"]
    assert served["properties"]["gone"] is False and notes == ()


def test_a_match_all_pattern_becomes_additional_properties_with_a_note_where_it_changes_anything():
    same = {"properties": {"a": {"type": "string"}}, "patternProperties": {".*": {"type": "string"}}}
    served, notes = schemas.rewritten(same)
    assert served == {"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}
    assert notes == ()
    unanchored = {"properties": {"a": {"type": "integer"}}, "patternProperties": {"^[a-z]*": {"type": "string"}}}
    served, notes = schemas.rewritten(unanchored)
    assert served["additionalProperties"] == {"type": "string"} and "keys not named" in notes[0]
    narrow = {"properties": {"a": {}}, "patternProperties": {"^x-": {"type": "string"}}}
    assert schemas.rewritten(narrow)[0] == narrow  # a pattern some keys do not match stays


def test_a_long_schema_is_told_as_an_outline_within_its_budget():
    short = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert schemas.told(short) == json.dumps(short)
    wide = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "description": "x" * 3000},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["a", "b"]},
        "child": {"$ref": "#"},
    }}  # fmt: skip
    outline = schemas.told(wide)
    assert outline.startswith('{"name": string, "tags"?: [string], "kind"?: "a" | "b", "child"?: ')
    assert len(outline) <= schemas.OUTLINE_BUDGET and "x" * 100 not in outline
    keys = {f"key{i}": {"type": "integer", "description": "y" * 50} for i in range(200)}
    many = {"type": "object", "properties": keys}
    assert "more)" in schemas.told(many) and len(schemas.told(many)) <= schemas.OUTLINE_BUDGET


def test_the_outline_of_each_kind_of_schema_word_for_word():
    root = {
        "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "type": "object",
        "properties": {
            "at": {"$ref": "#/$defs/pt"},
            "me": {"$ref": "#"},
            "gone": {"$ref": "#/$defs/nothing"},
            "mode": {"const": "fast"},
            "size": {"enum": [1, 2]},
            "any": {"type": "object"},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "one": {"oneOf": [{"type": "boolean"}, {"type": "null"}]},
            "both": {"allOf": [{"type": "string"}, {"format": "date"}]},
            "when": {"type": "string", "format": "date-time"},
            "list": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            "loose": {"properties": {"y": {"type": "string"}}},
        },
    }
    inner = (  # the root again, one level less deep, its own reference then named
        '{"at"?: {…}, "me"?: #, "gone"?: nothing, "mode"?: "fast", "size"?: 1 | 2, "any"?: object, '
        '"either"?: (string | integer), "one"?: (boolean | null), "both"?: string & any, "when"?: s'
        'tring (date-time), "list"?: […], "loose"?: {…}}'
    )
    expected = (
        '{"at"?: {"x": number}, "me"?: ' + inner + ', "gone"?: nothing, "mode"?: "fast", "size"?: 1 | 2, '
        '"any"?: object, "either"?: (string | integer), "one"?: (boolean | null), "both"?: string & any, '
        '"when"?: string (date-time), "list"?: [[…]], "loose"?: {"y"?: string}}'
    )
    assert schemas._outline(root, root, 3, frozenset()) == expected
    assert schemas._outline(root, {"$ref": "#/"}, 3, frozenset()) == "root"
