"""Structured output (issue 37) on fake models: each member drafts under its own matcher, the
committed text's matcher drops invalid candidates and commits forced bytes as rounds of their
own, the final event carries the parsed value, and every bad constraint is one line naming
its field, with the next answer unharmed."""

from __future__ import annotations

import json

import jsonschema
import pydantic
import pytest

from specem_local.engine.formats import FormatMatcher, output_format_from
from specem_local.errors import SettingError
from specem_local.events import RoundEvent
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "number"}, "why": {"type": "string"}},
    "required": ["answer", "why"],
}
JSON_ANSWER = '{"answer": 42, "why": "six sevens"}'


def trio():
    """Three tokenizers: bytes only, and two with whole words of their own."""
    return (
        fake_member("big", JSON_ANSWER, n_params=3000),
        fake_member("mid", JSON_ANSWER, n_params=1500, words=['{"', '": ', " sevens", "answer"]),
        fake_member("small", "No idea at all.", words=[" idea", "No"]),
    )


def rounds_of(events) -> list[RoundEvent]:
    return [e for e in events if isinstance(e, RoundEvent)]


def test_every_tokenizer_drafts_only_what_the_schema_allows_and_the_answer_parses():
    with fake_ensemble(*trio(), segment_tokens=4, model_exit=False) as ensemble:
        events = list(ensemble.stream(QUESTION, schema=SCHEMA, max_tokens=120))
    final = events[-1]
    assert final.finish_reason == "eos" and final.parsed == {"answer": 42, "why": "six sevens"}
    jsonschema.validate(json.loads(final.text), SCHEMA)
    rounds = rounds_of(events)
    forced = [r for r in rounds if r.decision == "forced"]
    assert forced and forced[0].text == '{"answer": ' and all(r.author == "" and not r.candidates for r in forced)
    assert "".join(r.text for r in rounds) == final.text and final.rounds == len(rounds)
    assert sum(final.wins.values()) == len(rounds) - len(forced)  # forced text is no model's
    committed = FormatMatcher(output_format_from(SCHEMA))
    for event in rounds:  # every candidate of every round was a valid continuation
        assert all(committed.accepts(c.text, c.ended) for c in event.candidates), event
        committed.commit(event.text)
    drafted_by = {c.model for r in rounds for c in r.candidates}
    assert drafted_by == {"big", "mid", "small"}  # the member that wants prose drafted JSON too


def test_a_pydantic_class_any_object_a_regex_and_grammars():
    class Reply(pydantic.BaseModel):
        answer: int
        why: str

    with fake_ensemble(*trio()[:2], segment_tokens=6) as ensemble:
        reply = ensemble.generate(QUESTION, schema=Reply, max_tokens=120).parsed
        assert isinstance(reply, Reply) and reply.answer == 42
        assert isinstance(ensemble.generate(QUESTION, json=True, max_tokens=120).parsed, dict)
        assert ensemble.generate(QUESTION, regex=r"[0-9]{2}", max_tokens=20).parsed.isdigit()
        lark = 'start: "The answer is " NUMBER\nNUMBER: /[0-9]+/'
        assert ensemble.generate(QUESTION, grammar=lark, max_tokens=40).parsed.startswith("The answer is ")
        gbnf = 'root ::= "yes" | "no"'
        assert ensemble.generate(QUESTION, grammar=gbnf, max_tokens=20).parsed in ("yes", "no")


def test_an_answer_cut_by_max_tokens_is_not_parsed():
    with fake_ensemble(*trio()[:2], segment_tokens=4) as ensemble:
        final = ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=6)
    assert final.finish_reason == "length" and final.parsed is None


