"""Schemas as pure functions, held to their exact output: the limit on references and its words,
a reference that points past a list, what a rewrite changes and what it leaves as written, how
much a schema may inline, and the outline told within its budget."""

from __future__ import annotations

import json

import pytest

from specem_local.engine import schemas
from specem_local.errors import SettingError

BIG = {"type": "string", "description": "x" * 16_000}  # a definition just under INLINE_LIMIT


def references(count: int) -> dict:
    return {
        "$defs": {"leaf": {"type": "string"}},
        "properties": {f"p{i}": {"$ref": "#/$defs/leaf"} for i in range(count)},
    }


def test_ten_thousand_references_are_allowed_and_one_more_is_refused_naming_the_field():
    assert schemas.depth_followed(references(10_000), "tools") == 4
    with pytest.raises(SettingError) as caught:
        schemas.depth_followed(references(10_001), "tools")
    assert str(caught.value) == "tools: more than 10,000 references ($ref)" and caught.value.field == "tools"


def test_a_reference_past_the_end_of_a_list_points_at_nothing():
    schema = {"allOf": [{"type": "string"}]}
    assert schemas.resolve(schema, "#/allOf/0") == {"type": "string"}
    assert schemas.resolve(schema, "#/allOf/1") is None


def test_a_match_all_pattern_without_named_keys_is_every_keys_schema():
    schema = {"type": "object", "patternProperties": {".*": {"type": "integer"}}}
    assert schemas.rewritten(schema) == ({"type": "object", "additionalProperties": {"type": "integer"}}, ())


def test_a_match_all_pattern_beside_additional_properties_of_its_own_is_served_as_written():
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}},
        "patternProperties": {".*": {"type": "string"}},
        "additionalProperties": False,
    }
    assert schemas.rewritten(schema) == (schema, ())


def test_an_annotations_value_is_data_and_is_kept_as_written():
    schema = {"type": "object", "examples": {"not": {}}, "default": {"not": {}}, "properties": {"x": {"not": {}}}}
    served, notes = schemas.rewritten(schema)
    assert served == {"type": "object", "examples": {"not": {}}, "default": {"not": {}}, "properties": {"x": False}}
    assert notes == ()


def test_an_all_of_inlines_its_references_until_a_mebibyte_is_inlined_then_keeps_them():
    reference = {"$ref": "#/$defs/big"}
    inlined = schemas.INLINE_TOTAL // len(json.dumps(BIG))  # 65 copies of 16,037 characters
    served, _ = schemas.rewritten({"$defs": {"big": BIG}, "allOf": [reference] * (inlined + 3)})
    assert served["allOf"] == [BIG] * inlined + [reference] * 3


def test_a_compact_outline_takes_up_to_a_tenth_of_the_budget():
    keys = range(15)
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string"} for i in keys},
        "required": [f"field_{i}" for i in keys if i % 2 == 0],
    }
    outline = "{" + ", ".join(f'"field_{i}"{"" if i % 2 == 0 else "?"}: string' for i in keys) + "}"
    assert len(outline) == 297  # within 300 characters: the whole outline, not a shallower one
    assert schemas.told(schema, compact=True) == outline


def test_an_outline_too_long_even_at_its_shallowest_is_cut_at_the_budget_and_marked():
    listed = " | ".join(['"' + "a" * 39] * 8) + " | …"  # each value cut at 40 characters, 8 of them
    assert schemas.told({"enum": ["a" * 50] * 9}, compact=True) == listed[:300] + " …"
