"""OpenAI's Responses API through the ``openai`` client against a live server over fake models
(issue 57): plain, streamed event by event, ``text.format``, a function tool through a whole loop,
``previous_response_id`` continuing a kept conversation, and what the ensemble cannot do refused
as a 400 naming the field, the next request answered."""

from __future__ import annotations

import json

import openai
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import serving

ANSWER = "Paris is the capital."
CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client_of(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture
def base():
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=4096), fake_member("b", ANSWER, n_params=500, n_ctx=4096),
                             max_tokens=60)  # fmt: skip
    served = EnsembleServer(ensemble, ServerOptions(queue=2, record=False))
    with serving(served) as url:
        yield url
    ensemble.close()


def test_a_response_plain_and_its_events_streamed(base):
    client = client_of(base)
    reply = client.responses.create(model="specem", input="Capital of France?", instructions="Be brief.")
    assert reply.status == "completed" and reply.output_text == ANSWER and reply.id.startswith("resp_")
    assert reply.usage.output_tokens > 0 and reply.instructions == "Be brief."
    assert 0 < reply.model_extra["x_specem"]["confidence"] < 1
    events = list(client.responses.create(model="specem", input="Capital of France?", stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == ANSWER
    assert events[-1].response.output_text == ANSWER
    with client.responses.stream(model="specem", input="Capital of France?") as stream:
        assert stream.get_final_response().output_text == ANSWER


def test_a_json_schema_format_is_the_answers_shape():
    ensemble = fake_ensemble(*(fake_member(name, '{"city": "Paris"}') for name in "ab"), max_tokens=60)
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        text = {"format": {"type": "json_schema", "name": "city", "schema": schema}}
        reply = client_of(url).responses.create(model="specem", input="The capital?", text=text)
        assert json.loads(reply.output_text) == {"city": "Paris"}
    ensemble.close()


def test_an_earlier_response_is_continued_and_one_not_kept_is_a_400_with_openais_code(base):
    client = client_of(base)
    first = client.responses.create(model="specem", input="Capital of France?")
    again = client.responses.create(model="specem", input="And of Spain?", previous_response_id=first.id)
    alone = client.responses.create(model="specem", input="And of Spain?")
    assert again.previous_response_id == first.id
    assert again.usage.input_tokens > alone.usage.input_tokens  # the earlier turns were read too
    unkept = client.responses.create(model="specem", input="Capital of France?", store=False)
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model="specem", input="Again?", previous_response_id=unkept.id)
    assert missing.value.body["param"] == "previous_response_id" and missing.value.code == "previous_response_not_found"
    assert missing.value.body["message"].startswith(f"Previous response with id {unkept.id!r} not found")
    assert client.responses.create(model="specem", input="Again?").output_text  # the next is answered


def test_an_input_of_items_read_as_context_only_is_a_400_and_the_next_is_answered(base):
    client = client_of(base)
    for item in ({"type": "reasoning", "id": "rs_1", "summary": []},
                 {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "x", "tools": []}):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="specem", input=[item])  # type: ignore[list-item]
        assert refused.value.body["param"] == "input" and "add a user message" in refused.value.body["message"]
    assert client.responses.create(model="specem", input="Capital of France?").output_text


def test_a_bad_tool_is_named_as_the_responses_request_wrote_it(base):
    client = client_of(base)
    tools = [{"type": "function", "name": "get weather", "parameters": {"type": "object"}}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="specem", input="Weather?", tools=tools)  # type: ignore[arg-type]
    assert refused.value.body["message"].startswith("tools[0].name 'get weather' must be 1 to 64 letters")
    tools = [{"type": "function", "name": "f", "parameters": {"type": "string"}}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="specem", input="Weather?", tools=tools)  # type: ignore[arg-type]
    assert refused.value.body["message"].startswith("tools[0].parameters must be a JSON Schema of an object")
    assert client.responses.create(model="specem", input="Capital of France?").output_text


def test_a_function_tool_through_a_whole_loop():
    ensemble = fake_ensemble(fake_member("a", CALL, n_ctx=4096), fake_member("b", '{"response": "Sunny."}', n_ctx=4096),
                             segment_tokens=5, max_tokens=80)  # fmt: skip
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        client = client_of(url)
        called = client.responses.create(model="specem", input="Weather in Paris?", tools=[WEATHER])
        [call] = [item for item in called.output if item.type == "function_call"]
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
        events = list(client.responses.create(model="specem", input="Weather in Paris?", tools=[WEATHER], stream=True))
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        answered = client.responses.create(model="specem", input=[result], previous_response_id=called.id,
                                           tools=[WEATHER], tool_choice="none")  # fmt: skip
        assert answered.output_text == "Sunny."
    ensemble.close()


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"background": True}, "background"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"input": []}, "input"),
        ({"extra_body": {"n": 2}}, "n"),
    ],
)
def test_what_the_ensemble_cannot_do_is_a_400_naming_the_field_and_the_next_is_answered(base, extra, param):
    client = client_of(base)
    body = {"model": "specem", "input": "Capital of France?", **extra}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**body)
    assert refused.value.body["param"] == param
    assert client.responses.create(model="specem", input="Capital of France?").output_text == ANSWER


def test_truncation_auto_drops_the_oldest_exchanges_until_the_conversation_fits():
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=400), fake_member("b", ANSWER, n_params=500, n_ctx=400),
                             max_tokens=20)  # fmt: skip
    long = "A long story about the weather in many cities. " * 12
    said = [item for n in range(4) for item in ({"role": "user", "content": f"{n}: {long}"},
                                                   {"role": "assistant", "content": "Noted."})]  # fmt: skip
    asked = [*said, {"role": "user", "content": "Capital of France?"}]
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        client = client_of(url)
        with pytest.raises(openai.BadRequestError) as refused:  # "disabled", OpenAI's default: a 400
            client.responses.create(model="specem", input=asked, instructions="Be brief.")  # type: ignore[arg-type]
        assert refused.value.code == "context_length_exceeded"
        reply = client.responses.create(model="specem", input=asked, instructions="Be brief.", truncation="auto")  # type: ignore[arg-type]
        assert reply.output_text and reply.truncation == "auto" and 0 < reply.usage.input_tokens < 400
        with pytest.raises(openai.BadRequestError) as refused:  # the last turn alone does not fit: nothing to drop
            client.responses.create(model="specem", input=f"{long * 3} Capital?", truncation="auto")
        assert refused.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="specem", input="Hi", truncation="sometimes")  # type: ignore[arg-type]
        assert refused.value.body["param"] == "truncation"
        assert client.responses.create(model="specem", input="Capital of France?").truncation == "disabled"
    ensemble.close()
