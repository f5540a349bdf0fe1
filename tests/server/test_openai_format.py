"""The OpenAI request and response shapes, as pure functions (the server's tests use a real client)."""

from __future__ import annotations

import pytest

from specem_local.errors import SettingError
from specem_local.events import Candidate, FinalEvent, RoundEvent, StartEvent
from specem_local.server import openai_format as oa
from specem_local.server.errors import ApiError
from specem_local.server.replies import Pieces, Whole
from specem_local.settings import EnsembleSettings, with_overrides


def body(**fields):
    return {"model": "specem", "messages": [{"role": "user", "content": "hi"}], **fields}


def test_request_fields_map_onto_the_ensembles_settings():
    parsed = oa.parse_request(
        body(
            temperature=0,
            top_p=0.9,
            max_tokens=20,
            max_completion_tokens=30,
            seed=4,
            stop="END",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert parsed.ask.settings == {
        "temperature": 0,
        "greedy": True,
        "top_p": 0.9,
        "max_tokens": 30,
        "seed": 4,
        "stop": ["END"],
    }
    assert parsed.stream and parsed.include_usage and parsed.id.startswith("chatcmpl-")
    assert oa.parse_request(body(model=None, tool_choice="none", n=1)).ask.settings == {}


def test_messages_take_text_parts_and_developer_is_system():
    parsed = oa.parse_request(
        {
            "model": "specem",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ],
        }
    )
    assert parsed.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "ab"}]


@pytest.mark.parametrize(
    ("request_body", "status", "param"),
    [
        ([1], 400, None),
        (body(model="llama3"), 404, "model"),
        (body(n=9), 400, "n"),
        (body(n=True), 400, "n"),
        (body(logprobs="yes"), 400, "logprobs"),
        (body(top_logprobs=3), 400, "top_logprobs"),
        (body(response_format={"type": "xml"}), 400, "response_format.type"),
        (body(response_format="json"), 400, "response_format"),
        (body(response_format={"type": "json_schema", "json_schema": {"schema": {}}}), 400, "response_format"),
        (body(frequency_penalty=0.5), 400, "frequency_penalty"),
        (body(stop=["a", ""]), 400, "stop"),
        (body(stream="yes"), 400, "stream"),
        ({"model": "specem", "messages": [{"role": "assistant", "content": "hi"}]}, 400, "messages"),
        (
            {
                "model": "specem",
                "messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "hi"}],
            },
            400,
            "messages",
        ),
        ({"model": "specem", "messages": [{"role": "function", "content": "x"}]}, 400, "messages[0].role"),
        ({"model": "specem", "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_field(request_body, status, param):
    with pytest.raises(ApiError) as caught:
        oa.parse_request(request_body)
    assert caught.value.status == status and caught.value.param == param
    assert caught.value.message


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"reasoning_effort": []}, "reasoning_effort"),
        ({"reasoning_effort": {}}, "reasoning_effort"),
        ({"reasoning_effort": {"effort": "high"}}, "reasoning_effort"),
        ({"reasoning_effort": 1}, "reasoning_effort"),
        ({"reasoning": {"effort": ["high"]}}, "reasoning.effort"),
        ({"reasoning": {"effort": {}}}, "reasoning.effort"),
    ],
)
def test_a_reasoning_effort_that_is_no_text_is_a_400_naming_the_field(extra, param):
    with pytest.raises(ApiError) as caught:
        oa.parse_request(body(**extra))
    assert caught.value.status == 400 and caught.value.param == param
    assert "must be one of none, minimal, low, medium, high" in caught.value.message


def events():
    start = StartEvent(
        models=("a", "b"),
        drafters=("a", "b"),
        weights={"a": 0.6, "b": 0.4},
        prompt_tokens={"a": 12, "b": 15},
        plain_generation=False,
    )
    candidate = Candidate(model="a", text="Hi", ended=False, scores={}, shares={}, combined=None)
    round_event = RoundEvent(
        index=1,
        text="Hi",
        author="a",
        decision="vote",
        candidates=(candidate,),
        weights={"a": 0.6, "b": 0.4},
        drafters=("a", "b"),
        draft_seconds={},
        draft_tokens={},
        verify_seconds={},
        seconds=0.1,
        answer_tokens=1,
    )
    final = FinalEvent(
        text="Hi",
        finish_reason="context",
        rounds=1,
        tokens=1,
        seconds=0.1,
        first_segment_seconds=0.1,
        wins={"a": 1},
        drafters_per_round=2.0,
        weights={"a": 0.6, "b": 0.4},
        plain_generation=False,
    )
    return start, round_event, final


