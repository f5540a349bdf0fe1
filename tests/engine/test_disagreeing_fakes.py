"""Fakes that write what the format forbids (issue 44): prose where JSON is wanted, a key the
schema does not allow, a message where a call is required, the wrong function. Each test fails
if the constraint, its instruction or its checks are not applied; with fakes that already write
what the format wants, none of them could."""

from __future__ import annotations

import json

import jsonschema

from specem_local.engine import phases
from specem_local.engine.format_compiler import compiler
from specem_local.engine.formats import OutputFormat, member_matcher
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["city", "people"],
    "additionalProperties": False,
}
REPLY = '{"city": "Paris", "people": 2100000}'
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}


def prompt_text(member, request) -> str:
    return b"".join(member.model.pieces[t] for t in request.prompts[member.name]).decode()


def test_the_committed_matcher_drops_a_candidate_the_format_forbids(monkeypatch):
    """The heavier member drafts under a matcher that allows anything (a fake that ignores the
    format): its prose would win every vote; only the committed matcher keeps it out."""
    loose = OutputFormat("regex", "", compiler().compile("regex", "(?s:.*)", "regex").grammar)
    heavy = fake_member("heavy", "About two million people.", n_params=100_000)
    light = fake_member("light", '{"people": 2100000}')

    def matcher(tokenizer, constraint):
        return member_matcher(tokenizer, loose if tokenizer is heavy.model.grammar_tokenizer() else constraint)

    monkeypatch.setattr(phases, "member_matcher", matcher)
    people = {"type": "object", "properties": {"people": {"type": "integer"}}, "required": ["people"]}
    with fake_ensemble(heavy, light) as ensemble:
        final = ensemble.generate(QUESTION, schema=people, max_tokens=120)
    assert final.finish_reason == "eos" and json.loads(final.text) == {"people": 2100000}
    assert final.wins["heavy"] == 0


def test_a_schema_keeps_out_a_key_the_members_want_to_write():
    extra = '{"city": "Paris", "people": 2100000, "river": "Seine"}'
    members = [fake_member(name, extra, runner_up="}") for name in "ab"]  # "," is refused: "}" comes next
    with fake_ensemble(*members) as ensemble:
        final = ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=120)
    assert json.loads(final.text) == json.loads(REPLY)
    jsonschema.validate(json.loads(final.text), SCHEMA)


def test_any_json_turns_prose_into_an_object():
    with fake_ensemble(fake_member("a", "Paris, of course."), fake_member("b", "It is Paris.")) as ensemble:
        final = ensemble.generate(QUESTION, json=True, max_tokens=40)
    assert final.text.startswith("{")


def test_tool_choice_required_makes_a_member_that_would_answer_in_words_call():
    message = '{"response": "It is sunny in Paris."}'
    with fake_ensemble(fake_member("a", message), fake_member("b", message)) as ensemble:
        auto = ensemble.generate(QUESTION, tools=[WEATHER], max_tokens=80)
        required = ensemble.generate(QUESTION, tools=[WEATHER], tool_choice="required", max_tokens=80)
    assert auto.text == message and auto.parsed.content == "It is sunny in Paris."
    assert required.text.startswith('{"tool_calls": [{"name": "get_weather", "arguments": {')


def test_a_named_tool_choice_calls_that_function_though_the_members_want_another():
    call = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
    with fake_ensemble(fake_member("a", call, n_ctx=2048), fake_member("b", call, n_ctx=2048)) as ensemble:
        free = ensemble.generate(QUESTION, tools=[WEATHER, TIME], max_tokens=80)
        named = ensemble.generate(QUESTION, tools=[WEATHER, TIME], tool_choice="get_time", max_tokens=80)
    assert [c.name for c in free.parsed.calls] == ["get_weather"]
    assert named.text.startswith('{"tool_calls": [{"name": "get_time", "arguments": {')


def test_every_member_is_told_the_schema_and_the_tools_in_its_prompt():
    a, b = fake_member("a", REPLY, n_ctx=2048), fake_member("b", REPLY, n_ctx=2048)
    with fake_ensemble(a, b) as ensemble:
        shaped = ensemble.prepare(QUESTION, schema=SCHEMA)
        offered = ensemble.prepare(QUESTION, tools=[WEATHER])
        plain = ensemble.prepare(QUESTION)
    for member in (a, b):
        assert "matching this JSON Schema" in prompt_text(member, shaped)
        assert json.dumps(SCHEMA) in prompt_text(member, shaped)
        told = prompt_text(member, offered)
        assert "You can call these functions" in told and "get_weather" in told
        assert "JSON" not in prompt_text(member, plain)
