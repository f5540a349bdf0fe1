"""Ollama's shapes to the letter, as pure functions: each refusal's exact message and the field
it names, what a chat or generate body becomes (its messages, its thinking, a load request's
bare ask), and ``/api/ps``'s exact payload."""

from __future__ import annotations

import hashlib

import pytest

from specem_local.engine import Ask, FormatAsk
from specem_local.server import ollama_format as ol
from specem_local.server.errors import ApiError

CHAT = {"model": "specem", "messages": [{"role": "user", "content": "hi"}]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def refused(parse, request_body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(request_body)
    return caught.value


@pytest.mark.parametrize("parse", [ol.parse_chat, ol.parse_generate, ol.show_request])
def test_a_model_not_served_is_a_404_naming_the_model_field(parse):
    error = refused(parse, {"model": "llama3", "messages": [], "prompt": "hi"})
    assert (error.status, error.message, error.param) == (
        404,
        "model 'llama3' not found; this server serves 'specem'",
        "model",
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [("repeat_penalty", 1.1), ("mirostat", 2), ("penalize_newline", True), ("presence_penalty", False)],
)
def test_an_option_that_is_not_neutral_is_refused_naming_the_option(option, value):
    error = refused(ol.parse_chat, {**CHAT, "options": {option: value}})
    assert (error.status, error.message, error.param) == (
        400,
        f"options.{option} is not supported by the specem ensemble; remove it",
        f"options.{option}",
    )


def test_tools_with_a_format_are_refused_saying_give_one():
    error = refused(ol.parse_chat, {**CHAT, "tools": [WEATHER], "format": "json"})
    assert (error.status, error.message, error.param) == (400, "give tools or format, not both", "format")


def test_a_chat_message_without_content_is_empty_text():
    parsed = ol.parse_chat({"model": "specem", "messages": [{"role": "system"}, {"role": "user", "content": "hi"}]})
    assert parsed.messages == [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}]
    assert parsed.ask.prompt == parsed.messages


@pytest.mark.parametrize("name", ["suffix", "context", "raw", "template"])
def test_generate_refuses_what_the_ensemble_cannot_continue_naming_it(name):
    value = [1, 2, 3] if name == "context" else True if name == "raw" else "x"
    error = refused(ol.parse_generate, {"model": "specem", "prompt": "hi", name: value})
    assert (error.status, error.message, error.param) == (
        400,
        f"{name} is not supported by the specem ensemble; remove {name!r}",
        name,
    )


def test_generate_without_a_system_is_the_prompt_alone():
    parsed = ol.parse_generate({"model": "specem", "prompt": "hi"})
    assert parsed.messages == [{"role": "user", "content": "hi"}] and not parsed.load_only
    with_system = ol.parse_generate({"model": "specem", "prompt": "hi", "system": "Be brief."})
    assert with_system.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


@pytest.mark.parametrize("think", [True, False, "low", "high", None])
def test_generate_takes_think_as_sent(think):
    assert ol.parse_generate({"model": "specem", "prompt": "hi", "think": think}).ask.think == think
    assert ol.parse_generate({"model": "specem", "think": think}).ask.think == think  # a load request too


def test_a_load_request_asks_only_its_options_with_no_prompt():
    options = {"options": {"temperature": 0}, "format": "json", "think": "low"}
    loaded = ol.parse_chat({"model": "specem", "messages": [], **options})
    assert loaded.load_only and loaded.messages == []
    assert loaded.ask == Ask("", {"temperature": 0, "greedy": True}, FormatAsk(json=True))
    generated = ol.parse_generate({"model": "specem", **options})
    assert generated.load_only and generated.messages == []
    assert generated.ask == Ask("", {"temperature": 0, "greedy": True}, FormatAsk(json=True), "low")


def test_ps_lists_the_ensemble_loaded_for_good_in_ollamas_keys():
    members = ["qwen", "smol"]
    assert ol.running(members, 1234) == {
        "models": [
            {
                "name": "specem:latest",
                "model": "specem:latest",
                "size": 1234,
                "digest": hashlib.sha256(b"qwen\nsmol").hexdigest(),
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "specem",
                    "families": ["specem"],
                    "parameter_size": "2 models",
                    "quantization_level": "",
                },
                "expires_at": "0001-01-01T00:00:00Z",
                "size_vram": 0,
            }
        ]
    }
