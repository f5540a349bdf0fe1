"""Ollama's shapes as pure functions: what a client reads from /api/show and from a streamed
round's line, key by key (the routes' own tests cover them over HTTP)."""

from __future__ import annotations

import pytest

from specem_local.events import Candidate, RoundEvent
from specem_local.server import ollama_format as ol
from specem_local.server.errors import ApiError
from specem_local.server.replies import Pieces


def test_show_describes_the_ensemble_in_ollamas_keys():
    shown = ol.show(["qwen", "smol"], "2026-11-26T10:00:00Z")
    assert shown == {
        "modelfile": "# specem ensemble of qwen, smol\n",
        "parameters": "",
        "template": "",
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "specem",
            "families": ["specem"],
            "parameter_size": "2 models",
            "quantization_level": "",
        },
        "model_info": {"general.architecture": "specem", "specem.members": ["qwen", "smol"]},
        "capabilities": ["completion"],
        "modified_at": "2026-11-26T10:00:00Z",
    }


def test_a_rounds_line_says_who_wrote_it_among_how_many_and_who_was_lost():
    candidates = tuple(Candidate(m, "Paris", False, {}, {}, 0.5) for m in ("a", "b"))
    event = RoundEvent(2, "Paris", "a", "vote", candidates, {"a": 0.6}, (), {}, {}, {}, 0.1, 4, lost={"c": "crashed"})
    [line] = ol.piece_lines(True, Pieces(tools=False).of(event))
    assert line["message"] == {"role": "assistant", "content": "Paris"} and line["done"] is False
    assert line["x_specem"] == {"round": 2, "author": "a", "candidates": 2, "lost": {"c": "crashed"}}
    reasoning = RoundEvent(1, "Hmm", "a", "vote", (), {}, (), {}, {}, {}, 0.1, 1, phase="reasoning")
    [thought] = ol.piece_lines(False, Pieces(tools=False).of(reasoning))
    assert (thought["response"], thought["thinking"], thought["x_specem"]) == (
        "",
        "Hmm",
        {"round": 1, "author": "a", "candidates": 0},
    )


@pytest.mark.parametrize("think", [[], {}, ["high"], {"level": "high"}, 1, 0.5, "max"])
def test_a_think_that_is_no_switch_nor_level_is_a_400_naming_it(think):
    ask = {"model": "specem", "messages": [{"role": "user", "content": "hi"}], "think": think}
    for parse, body in ((ol.parse_chat, ask), (ol.parse_generate, {"model": "specem", "prompt": "hi", "think": think})):
        with pytest.raises(ApiError) as caught:
            parse(body)
        assert caught.value.status == 400 and caught.value.param == "think"
        assert caught.value.message == f'think must be true, false, "low", "medium" or "high"; got {repr(think)[:40]}'


@pytest.mark.parametrize("think", [True, False, "low", "medium", "high", None])
def test_a_think_switch_or_level_is_taken(think):
    parsed = ol.parse_chat({"model": "specem", "messages": [{"role": "user", "content": "hi"}], "think": think})
    assert parsed.ask.think == think


def test_a_long_think_is_cut_in_its_error_and_images_or_an_openai_field_on_the_top_level_are_400s_naming_them():
    with pytest.raises(ApiError) as caught:
        ol.parse_generate({"model": "specem", "prompt": "hi", "think": "x" * 100})
    assert caught.value.message.endswith(f"got {repr('x' * 100)[:40]}") and len(caught.value.message) < 100
    with pytest.raises(ApiError) as caught:
        ol.parse_generate({"model": "specem", "prompt": "hi", "images": ["aGk="]})
    said = (caught.value.status, caught.value.message, caught.value.param)
    assert said == (400, "images is not supported by the specem ensemble; remove 'images'", "images")
    for name in ("task", "choice_points"):
        with pytest.raises(ApiError) as caught:
            ol.parse_chat({"model": "specem", "messages": [{"role": "user", "content": "hi"}], name: "x"})
        assert (caught.value.status, caught.value.param) == (400, name)
    for empty in ([], "", {}, None):  # nothing to refuse
        assert ol.parse_generate({"model": "specem", "prompt": "hi", "images": empty})
