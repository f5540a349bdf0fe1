"""OpenAI's shapes to the letter, as pure functions: the exact keys and values of a completion's
choice and of the chunk that ends a stream, the thinking asked for reaching the ask, and each
refusal's exact message and the field it names."""

from __future__ import annotations

import pytest

from specem_local.events import FinalEvent, StartEvent
from specem_local.server import openai_format as oa
from specem_local.server.errors import ApiError
from specem_local.server.replies import Whole

START = StartEvent(("a", "b"), ("a", "b"), {"a": 0.5, "b": 0.5}, {"a": 7, "b": 9}, False)


def body(**fields):
    return {"model": "specem", "messages": [{"role": "user", "content": "hi"}], **fields}


def final(**fields) -> FinalEvent:
    facts = {"text": "42", "finish_reason": "eos", "rounds": 1, "tokens": 3, "seconds": 0.5}
    rest = {"first_segment_seconds": 0.1, "wins": {"a": 1}, "drafters_per_round": 2.0, "weights": {"a": 0.5}}
    return FinalEvent(**{**facts, **rest, "plain_generation": False, **fields})


def refused(request_body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        oa.parse_request(request_body)
    return caught.value


def test_a_completions_one_choice_is_index_0_with_the_thinking_as_reasoning_content():
    whole = oa.completion(oa.parse_request(body()), [Whole(START, final(reasoning="6 * 7 = 42.", reasoning_tokens=2))])
    assert whole["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "42", "refusal": None, "reasoning_content": "6 * 7 = 42."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert whole["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "total_tokens": 12,
        "completion_tokens_details": {"reasoning_tokens": 2},
    }


def test_a_completion_with_no_thinking_has_no_reasoning_content():
    whole = oa.completion(oa.parse_request(body()), [Whole(START, final())])
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "42", "refusal": None}


@pytest.mark.parametrize(("first", "delta"), [(False, {}), (True, {"role": "assistant", "content": ""})])
def test_the_chunk_that_ends_a_stream_is_choice_index_0_with_the_finish(first, delta):
    request = oa.parse_request(body(stream=True))
    [ending] = oa.final_chunks(request, START, final(finish_reason="length"), first=first)
    assert ending["choices"] == [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": "length"}]


@pytest.mark.parametrize(
    ("extra", "think", "field"),
    [
        ({"reasoning_effort": "minimal"}, "low", "reasoning_effort"),
        ({"reasoning_effort": "none"}, False, "reasoning_effort"),
        ({"reasoning": {"effort": "high"}}, "high", "reasoning.effort"),
        ({"reasoning_budget_tokens": 300}, 300, "reasoning_budget_tokens"),
        ({}, None, None),
    ],
)
def test_the_thinking_asked_for_reaches_the_ask_with_the_field_it_came_from(extra, think, field):
    parsed = oa.parse_request(body(**extra))
    assert parsed.ask.think == think and parsed.fields.get("think") == field


def test_stream_options_that_are_no_object_are_refused_saying_so():
    error = refused(body(stream_options="yes"))
    assert (error.status, error.message, error.param) == (400, "stream_options must be an object", "stream_options")


@pytest.mark.parametrize("modalities", [["audio"], ["text", "audio"], "text"])
def test_modalities_other_than_text_are_refused_naming_modalities(modalities):
    error = refused(body(modalities=modalities))
    assert (error.status, error.message, error.param) == (
        400,
        'modalities must be ["text"]: the ensemble writes text only',
        "modalities",
    )


def test_a_text_response_format_is_no_format():
    parsed = oa.parse_request(body(response_format={"type": "text"}))
    assert parsed.ask.output is None and "schema" not in parsed.fields
    assert oa.response_format({"type": "text"}) == (None, None)


@pytest.mark.parametrize("strict", ["yes", "true", [], {}])
def test_a_json_schema_strict_that_is_no_switch_is_refused_saying_so(strict):
    spec = {"name": "answer", "schema": {"type": "object"}, "strict": strict}
    error = refused(body(response_format={"type": "json_schema", "json_schema": spec}))
    assert (error.status, error.message, error.param) == (
        400,
        "response_format.json_schema.strict must be true or false",
        "response_format",
    )


@pytest.mark.parametrize("strict", [None, True, False])
def test_a_json_schema_strict_switch_is_taken(strict):
    spec = {"name": "answer", "schema": {"type": "object"}, "strict": strict}
    output, param = oa.response_format({"type": "json_schema", "json_schema": spec})
    assert output is not None and output.schema == {"type": "object"}
    assert param == "response_format.json_schema.schema"
