"""The newer doors of a real ``specem serve`` (the demo trio, no key, one place) through the
official clients: OpenAI's Responses API (``client.responses.create``: plain, streamed event by
event, ``text.format`` JSON Schema, a whole function-tool loop, ``previous_response_id``, a kept
response read back, listed and deleted), a ``prediction`` read ahead on chat completions,
Anthropic's Messages API (``messages.create``, ``messages.stream``, a tool loop), ``n=2``
sampled apart, and one member alone (``specem/NAME``) answering as it does in an ensemble of its
own. Greedy and short (``max_tokens`` of 16 to 120), so the file runs in minutes."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

from specem_local.engine import Ensemble
from specem_research.load import start_server
from tests.conftest import demo_config, stop_process

CAPITAL = "What is the capital of France? Answer in one word."
WEATHER_QUESTION = "What is the weather in Paris?"
RESULT = "It is 18 degrees and sunny in Paris."
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
CITY_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "the name of the city"}},
    "required": ["city"],
}
RESPONSES_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": CITY_PARAMETERS,
}
GREEDY = {"temperature": 0}  # the anthropic client has no temperature argument: sent as it is sent on the wire
ANTHROPIC_WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": CITY_PARAMETERS,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One place (``--parallel 1``), as an ensemble built here has, and every prompt decoded
    whole (``--no-reuse-prompt``): a member's greedy answer is then the one it gives alone."""
    data = tmp_path_factory.mktemp("doors-serve")
    process, base = start_server("--parallel", "1", "--no-reuse-prompt", env={"SPECEM_DATA_DIR": str(data)})
    yield base
    stop_process(process, 30)


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture
def messages(server) -> anthropic.resources.Messages:
    return anthropic.Anthropic(base_url=server, api_key="unused", max_retries=0, timeout=600).messages


