"""``POST /v1/messages`` through the official ``anthropic`` client against a live server over fake
models: a message whole and streamed, how it stopped (the members would write past
``max_tokens`` and past a stop sequence), a whole tool loop (one member would call a tool that
is not offered), thinking before a format, refusals in Anthropic's shape with the next request
answered, a fault before and after the stream began, and the key as ``x-api-key``. The parsing
and the shapes alone: test_anthropic_format.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from specem_local.server import EnsembleServer, GateRules, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.engine.test_functions import calls_until, scripted
from tests.engine.test_thinking import REPLY, SCHEMA, WORKING, thinker
from tests.server.live import serving
from tests.server.test_routes import Faulty

ANSWER = "Paris is the capital of France."
ASKED = [{"role": "user", "content": "Capital of France?"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL_TIME = '{"tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]}'  # not offered


def client(base: str, **options) -> anthropic.Anthropic:
    return anthropic.Anthropic(**{"base_url": base, "api_key": "none", "max_retries": 0, "timeout": 60, **options})


def served(*members, gate: GateRules | None = None, **settings) -> EnsembleServer:
    ensemble = fake_ensemble(*members, **settings)
    return EnsembleServer(ensemble, ServerOptions(queue=2, record=False, gate=gate or GateRules()))


@pytest.fixture
def plain() -> Iterator[tuple[str, Faulty]]:
    fault = Faulty()
    server = served(fake_member("a", ANSWER, on_decode=fault), fake_member("b", ANSWER, n_params=500), segment_tokens=4)
    with serving(server) as base:
        yield base, fault
    server.ensemble.close()


def test_a_message_whole_and_streamed(plain):
    base, _ = plain
    messages = client(base).messages
    whole = messages.create(model="specem", max_tokens=40, messages=ASKED, system="Answer in one sentence.")
    assert [block.type for block in whole.content] == ["text"] and whole.content[0].text == ANSWER  # type: ignore[union-attr]
    assert whole.id.startswith("msg_") and whole.model == "specem" and whole.role == "assistant"
    assert (whole.stop_reason, whole.stop_sequence) == ("end_turn", None)
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens == len(ANSWER)  # one byte a token
    facts = whole.model_extra["x_specem"]  # type: ignore[index]
    assert sum(facts["wins"].values()) == facts["rounds"] and 0 < facts["confidence"] < 1
    with messages.stream(model="specem", max_tokens=40, messages=ASKED) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == ANSWER and len(texts) > 1  # written as the rounds commit
    assert final.content[0].text == ANSWER and final.stop_reason == "end_turn"  # type: ignore[union-attr]
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert 0 < final.usage.input_tokens < whole.usage.input_tokens  # the system message is read too
    assert final.id != whole.id
    alone = messages.create(model="specem/b", max_tokens=40, messages=ASKED)  # one member, as on every route
    assert alone.model == "specem/b" and alone.content[0].text == ANSWER  # type: ignore[union-attr]
    assert set(alone.model_extra["x_specem"]["wins"]) == {"b"}  # type: ignore[index]


def test_the_members_would_write_on_but_max_tokens_and_a_stop_sequence_end_the_answer(plain):
    base, _ = plain
    messages = client(base).messages
    cut = messages.create(model="specem", max_tokens=9, messages=ASKED)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens <= 9
    assert ANSWER.startswith(cut.content[0].text) and len(cut.content[0].text) < len(ANSWER)  # type: ignore[union-attr]
    stopped = messages.create(model="specem", max_tokens=40, messages=ASKED, stop_sequences=["capital"])
    assert stopped.content[0].text == "Paris is the " and stopped.stop_reason == "stop_sequence"  # type: ignore[union-attr]
    assert stopped.stop_sequence == "capital"
    with messages.stream(model="specem", max_tokens=40, messages=ASKED, stop_sequences=["capital", "France"]) as s:
        final = s.get_final_message()
    assert final.content[0].text == "Paris is the " and final.stop_reason == "stop_sequence"  # type: ignore[union-attr]
    prefilled = [*ASKED, {"role": "assistant", "content": "Paris is"}]  # continued: the rest of it
    assert messages.create(model="specem", max_tokens=40, messages=prefilled).content[0].text == ANSWER[8:]  # type: ignore[union-attr]


def test_a_whole_tool_loop_through_the_client():
    reads_result = calls_until("18 C", answer="It is 18 C in Paris.")
    server = served(scripted("a", reads_result), scripted("b", lambda text: CALL_TIME), segment_tokens=6)
    tools = [WEATHER]
    with serving(server) as base:
        messages = client(base).messages
        asked = [{"role": "user", "content": "Weather in Paris?"}]
        called = messages.create(model="specem", max_tokens=120, messages=asked, tools=tools)
        [use] = called.content
        assert use.type == "tool_use" and use.id.startswith("toolu_") and called.stop_reason == "tool_use"
        assert (use.name, use.input) == ("get_weather", {"city": "Paris"})  # b's get_time was never offered
        with messages.stream(model="specem", max_tokens=120, messages=asked, tools=tools) as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_message()
        [streamed_use] = streamed.content
        assert streamed_use.input == {"city": "Paris"} and streamed.stop_reason == "tool_use"  # type: ignore[union-attr]
        assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1
        result = {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "18 C, sunny"}]}
        follow = [*asked, {"role": "assistant", "content": called.content}, {"role": "user", "content": [result]}]
        answered = messages.create(model="specem", max_tokens=120, messages=follow, tools=tools)
        assert [(b.type, b.text) for b in answered.content] == [("text", "It is 18 C in Paris.")]  # type: ignore[union-attr]
        assert answered.stop_reason == "end_turn"
        told = messages.create(  # told not to call, b still would: the format says no
            model="specem", max_tokens=120, messages=asked, tools=tools, tool_choice={"type": "none"}
        )
        assert [b.type for b in told.content] == ["text"] and told.stop_reason == "end_turn"
        forced = messages.create(
            model="specem", max_tokens=120, messages=asked, tools=tools,
            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        )  # fmt: skip
        assert [b.type for b in forced.content] == ["tool_use"]
        with pytest.raises(anthropic.BadRequestError) as caught:  # a result for a call never made
            messages.create(model="specem", max_tokens=120, messages=[*follow[:1], follow[2]], tools=tools)
        assert "answers no tool_use block of the message before" in caught.value.body["error"]["message"]  # type: ignore[index]
        with pytest.raises(anthropic.BadRequestError) as unanswered:  # a call left without its result
            messages.create(model="specem", max_tokens=120, messages=[*follow[:2], {"role": "user", "content": "And?"}])
        assert "tool_use ids were found without tool_result blocks" in unanswered.value.body["error"]["message"]  # type: ignore[index]
        assert messages.create(
            model="specem", max_tokens=120, messages=follow, tools=tools
        ).content  # the next is answered
    server.ensemble.close()


def test_thinking_before_a_format_is_its_own_block_and_streams_first():
    server = served(thinker("a"), thinker("b"), reasoning_budget=128)
    output = {"format": {"type": "json_schema", "schema": SCHEMA}}
    ask = {"model": "specem", "max_tokens": 200, "messages": [{"role": "user", "content": "Six times seven?"}]}
    with serving(server) as base:
        messages = client(base).messages
        whole = messages.create(**ask, output_config=output, thinking={"type": "enabled", "budget_tokens": 100})
        assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in whole.content] == [
            ("thinking", WORKING),
            ("text", REPLY),
        ]
        assert whole.content[0].signature == ""  # type: ignore[union-attr]
        with messages.stream(**ask, output_config=output, thinking={"type": "enabled", "budget_tokens": 100}) as s:
            deltas = [event.delta.type for event in s if event.type == "content_block_delta"]
            streamed = s.get_final_message()
        assert deltas == sorted(deltas, key=["thinking_delta", "text_delta"].index) and set(deltas) == {
            "thinking_delta",
            "text_delta",
        }
        assert [b.type for b in streamed.content] == ["thinking", "text"] and streamed.content[1].text == REPLY  # type: ignore[union-attr]
        off = messages.create(**ask, output_config=output, thinking={"type": "disabled"})
        assert [b.type for b in off.content] == ["text"] and off.content[0].text == REPLY  # type: ignore[union-attr]
        # below max_tokens, as Anthropic takes it, but leaving the answer < 64: fitted (Claude Code's ultrathink)
        fitted = messages.create(**ask, output_config=output, thinking={"type": "enabled", "budget_tokens": 180})
        assert [b.type for b in fitted.content] == ["thinking", "text"] and fitted.content[1].text == REPLY  # type: ignore[union-attr]
        with pytest.raises(anthropic.BadRequestError) as caught:
            messages.create(**ask, output_config=output, thinking={"type": "enabled", "budget_tokens": 200})
        assert caught.value.body == {  # type: ignore[comparison-overlap]
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "thinking.budget_tokens: a reasoning budget of 200 tokens leaves the answer 0 of "
                "max_tokens = 200 (it needs at least 64); raise max_tokens to 264 or think less",
            },
        }
        assert messages.create(**ask, output_config=output).content[-1].text == REPLY  # type: ignore[union-attr]
    server.ensemble.close()


def test_thinking_display_omitted_keeps_the_block_without_its_text():
    server = served(thinker("a"), thinker("b"), reasoning_budget=128)
    output = {"format": {"type": "json_schema", "schema": SCHEMA}}
    ask = {"model": "specem", "max_tokens": 200, "messages": [{"role": "user", "content": "Six times seven?"}]}
    omitted = {"type": "enabled", "budget_tokens": 100, "display": "omitted"}
    with serving(server) as base:
        messages = client(base).messages
        whole = messages.create(**ask, output_config=output, thinking=omitted)  # type: ignore[arg-type]
        assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in whole.content] == [
            ("thinking", None), ("text", REPLY)]  # fmt: skip
        assert whole.content[0].thinking == ""  # type: ignore[union-attr]
        with messages.stream(**ask, output_config=output, thinking=omitted) as s:  # type: ignore[arg-type]
            kinds = [(e.type, getattr(getattr(e, "content_block", e), "type", None),
                      getattr(getattr(e, "delta", None), "type", None)) for e in s]  # fmt: skip
            streamed = s.get_final_message()
        assert ("content_block_start", "thinking", None) in kinds and streamed.content[0].thinking == ""  # type: ignore[union-attr]
        assert not [k for k in kinds if k[2] == "thinking_delta"] and [k for k in kinds if k[2] == "text_delta"]
        assert streamed.content[1].text == REPLY  # type: ignore[union-attr]
        shown = messages.create(**ask, output_config=output, thinking={**omitted, "display": "summarized"})  # type: ignore[arg-type]
        assert shown.content[0].thinking == WORKING  # type: ignore[union-attr]
        with pytest.raises(anthropic.BadRequestError) as caught:
            messages.create(**ask, output_config=output, thinking={**omitted, "display": "full"})  # type: ignore[arg-type]
        said = caught.value.body["error"]["message"]  # type: ignore[index]
        assert said == 'thinking.display must be "summarized" or "omitted", got \'full\''
        assert messages.create(**ask, output_config=output).content[-1].text == REPLY  # type: ignore[union-attr]
    server.ensemble.close()


def test_an_agents_long_tool_description_is_taken(plain):
    """Claude Code's own tools are described at length (its Bash tool in about 8,000 characters)."""
    base, _ = plain
    long = {**WEATHER, "description": "Runs a command. " * 2_000}  # 32,000 characters
    message = client(base).messages.create(model="specem", max_tokens=40, messages=ASKED, tools=[long])
    assert message.type == "message" and message.content  # answered (a listing this long is outlined: tools.md)


