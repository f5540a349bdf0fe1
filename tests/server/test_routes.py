"""The server's routes in-process, over fake models (seconds): every refusal in its API's shape,
the gate, Ollama's routes, and that no failure holds the ensemble (the next request answers).
The same cases against a real ``specem serve`` are in tests/real_models/test_server_hostile.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from specem_local.server import EnsembleServer, GateRules, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member

ANSWER = "Paris is the capital."
BASE = "http://127.0.0.1:8080"
ASK = {"model": "specem", "messages": [{"role": "user", "content": "Capital of France?"}], "max_tokens": 12}


class Faulty:
    """Makes the next decode of a fake model raise, as a llama.cpp fault would."""

    armed = False

    def __call__(self, _model, _rows) -> None:
        if self.armed:
            self.armed = False
            raise RuntimeError("decode failed: simulated fault")


@pytest.fixture
def fault():
    return Faulty()


@pytest.fixture
def server(fault):
    ensemble = fake_ensemble(
        fake_member("a", ANSWER, on_decode=fault), fake_member("b", ANSWER, words=[" capital"]), segment_tokens=4
    )
    served = EnsembleServer(ensemble, ServerOptions(queue=2, max_body_bytes=4096, record=False))
    yield served
    ensemble.close()


@pytest.fixture
async def http(server):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as client:
        yield client


async def answers(http) -> None:
    """A good request after whatever came before it is answered in full."""
    response = await http.post("/v1/chat/completions", json=ASK)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"].startswith("Paris")


async def test_a_bad_seed_is_a_400_naming_it_and_the_next_request_answers(http, server):
    response = await http.post("/v1/chat/completions", json={**ASK, "seed": -5})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "seed" and "seed must be in [0, 2^64)" in error["message"]
    await answers(http)
    await settled(server)


async def settled(server) -> None:
    """The line is empty again (the worker hands the end to the loop just after the final event)."""
    for _ in range(500):
        if not server.answers.answering and server.answers.waiting == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the answer line did not settle")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_fault_while_answering_is_a_500_and_never_a_wedge(http, server, fault, stream, capsys):
    fault.armed = True
    response = await http.post("/v1/chat/completions", json={**ASK, "stream": stream})
    if stream:  # the stream had begun: an error chunk, then [DONE]
        assert response.status_code == 200 and "simulated fault" in response.text and "[DONE]" in response.text
    else:
        assert response.status_code == 500
        assert response.json()["error"]["type"] == "server_error" and "simulated fault" in response.text
    logged = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(logged) == 1 and logged[0].startswith("specem serve: error: the answer failed")
    await answers(http)


async def test_an_unexpected_fault_in_a_route_is_a_500_in_openais_shape(http, server, monkeypatch, capsys):
    def broken(*_prompt, **_settings):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(server.ensemble, "prepare", broken)
    response = await http.post("/v1/chat/completions", json=ASK)
    assert response.status_code == 500 and response.json()["error"]["type"] == "server_error"
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.undo()
    await answers(http)


@pytest.mark.parametrize(
    ("method", "path", "status", "shape"),
    [
        ("GET", "/v1/chat/completions", 405, "openai"),
        ("DELETE", "/v1/models", 405, "openai"),
        ("POST", "/v1/embeddings", 404, "openai"),
        ("POST", "/v1/nothing/here", 404, "openai"),
        ("GET", "/api/chat", 405, "ollama"),
        ("POST", "/api/embed", 404, "ollama"),
        ("DELETE", "/api/delete", 404, "ollama"),
    ],
)
async def test_unknown_routes_and_wrong_methods(http, method, path, status, shape):
    response = await http.request(method, path, json={})
    assert response.status_code == status
    body = response.json()
    assert isinstance(body["error"], str) if shape == "ollama" else body["error"]["message"]


async def test_a_body_too_deep_or_too_large_is_refused_before_parsing(http):
    deep = await http.post("/v1/chat/completions", content=b"[" * 4000, headers={"Content-Type": "application/json"})
    assert deep.status_code == 400 and "nested more than" in deep.json()["error"]["message"]
    large = await http.post("/v1/chat/completions", json={**ASK, "pad": "x" * 5000})
    assert large.status_code == 413
    await answers(http)


async def test_a_foreign_host_is_refused(http):
    response = await http.post("/v1/chat/completions", json=ASK, headers={"Host": "evil.example.com:8080"})
    assert response.status_code == 403 and "--allowed-host" in response.json()["error"]["message"]
    health = await http.get("/health", headers={"Host": "localhost:8080"})
    assert health.status_code == 200


async def test_a_page_on_another_site_cannot_run_an_answer(http, server):
    for content_type in ("text/plain", "application/json"):
        response = await http.post(
            "/v1/chat/completions",
            content=json.dumps(ASK),
            headers={"Origin": "http://evil.example.com", "Content-Type": content_type},
        )
        assert response.status_code == 403 and "--allow-origin" in response.text
    assert server.answers.answered == 0
    preflight = await http.options(
        "/v1/chat/completions",
        headers={"Origin": "http://evil.example.com", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


async def test_a_local_page_gets_cors_answers(http):
    origin = "http://localhost:5173"
    preflight = await http.options(
        "/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "content-type, authorization"
    response = await http.post("/v1/chat/completions", json=ASK, headers={"Origin": origin})
    assert response.status_code == 200 and response.headers["access-control-allow-origin"] == origin


async def test_an_allowed_origin_and_host(fault):
    ensemble = fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER), segment_tokens=4)
    gate = GateRules("127.0.0.1", ("mybox.lan",), ("https://chat.example.com",))
    server = EnsembleServer(ensemble, ServerOptions(record=False, gate=gate))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url="http://mybox.lan") as http:
        response = await http.post("/v1/chat/completions", json=ASK, headers={"Origin": "https://chat.example.com"})
        assert response.status_code == 200
    ensemble.close()


async def test_a_post_that_is_not_json_is_a_415(http):
    response = await http.post("/v1/chat/completions", content=json.dumps(ASK), headers={"Content-Type": "text/plain"})
    assert response.status_code == 415 and "application/json" in response.json()["error"]["message"]
    form = await http.post("/api/chat", data={"model": "specem"})
    assert form.status_code == 415 and "application/json" in form.json()["error"]
    await answers(http)


# -- Ollama's API ------------------------------------------------------------------------------
OLLAMA_CHAT = {"model": "specem:latest", "messages": [{"role": "user", "content": "Capital?"}]}


async def test_ollama_chat_streams_ndjson_with_final_statistics(http):
    response = await http.post("/api/chat", json={**OLLAMA_CHAT, "options": {"num_predict": 12, "seed": 3}})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    *parts, last = lines
    assert parts and all(not line["done"] and line["message"]["role"] == "assistant" for line in parts)
    assert "".join(line["message"]["content"] for line in parts).startswith("Paris")
    assert all(line["x_specem"]["author"] in ("a", "b") for line in parts)
    assert last["done"] and last["done_reason"] in ("stop", "length") and last["eval_count"] > 0
    assert last["total_duration"] >= last["eval_duration"] > 0 and last["prompt_eval_count"] > 0


async def test_ollama_chat_and_generate_whole(http):
    chat = await http.post("/api/chat", json={**OLLAMA_CHAT, "stream": False, "options": {"temperature": 0}})
    assert chat.status_code == 200 and chat.json()["message"]["content"].startswith("Paris") and chat.json()["done"]
    generate = await http.post("/api/generate", json={"model": "specem", "prompt": "Capital?", "stream": False})
    assert generate.json()["response"].startswith("Paris") and generate.json()["done_reason"] in ("stop", "length")
    load = await http.post("/api/generate", json={"model": "specem"})
    assert load.json() == {**load.json(), "done": True, "done_reason": "load", "response": ""}


async def test_ollama_catalogue_routes(http):
    assert (await http.get("/api/version")).json()["version"]
    model, *alone = (await http.get("/api/tags")).json()["models"]
    assert model["name"] == model["model"] == "specem:latest" and model["details"]["format"] == "gguf"
    assert [entry["name"] for entry in alone] == ["specem/a:latest", "specem/b:latest"]
    show = await http.post("/api/show", json={"model": "specem"})
    assert show.status_code == 200 and show.json()["model_info"]["specem.members"] == ["a", "b"]
    assert (await http.get("/api/ps")).json()["models"][0]["name"] == "specem:latest"
    root = await http.get("/")
    assert root.status_code == 200 and "specem is running" in root.text


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({**OLLAMA_CHAT, "model": "llama3"}, 404, "not found"),
        ({**OLLAMA_CHAT, "options": {"seed": -5}}, 400, "options.seed must be"),  # -1 is Ollama's "random"
        ({**OLLAMA_CHAT, "options": {"num_predict": "many"}}, 400, "options.num_predict must be"),
        ({**OLLAMA_CHAT, "options": {"temperature": "hot"}}, 400, "temperature must be a number"),
        ({**OLLAMA_CHAT, "options": {"repeat_penalty": 1.3}}, 400, "repeat_penalty"),
        ({**OLLAMA_CHAT, "options": {"bogus": 1}}, 400, "bogus"),
        ({**OLLAMA_CHAT, "options": []}, 400, "options must be an object"),
        ({**OLLAMA_CHAT, "format": 5}, 400, "format"),
        ({**OLLAMA_CHAT, "format": "xml"}, 400, "format"),
        ({**OLLAMA_CHAT, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400, "images"),
        ({**OLLAMA_CHAT, "messages": "hello"}, 400, "messages"),
        ({**OLLAMA_CHAT, "options": {"num_ctx": "big"}}, 400, "options.num_ctx must be an integer"),
        ({**OLLAMA_CHAT, "options": {"use_mmap": 1}}, 400, "options.use_mmap must be true or false"),
        ({**OLLAMA_CHAT, "options": {"repeat_penalty": True}}, 400, "options.repeat_penalty"),  # true == 1.0
        ({**OLLAMA_CHAT, "think": 0}, 400, "think"),  # 0 == false, yet not a switch
        ({**OLLAMA_CHAT, "stream": "yes"}, 400, "stream"),
        ([1, 2, 3], 400, "JSON object"),
    ],
)
async def test_ollama_refusals_name_what_is_wrong(http, body, status, says):
    response = await http.post("/api/chat", json=body)
    assert response.status_code == status and says in response.json()["error"]
    ok = await http.post("/api/chat", json={**OLLAMA_CHAT, "stream": False})
    assert ok.status_code == 200


async def test_null_messages_load_the_model_as_ollama_does(http):
    response = await http.post("/api/chat", json={"model": "specem", "messages": None, "stream": False})
    assert response.status_code == 200 and response.json()["done_reason"] == "load"


async def test_openai_names_the_field_as_sent_and_takes_null_as_absent(http):
    refused = await http.post("/v1/chat/completions", json={**ASK, "max_completion_tokens": 0})
    error = refused.json()["error"]
    assert refused.status_code == 400 and error["param"] == "max_completion_tokens"
    assert error["message"].startswith("max_completion_tokens must be")
    # true == 1 and 0 == false in Python; tools: 0 was found by the fuzz (taken as no tools)
    for field, value in (("n", True), ("user", 7), ("logprobs", 0), ("tools", 0)):
        refused = await http.post("/v1/chat/completions", json={**ASK, field: value})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field, (field, refused.text)
    taken = await http.post("/v1/chat/completions", json={**ASK, "stream": None, "user": None})
    assert taken.status_code == 200 and taken.json()["object"] == "chat.completion"


async def test_load_options_are_accepted_and_left_alone(http):
    options = {"num_ctx": 8192, "num_thread": 4, "repeat_penalty": 1.0, "num_predict": -1, "stop": "\n\n"}
    response = await http.post("/api/chat", json={**OLLAMA_CHAT, "stream": False, "options": options})
    assert response.status_code == 200