def test_the_committed_matcher_refuses_what_the_constraint_does_not_allow():
    committed = FormatMatcher(output_format_from(SCHEMA))
    assert committed.forced() == '{"answer": '
    committed.commit('{"answer": ')
    assert committed.accepts("42, ", False) and not committed.accepts("forty", False)
    assert not committed.accepts("42}", True)  # "why" is required: it cannot end there
    committed.commit('42, "why": "x"}')
    assert committed.complete


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        ({"schema": "{"}, "schema", "not JSON"),
        ({"schema": [1]}, "schema", "a JSON Schema is an object"),
        ({"schema": {"type": "integer", "maximum": 1 << 64}}, "schema", "schema.maximum: an integer of 65 bits"),
        ({"schema": {"type": "string", "pattern": "\ud800"}}, "schema", "schema.pattern: not valid Unicode"),
        ({"schema": {"type": "number", "maximum": float("nan")}}, "schema", "schema.maximum: nan is not a JSON number"),
        ({"schema": {"properties": {"\udfff": {}}}}, "schema", "a key is not valid Unicode"),
        ({"schema": {"type": "string", "pattern": "(?=a)b"}}, "schema", "look-around"),
        ({"schema": {"if": {"required": ["a"]}, "then": {"required": ["b"]}}}, "schema", "if, then cannot be followed"),
        ({"schema": {"not": {"type": "string"}}}, "schema", "the keyword not cannot be followed"),
        ({"regex": "a\udc00"}, "regex", "not valid Unicode"),
        ({"schema": {"description": "x" * (1 << 20)}}, "schema", "too large"),
        ({"regex": "a(b"}, "regex", "unclosed group"),
        ({"regex": ""}, "regex", "non-empty"),
        ({"grammar": "start: foo"}, "grammar", "unknown name"),
        ({"grammar": "root ::= foo"}, "grammar", "foo"),
        ({"regex": "[^\\x00-\\x{10FFFF}]"}, "regex", "no text can match it"),
        ({"regex": "a{5000000}"}, "regex", "too many expressions"),
        ({"schema": SCHEMA, "regex": "a"}, "regex", "give one of"),
    ],
)
def test_a_constraint_that_cannot_be_enforced_is_one_line_naming_its_field(given, field, says):
    with fake_ensemble(*trio()[:2]) as ensemble:
        with pytest.raises(SettingError) as caught:
            ensemble.stream(QUESTION, **given)
        assert caught.value.field == field and says in str(caught.value) and "\n" not in str(caught.value)
        assert ensemble.generate(QUESTION, max_tokens=8).tokens == 8  # the next answer is unharmed


@pytest.mark.parametrize(
    ("schema", "note"),
    [
        ({"type": "string", "format": "zzz"}, "Unknown format: zzz"),
        ({"type": "object", "unevaluatedProperties": False}, "unevaluatedProperties"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf not fully supported"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ],
)
def test_a_keyword_served_only_approximately_is_a_note(schema, note):
    constraint = output_format_from(schema)
    assert constraint is not None and any(note in said for said in constraint.notes)
    assert not output_format_from({"type": "object", "properties": {"a": {"type": "string"}}}).notes


def test_a_ref_with_sibling_keys_is_served_as_its_draft_says():
    """Draft 4 ignores a $ref's siblings (WashingtonPost's schemas hold such refs, recursive);
    in 2020-12 they apply, and an annotation sibling never changes what is valid."""
    recursive = {"type": "object", "properties": {"child": {"$ref": "#/definitions/node", "type": "object"}}}
    old = {"$schema": "http://json-schema.org/draft-04/schema#", "definitions": {"node": recursive},
           "$ref": "#/definitions/node"}  # fmt: skip
    assert output_format_from(old) is not None
    new = {"$defs": {"node": {"type": "object", "properties": {"c": {"$ref": "#/$defs/node", "title": "t"}}}},
           "$ref": "#/$defs/node"}  # fmt: skip
    assert output_format_from(new) is not None
    applied = {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n", "minimum": 5}},
               "required": ["a"], "type": "object"}  # fmt: skip
    committed = FormatMatcher(output_format_from(applied))
    assert committed.accepts('{"a": 7}', True) and not committed.accepts('{"a": 3}', True)


def chain(links: int) -> dict:
    """A schema whose $defs form a chain of ``links`` references (issue 43's crash)."""
    defs = {f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}}, "required": ["n"]}
            for i in range(links)}  # fmt: skip
    return {"$defs": {**defs, f"d{links}": {"type": "string"}}, "$ref": "#/$defs/d0"}


@pytest.mark.parametrize("links", [900, 5000])
def test_a_chain_of_references_too_deep_to_compile_is_refused_and_the_process_lives(links):
    with pytest.raises(SettingError, match="levels deep with its references followed") as caught:
        output_format_from(chain(links))
    assert caught.value.field == "schema"
    assert output_format_from(chain(20)) is not None  # a chain of a usual depth is served


def test_a_recursive_schema_is_served():
    kids = {"type": "array", "items": {"$ref": "#/$defs/t"}}
    tree = {"$defs": {"t": {"type": "object", "properties": {"kids": kids}}}, "$ref": "#/$defs/t"}
    assert output_format_from(tree) is not None


def test_a_schema_nested_ten_thousand_levels_is_refused_without_recursion():
    deep: dict = {}
    inner = deep
    for _ in range(10_000):
        inner["items"] = {}
        inner = inner["items"]
    with pytest.raises(SettingError, match="nested more than 64 levels"):
        output_format_from(deep)
    with pytest.raises(SettingError, match="nested more than 64 levels"):
        output_format_from("[" * 20_000 + "]" * 20_000)


def test_a_long_forced_run_is_committed_in_bounded_rounds():
    with fake_ensemble(*trio()[:2]) as ensemble:
        events = list(ensemble.stream(QUESTION, regex="a{1000}", max_tokens=300))
    forced = [e.text for e in rounds_of(events)]
    assert all(len(text) <= 64 for text in forced) and events[-1].finish_reason == "length"
    assert events[-1].parsed is None