def test_count_tokens_is_the_input_tokens_the_message_reports_and_a_bad_request_is_a_400(plain):
    base, _ = plain
    messages = client(base).messages
    for extra in ({}, {"tools": [WEATHER], "system": "Be brief."}):
        counted = messages.count_tokens(model="specem", messages=ASKED, **extra)  # type: ignore[arg-type]
        answered = messages.create(model="specem", max_tokens=20, messages=ASKED, **extra)  # type: ignore[arg-type]
        assert counted.input_tokens == answered.usage.input_tokens > 0
    alone = messages.count_tokens(model="specem", messages=ASKED).input_tokens
    longer = [{"role": "user", "content": "Capital of France? Say it in one word."}]
    assert messages.count_tokens(model="specem", messages=longer).input_tokens > alone  # type: ignore[arg-type]
    thinking = {"type": "enabled", "budget_tokens": 2000}  # no max_tokens to fit it under: it does not count
    assert messages.count_tokens(model="specem", messages=ASKED, thinking=thinking).input_tokens == alone  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError) as caught:
        messages.count_tokens(model="specem", messages=[])
    said = {"type": "invalid_request_error", "message": "messages must be a non-empty array"}
    assert caught.value.body == {"type": "error", "error": said}  # type: ignore[comparison-overlap]
    with pytest.raises(anthropic.BadRequestError) as caught:  # a setting's error names the field as sent
        messages.count_tokens(model="specem", messages=ASKED, extra_body={"stop_sequences": [""]})
    assert caught.value.body["error"]["message"].startswith("stop_sequences")  # type: ignore[index]
    assert messages.count_tokens(model="specem", messages=ASKED).input_tokens == alone  # the next is counted