# -- OpenAI's Responses API --------------------------------------------------------------------------
def test_a_response_whole_and_its_events_streamed_say_the_same(client):
    asked = dict(model="specem", input=CAPITAL, temperature=0, max_output_tokens=24)
    whole = client.responses.create(**asked)
    assert whole.status == "completed" and "Paris" in whole.output_text, whole
    assert [item.type for item in whole.output] == ["message"] and whole.usage.output_tokens > 0
    events = list(client.responses.create(**asked, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed", kinds
    assert [event.sequence_number for event in events] == list(range(1, len(events) + 1))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas and "".join(deltas) == events[-1].response.output_text == whole.output_text  # greedy: the same


def test_a_json_schema_format_is_the_answers_shape(client):
    text = {"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}}
    reply = client.responses.create(
        model="specem", input="Name the capital of France and its country.", text=text,
        reasoning={"effort": "none"}, temperature=0, max_output_tokens=60,
    )  # fmt: skip
    assert reply.status == "completed", reply
    jsonschema.validate(json.loads(reply.output_text), CITY)


def test_a_function_tool_through_a_whole_loop(client):
    asked = dict(model="specem", tools=[RESPONSES_WEATHER], temperature=0, max_output_tokens=120)
    called = client.responses.create(input=WEATHER_QUESTION, **asked)
    calls = [item for item in called.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})], called.output
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": RESULT}
    answered = client.responses.create(input=[result], previous_response_id=called.id, **asked)
    assert [item.type for item in answered.output if item.type != "reasoning"] == ["message"], answered.output
    assert "18" in answered.output_text, answered.output_text  # the answer read the result


def test_previous_response_id_carries_the_conversation(client):
    asked = dict(model="specem", temperature=0, max_output_tokens=16)
    first = client.responses.create(input="My name is Ada.", instructions="You are terse.", **asked)
    again = client.responses.create(input="What is my name?", previous_response_id=first.id, **asked)
    alone = client.responses.create(input="What is my name?", **asked)
    assert "Ada" in again.output_text and again.previous_response_id == first.id, again.output_text
    assert "Ada" not in alone.output_text, alone.output_text  # only the earlier turn told it


# -- Anthropic's Messages API ------------------------------------------------------------------------
def test_a_message_whole_and_streamed(messages):
    asked = dict(model="specem", max_tokens=24, messages=[{"role": "user", "content": CAPITAL}], extra_body=GREEDY)
    whole = messages.create(**asked)
    text = "".join(block.text for block in whole.content if block.type == "text")
    assert "Paris" in text and whole.stop_reason == "end_turn" and whole.usage.output_tokens > 0, whole
    with messages.stream(**asked) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert pieces and "".join(pieces) == text  # greedy: the same answer, written as it came
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == whole.usage.output_tokens


def test_an_anthropic_tool_loop_tool_use_then_tool_result_then_text(messages):
    asked = [{"role": "user", "content": WEATHER_QUESTION}]
    ask = dict(model="specem", max_tokens=120, tools=[ANTHROPIC_WEATHER], extra_body=GREEDY)
    called = messages.create(messages=asked, **ask)
    uses = [block for block in called.content if block.type == "tool_use"]
    assert [(use.name, use.input) for use in uses] == [("get_weather", {"city": "Paris"})], called.content
    assert called.stop_reason == "tool_use"
    results = [{"type": "tool_result", "tool_use_id": use.id, "content": RESULT} for use in uses]
    follow = [*asked, {"role": "assistant", "content": called.content}, {"role": "user", "content": results}]
    answered = messages.create(messages=follow, **ask)
    assert [b.type for b in answered.content if b.type != "thinking"] == ["text"], answered.content
    assert answered.stop_reason == "end_turn" and "18" in answered.content[-1].text, answered.content


# -- several answers, and one member alone -----------------------------------------------------------
def test_two_answers_sampled_with_a_seed_each_differ(client):
    reply = client.chat.completions.create(
        model="specem", messages=[{"role": "user", "content": "Tell me a short story about a cat."}],
        n=2, temperature=1.5, seed=7, max_tokens=24,
    )  # fmt: skip
    texts = [choice.message.content for choice in reply.choices]
    assert [choice.index for choice in reply.choices] == [0, 1] and all(texts)
    assert texts[0] != texts[1], texts  # seed 7 and seed 8


def test_a_member_named_answers_as_it_does_alone(client, messages):
    [ensemble, first, *_] = [model.id for model in client.models.list()]
    assert ensemble == "specem" and first.startswith("specem/")
    name = first.removeprefix("specem/")
    asked = [{"role": "user", "content": CAPITAL}]
    with Ensemble.from_config(demo_config(name, greedy=True, max_tokens=24)) as solo:
        alone = solo.chat(asked).text
    served = client.chat.completions.create(model=first, messages=asked, temperature=0, max_tokens=24)
    assert served.model == first and served.choices[0].message.content == alone, (served, alone)
    assert set(served.model_extra["x_specem"]["wins"]) == {name}  # it alone wrote the answer
    by_anthropic = messages.create(model=first, messages=asked, extra_body=GREEDY, max_tokens=24)
    assert by_anthropic.model == first and by_anthropic.content[0].text == alone  # type: ignore[union-attr]
    assert set(by_anthropic.model_extra["x_specem"]["wins"]) == {name}  # type: ignore[index]


def test_a_kept_response_read_back_listed_and_deleted(client):
    question = "What is the capital of France? One word."
    made = client.responses.create(model="specem", input=question, max_output_tokens=12)
    assert client.responses.retrieve(made.id).output_text == made.output_text
    [asked] = client.responses.input_items.list(made.id).data
    assert asked.content[0].text == question  # type: ignore[union-attr]
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)


def test_a_prediction_is_read_ahead_on_chat_completions(client):
    question = "What is 12 plus 30? Answer with the number."
    asked = {"model": "specem", "messages": [{"role": "user", "content": question}], "temperature": 0, "max_tokens": 24}
    plain = client.chat.completions.create(**asked)
    predicted = client.chat.completions.create(
        **asked, prediction={"type": "content", "content": plain.choices[0].message.content}
    )
    assert predicted.usage.completion_tokens_details.accepted_prediction_tokens > 0
    assert predicted.choices[0].message.content == plain.choices[0].message.content  # clear margins: the same