def test_chunks_and_the_completion_follow_openais_shapes():
    request = oa.parse_request(body(stream=True, stream_options={"include_usage": True}))
    start, round_event, final = events()
    chunk = oa.piece_chunk(request, Pieces(tools=False).of(round_event), first=True)
    assert chunk["object"] == "chat.completion.chunk" and chunk["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "Hi",
    }
    assert chunk["x_specem"]["author"] == "a" and chunk["x_specem"]["candidates"] == 1
    [ending] = oa.final_chunks(request, start, final, first=False)
    usage = oa.usage_chunk(request, [Whole(start, final)])
    assert ending["choices"][0]["finish_reason"] == "length" and ending["choices"][0]["delta"] == {}
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 15,
        "completion_tokens": 1,
        "total_tokens": 16,
    }
    whole = oa.completion(request, [Whole(start, final)])
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"] == "Hi"
    assert whole["id"] == chunk["id"] == ending["id"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"messages": [{"role": ["user"], "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "half an emoji \ud83d"}]}, "messages[0].content"),
    ],
)
def test_text_no_model_can_take_is_a_400(extra, param):
    with pytest.raises(ApiError) as caught:
        oa.parse_request(body(**extra))
    assert caught.value.status == 400 and caught.value.param == param and len(caught.value.message) < 200


def test_a_null_field_means_absent():
    assert oa.parse_request(body(n=None, temperature=None, stop=None)).ask.settings == {}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"max_completion_tokens": float("inf")}, "max_tokens"),
        ({"seed": float("nan")}, "seed"),
        ({"seed": 10**400}, "seed"),
        ({"seed": -5}, "seed"),
    ],
)
def test_numbers_are_checked_where_every_setting_is(extra, field):
    """The request's values reach the settings as they came; the settings refuse them, naming
    the field (the server turns that into a 400 with ``param``)."""
    settings = oa.parse_request(body(**extra)).ask.settings
    with pytest.raises(SettingError) as caught:
        with_overrides(EnsembleSettings(), **settings)
    assert caught.value.field == field and len(str(caught.value)) < 200


def test_a_trailing_assistant_message_is_kept_to_be_continued():
    parsed = oa.parse_request(
        {
            "model": "specem",
            "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "It is"}],
        }
    )
    assert parsed.messages[-1] == {"role": "assistant", "content": "It is"}


def test_ignore_eos_is_taken_as_llama_cpps_server_takes_it():
    assert oa.parse_request(body(ignore_eos=True)).ask.settings == {"ignore_eos": True}
    settings = oa.parse_request(body(ignore_eos="yes")).ask.settings
    with pytest.raises(SettingError) as caught:
        with_overrides(EnsembleSettings(), **settings)
    assert caught.value.field == "ignore_eos"


def test_the_models_list_is_openais_shape_with_the_members_and_where_they_run():
    listed = oa.models_list(["qwen", "smol"], 1700000000, {"qwen": "CPU"})
    entry = {"id": oa.MODEL_ID, "object": "model", "created": 1700000000, "owned_by": "specem-local"}
    alone = {"object": "model", "created": 1700000000, "owned_by": "specem-local", "member_of": oa.MODEL_ID}
    assert listed == {
        "object": "list",
        "data": [
            {**entry, "members": ["qwen", "smol"], "runs_on": {"qwen": "CPU"}},
            {**alone, "id": "specem/qwen", "runs_on": "CPU"},
            {**alone, "id": "specem/smol", "runs_on": None},
        ],
    }
    assert oa.models_list([], 1)["data"] == [{**entry, "created": 1, "members": [], "runs_on": {}}]