def test_a_bad_request_is_anthropics_error_and_the_next_is_answered(plain):
    base, _ = plain
    messages = client(base).messages
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    refusals = [
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]},
         anthropic.BadRequestError, "invalid_request_error", "messages[0].content[1]: a block of type 'image'"),
        ({"model": "llama3"}, anthropic.NotFoundError, "not_found_error",
         "the model 'llama3' does not exist; this server serves 'specem' and each member alone: 'specem/a', "
         "'specem/b'"),
        ({"extra_body": {"temperature": -1}}, anthropic.BadRequestError, "invalid_request_error", "temperature"),
        ({"stop_sequences": [""]}, anthropic.BadRequestError, "invalid_request_error", "stop_sequences"),
        ({"tools": [{"name": "get weather", "input_schema": {"type": "object"}}]}, anthropic.BadRequestError,
         "invalid_request_error", "tools[0].name 'get weather' must be 1 to 64 letters"),
        ({"tools": [{**WEATHER, "description": "x" * 32_769}]}, anthropic.BadRequestError, "invalid_request_error",
         "tools[0].description must be text of at most 32,768 characters"),
        ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "nonsense"}}}},
         anthropic.BadRequestError, "invalid_request_error", "output_config.format.schema: cannot be enforced"),
    ]  # fmt: skip
    for change, raised, kind, said in refusals:  # said: how the message begins
        with pytest.raises(raised) as caught:
            messages.create(**{"model": "specem", "max_tokens": 20, "messages": ASKED, **change})  # type: ignore[arg-type]
        body = caught.value.body
        assert body["type"] == "error" and body["error"]["type"] == kind, body  # type: ignore[index]
        assert body["error"]["message"].startswith(said), body  # type: ignore[index]  # it names the field first
        assert messages.create(model="specem", max_tokens=40, messages=ASKED).content[0].text == ANSWER  # type: ignore[union-attr]
    schema = b'{"type": "object", "properties": {"x": {"type": "number", "maximum": NaN}}}'
    bad = b'{"model": "specem", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}], ' \
          b'"tools": [{"name": "f", "input_schema": ' + schema + b"}]}"  # fmt: skip
    refused = httpx.post(f"{base}/v1/messages", content=bad, headers={"content-type": "application/json"})
    assert refused.json()["error"]["message"] == "tools[0].input_schema.properties.x.maximum: nan is not a JSON number"
    raw = httpx.post(f"{base}/v1/messages", content=b"{nope", headers={"content-type": "application/json"})
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    missing = httpx.post(f"{base}/v1/messages", json={"model": "specem", "messages": ASKED})
    assert missing.status_code == 400 and missing.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: Field required (the most tokens the answer may take)",
        },
    }
    batches = httpx.post(f"{base}/v1/messages/batches", json={"requests": []})
    assert batches.status_code == 404 and batches.json()["error"] == {
        "type": "not_found_error",
        "message": "no route '/v1/messages/batches'; this server has Anthropic's Messages API at /v1/messages "
        "and /v1/messages/count_tokens (not batches)",
    }
    fetched = httpx.get(f"{base}/v1/messages")
    assert fetched.status_code == 405 and fetched.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "GET is not allowed on /v1/messages"},
    }


