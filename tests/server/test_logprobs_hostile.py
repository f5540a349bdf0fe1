"""Token log-probabilities where a hostile read found them wrong: an escalated answer (the text is
the reserve member's), a stop string's cut, an alternative that is part of a character, a
``top_logprobs`` below 0, and Ollama's ``logprobs: false`` beside a ``top_logprobs``. The
tokens a route gives always spell the content it gives."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from specem_local.engine.drafted import Draft
from specem_local.engine.evidence import shown_part
from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.test_routes import BASE

ASKED = [{"role": "user", "content": "Well?"}]
CHAT = "/v1/chat/completions"


async def post(members: list, body: dict, path: str = CHAT, **settings) -> dict:
    ensemble = fake_ensemble(*members, max_tokens=40, **settings)
    server = EnsembleServer(ensemble, ServerOptions(queue=2, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        reply = await client.post(path, json={"model": "specem", "messages": ASKED, **body})
    ensemble.close()
    return {"status": reply.status_code, **reply.json()}


def pair(answer: str) -> list:
    return [fake_member("a", answer), fake_member("b", answer, n_params=500)]


def escalating() -> list:
    return [fake_member("a", "It is 42."), fake_member("b", "So 42."), fake_member("big", "Surely 41.", role="reserve")]


async def test_an_escalated_answer_gives_no_tokens_of_the_ensembles_text():
    members = [
        fake_member("a", "It is 42."),
        fake_member("b", "So 42."),
        fake_member("big", "Surely 41.", role="reserve"),
    ]
    chat = await post(members, {"logprobs": True}, escalate_below=0.9999)
    choice = chat["choices"][0]
    assert choice["message"]["content"] == "Surely 41." and choice["logprobs"]["content"] == []
    members = [
        fake_member("a", "It is 42."),
        fake_member("b", "So 42."),
        fake_member("big", "Surely 41.", role="reserve"),
    ]
    ollama = await post(members, {"logprobs": True, "stream": False}, "/api/chat", escalate_below=0.9999)
    assert ollama["message"]["content"] == "Surely 41." and ollama["logprobs"] == []


async def test_a_stop_strings_cut_leaves_no_token_past_it():
    reply = await post(pair("Paris is the capital. Yes indeed."), {"logprobs": True, "stop": ["Yes"]})
    choice = reply["choices"][0]
    assert choice["message"]["content"] == "Paris is the capital. "
    assert "".join(t["token"] for t in choice["logprobs"]["content"]) == "Paris is the capital. "


async def test_an_alternative_that_is_part_of_a_character_keeps_its_own_bytes():
    reply = await post(pair("Café"), {"logprobs": True, "top_logprobs": 1})
    tokens = reply["choices"][0]["logprobs"]["content"]
    assert bytes(b for t in tokens for b in t["bytes"]).decode() == "Café"
    assert all(t["top_logprobs"][0]["bytes"] == t["bytes"] for t in tokens)  # greedy: each its own likeliest


@pytest.mark.parametrize("top", [-1, 21, 2.5, True])
async def test_a_top_logprobs_outside_0_to_20_is_a_400_on_both_routes(top):
    chat = await post(pair("Yes."), {"logprobs": True, "top_logprobs": top})
    assert chat["status"] == 400 and chat["error"]["param"] == "top_logprobs"
    assert "from 0 to 20" in chat["error"]["message"]
    ollama = await post(pair("Yes."), {"logprobs": True, "top_logprobs": top, "stream": False}, "/api/chat")
    assert ollama["status"] == 400 and "top_logprobs" in ollama["error"]
    good = await post(pair("Yes."), {"logprobs": True, "top_logprobs": 0})
    assert good["status"] == 200 and good["choices"][0]["logprobs"]["content"]


async def test_ollamas_logprobs_false_wins_over_a_top_logprobs():
    reply = await post(pair("Yes."), {"logprobs": False, "top_logprobs": 2, "stream": False}, "/api/chat")
    assert reply["status"] == 200 and "logprobs" not in reply
    asked = await post(pair("Yes."), {"top_logprobs": 2, "stream": False}, "/api/chat")
    assert all(len(t["top_logprobs"]) == 2 for t in asked["logprobs"])  # top_logprobs alone asks, as before


def test_the_part_of_a_draft_an_answer_shows_is_its_whole_tokens_within_the_text_shown():
    draft = Draft("abcé", False, [0, 1, 2, 3], [np.zeros(4)] * 5)
    pieces = {0: b"a", 1: b"bc", 2: b"\xc3", 3: b"\xa9"}.__getitem__
    cut = shown_part(draft, "abc", pieces)
    assert (cut.text, cut.text_tokens) == ("abc", [0, 1])
    assert shown_part(draft, "ab", pieces).text_tokens == [0]  # "bc" is not all shown: left out
    assert shown_part(draft, "abcé", pieces) is draft


def test_ollamas_options_each_skipped_where_it_means_the_default_and_the_rest_read():
    from specem_local.server.ollama_format import parse_chat

    def settings(options: dict) -> dict:
        return parse_chat({"model": "specem", "messages": ASKED, "options": options}).ask.settings

    assert settings({"seed": -1, "top_k": 5}) == {"top_k": 5}  # -1: Ollama's random seed
    assert settings({"seed": -2, "top_k": 5}) == {"seed": -2, "top_k": 5}
    assert settings({"num_predict": -1, "top_k": 5}) == {"top_k": 5}  # the ensemble's own limit
    assert settings({"num_ctx": 4096, "top_k": 5}) == {"top_k": 5}  # a load option: the models are loaded
    assert settings({"penalize_newline": None, "top_k": 5}) == {"top_k": 5}


@pytest.mark.parametrize(
    ("body", "path", "said", "field"),
    [
        ({"logprobs": "yes"}, CHAT, "logprobs must be true or false", "logprobs"),
        ({"top_logprobs": 2}, CHAT, "top_logprobs needs logprobs: true", "top_logprobs"),
        ({"reasoning_effort": "huge"}, CHAT, "reasoning_effort must be one of none, minimal, low, medium, high, "
         "xhigh, max; got 'huge'", "reasoning_effort"),
        ({"options": []}, "/api/chat", "options must be an object", "options"),
        ({"options": {"mirostat_x": 1}}, "/api/chat", "options.mirostat_x is not an option this server knows; "
         "remove it", "options.mirostat_x"),
    ],
)  # fmt: skip
async def test_each_refusal_says_what_is_wrong_in_its_words(body, path, said, field):
    reply = await post(pair("Yes."), {**body, "stream": False}, path)
    assert reply["status"] == 400
    error = reply["error"]
    assert (error["message"], error["param"]) == (said, field) if isinstance(error, dict) else error == said
