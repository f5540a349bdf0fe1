"""The line for the models against clients that go away (issue 39): a request that waits and
whose client hangs up gives its place back at once and never starts an answer; an answer that
fails is recorded as failed in the history."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from specem_local.storage.history import History
from tests.conftest import poll_until
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import health, serving

ASK = {"model": "specem", "messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 400}


def slow(_model, _rows) -> None:
    time.sleep(0.01)


def test_requests_whose_clients_hang_up_while_waiting_give_their_place_back(tmp_path, monkeypatch):
    """Checked against the code before: /health said "waiting 4" with nobody waiting, live
    clients got 429, and each ghost later started an answer of its own. The long answer is held
    until the four clients have hung up (no race on its length); a request sent after it is
    answered next, so a ghost answer in between would show in the count."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    release = threading.Event()

    def held(_model, _rows) -> None:
        release.wait(60)

    ensemble = fake_ensemble(
        fake_member("a", "Once upon a time " * 40, on_decode=held), fake_member("b", "Once"), ignore_eos=True
    )
    server = EnsembleServer(ensemble, ServerOptions(queue=4, record=True))
    with serving(server) as base:
        streamed = threading.Thread(
            target=lambda: httpx.post(f"{base}/v1/chat/completions", json={**ASK, "stream": True}, timeout=120),
            daemon=True,
        )
        streamed.start()
        poll_until(lambda: health(base)["answering"], 30, "the long answer did not start")
        for _ in range(4):
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{base}/v1/chat/completions", json={**ASK, "max_tokens": 8}, timeout=1)
        poll_until(lambda: health(base)["waiting"] == 0, 5, "the gone clients kept their places")
        assert health(base)["answering"] and health(base)["answered"] == 0
        release.set()
        streamed.join(60)
        assert not streamed.is_alive()
        after = httpx.post(f"{base}/v1/chat/completions", json={**ASK, "max_tokens": 8}, timeout=60)
        assert after.status_code == 200
        assert health(base)["answered"] == 2  # the long answer and this one: no ghost answered between
    assert len(History().chats()) == 2
    ensemble.close()


async def test_a_failed_answer_is_recorded_as_failed_with_its_error(tmp_path, monkeypatch):
    """Checked against the code before: it stayed "still being written by another window", later
    "interrupted", and the error was lost."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    armed = {"fail": True}

    def fault(_model, _rows) -> None:
        if armed["fail"]:
            armed["fail"] = False
            raise RuntimeError("decode failed: simulated fault")

    ensemble = fake_ensemble(fake_member("a", "Paris.", on_decode=fault), fake_member("b", "Paris."))
    server = EnsembleServer(ensemble, ServerOptions(record=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url="http://127.0.0.1") as http:
        response = await http.post("/v1/chat/completions", json={**ASK, "max_tokens": 8})
        assert response.status_code == 500
    [chat] = History().chats()
    answer = History().load(chat.id).turns[-1]
    assert answer.error is not None and "simulated fault" in answer.error
    ensemble.close()


@pytest.fixture
async def http():
    ensemble = fake_ensemble(fake_member("a", "Paris is the capital."), fake_member("b", "Paris."), segment_tokens=4)
    server = EnsembleServer(ensemble, ServerOptions(queue=2, max_body_bytes=1 << 20, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url="http://127.0.0.1") as client:
        yield client
    ensemble.close()


OPENAI = {"model": "specem", "messages": [{"role": "user", "content": "Capital of France?"}], "max_tokens": 8}
OLLAMA = {"model": "specem", "messages": OPENAI["messages"], "stream": False, "options": {"num_predict": 8}}


async def answers(http) -> None:
    response = await http.post("/v1/chat/completions", json=OPENAI)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
async def test_an_integer_of_thousands_of_digits_is_a_400_not_a_500(http, path):
    body = (OPENAI if path.startswith("/v1") else OLLAMA) | {"seed": 0}
    text = json.dumps(body).replace('"seed": 0', '"seed": ' + "9" * 5000)
    response = await http.post(path, content=text, headers={"content-type": "application/json"})
    assert response.status_code == 400 and "a number too long" in response.text
    await answers(http)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_over_long_prompt_is_a_400_before_any_token_streamed_or_not(http, stream):
    long = [{"role": "user", "content": "word " * 3000}]
    response = await http.post("/v1/chat/completions", json={**OPENAI, "messages": long, "stream": stream})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    ollama = await http.post("/api/chat", json={**OLLAMA, "messages": long, "stream": stream})
    assert ollama.status_code == 400 and "leaves no room" in ollama.json()["error"]
    await answers(http)


async def test_what_the_clients_send_to_load_and_probe_is_taken(http):
    """The ollama CLI loads a model with "messages": []; its default seed is -1 ("random");
    OpenAI clients send modalities ["text"] and response_format text and retrieve a model."""
    loaded = await http.post("/api/chat", json={**OLLAMA, "messages": []})
    assert loaded.status_code == 200 and loaded.json()["done_reason"] == "load"
    seeded = await http.post("/api/chat", json={**OLLAMA, "options": {"seed": -1, "num_predict": 8}})
    assert seeded.status_code == 200 and seeded.json()["message"]["content"]
    text = {**OPENAI, "modalities": ["text"], "response_format": {"type": "text"}}
    assert (await http.post("/v1/chat/completions", json=text)).status_code == 200
    audio = await http.post("/v1/chat/completions", json={**OPENAI, "modalities": ["text", "audio"]})
    assert audio.status_code == 400 and audio.json()["error"]["param"] == "modalities"
    model = await http.get("/v1/models/specem")
    assert model.status_code == 200 and model.json()["id"] == "specem"
    missing = await http.get("/v1/models/gpt-4o")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def test_serve_on_a_port_in_use_says_so_before_loading_any_model():
    import socket
    import subprocess
    import sys

    from tests.conftest import ROOT

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "specem_local", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    assert result.returncode == 1 and result.stdout == ""  # nothing loaded, nothing served
    assert result.stderr.strip().startswith(f"specem: error: cannot listen on 127.0.0.1:{port}")
    assert time.monotonic() - started < 30


async def test_a_client_that_hangs_up_while_sending_its_body_is_no_server_error(capsys):
    ensemble = fake_ensemble(fake_member("a", "Paris."), fake_member("b", "Paris."))
    server = EnsembleServer(ensemble, ServerOptions(record=False))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    half = {"type": "http.request", "body": b'{"model": "spe', "more_body": True}
    messages = iter([half, {"type": "http.disconnect"}])
    sent = []

    async def receive():
        return next(messages, {"type": "http.disconnect"})

    async def send(message):
        sent.append(message)

    await server.app(scope, receive, send)
    assert "error" not in capsys.readouterr().err  # no "server error" with an empty message in the log
    assert sent and sent[0].get("status") != 500
    ensemble.close()