def test_a_fault_is_an_api_error_before_the_stream_and_an_error_event_after_it(plain):
    base, fault = plain
    messages = client(base).messages
    fault.armed = True
    with pytest.raises(anthropic.InternalServerError) as caught:
        messages.create(model="specem", max_tokens=40, messages=ASKED)
    assert caught.value.body["error"] == {  # type: ignore[index]
        "type": "api_error",
        "message": "the answer failed: RuntimeError: decode failed: simulated fault",
    }
    fault.armed = True
    with httpx.stream("POST", f"{base}/v1/messages", json={"model": "specem", "max_tokens": 40, "messages": ASKED,
                                                          "stream": True}) as response:  # fmt: skip
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-2:] == [
        "event: error",
        "data: " + json.dumps({"type": "error", "error": {
            "type": "api_error", "message": "the answer failed: RuntimeError: decode failed: simulated fault"}}),
    ]  # fmt: skip
    fault.armed = True
    with pytest.raises(anthropic.APIStatusError), messages.stream(model="specem", max_tokens=40, messages=ASKED) as s:
        s.get_final_message()
    assert messages.create(model="specem", max_tokens=40, messages=ASKED).content[0].text == ANSWER  # type: ignore[union-attr]


def test_the_key_as_x_api_key_or_a_bearer_token():
    server = served(fake_member("a", ANSWER), fake_member("b", ANSWER), gate=GateRules(api_key="sk-1"))
    with serving(server) as base:
        assert client(base, api_key="sk-1").messages.create(model="specem", max_tokens=40, messages=ASKED).content
        bearer = client(base, api_key=None, auth_token="sk-1")
        assert bearer.messages.create(model="specem", max_tokens=40, messages=ASKED).content
        with pytest.raises(anthropic.AuthenticationError) as caught:
            client(base, api_key="sk-2").messages.create(model="specem", max_tokens=40, messages=ASKED)
        assert caught.value.body == {  # type: ignore[comparison-overlap]
            "type": "error",
            "error": {
                "type": "authentication_error",
                "message": "a valid API key is needed: send Authorization: Bearer KEY (or x-api-key: KEY)",
            },
        }
        with pytest.raises(anthropic.AuthenticationError):
            client(base, api_key="none").messages.create(model="specem", max_tokens=40, messages=ASKED)
    server.ensemble.close()
