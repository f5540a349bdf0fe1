"""The server's failure paths for real: uvicorn on loopback over the real demo trio, a fault
injected into one model's decode as llama.cpp would raise it, the official ``openai`` client
and raw HTTP. Before, they ran only in-process over fake models (tests/server/test_routes.py)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import httpx
import openai
import pytest
import uvicorn

from specem_local.server import EnsembleServer, ServerOptions
from tests.conftest import poll_until
from tests.server.live import free_port

ASK = [{"role": "user", "content": "Name three colours."}]


class Fault:
    """Wraps a model's ``decode``: once armed, its next call raises."""

    def __init__(self, decode) -> None:
        self.decode = decode
        self.armed = threading.Event()

    def __call__(self, rows):
        if self.armed.is_set():
            self.armed.clear()
            raise RuntimeError("decode failed: simulated llama.cpp fault")
        return self.decode(rows)


@pytest.fixture(scope="module")
def served(trio):
    """The trio served with ``ignore_eos``: every answer runs to its max_tokens, long enough for a
    fault or a hang-up to land in its middle."""
    settings = trio.settings
    trio.settings = dataclasses.replace(settings, ignore_eos=True)
    member = trio.members[0]
    fault = Fault(member.model.decode)
    member.model.decode = fault
    port = free_port()
    app = EnsembleServer(trio, ServerOptions(queue=2, record=False)).app
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    poll_until(lambda: server.started, 30, "uvicorn never started")
    yield f"http://127.0.0.1:{port}", fault
    server.should_exit = True
    thread.join(30)
    assert not thread.is_alive(), "uvicorn did not stop"
    member.model.decode = fault.decode
    trio.settings = settings


def health(base: str) -> dict:
    return httpx.get(f"{base}/health").json()


def answers_well(base: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)  # a 500 must show
    reply = client.chat.completions.create(model="specem", messages=ASK, max_tokens=12, temperature=0)
    assert reply.choices[0].message.content and reply.choices[0].finish_reason in ("stop", "length")
    poll_until(lambda: not health(base)["answering"], 30, "the answer was never handed back")


def test_a_fault_in_a_whole_answer_is_a_500_server_error_then_the_next_answers(served):
    base, fault = served
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    fault.armed.set()
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="specem", messages=ASK, max_tokens=24)
    error = caught.value.response.json()["error"]
    assert caught.value.status_code == 500 and error["type"] == "server_error"
    assert "simulated llama.cpp fault" in error["message"]
    answers_well(base)


def test_a_fault_once_a_stream_has_begun_ends_it_with_an_error_chunk(served):
    base, fault = served
    body = {"model": "specem", "messages": ASK, "max_tokens": 200, "stream": True, "temperature": 0}
    chunks: list[dict] = []
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks.append(json.loads(line[6:]))
            if len(chunks) == 2:  # some text is out: the fault strikes mid-answer
                fault.armed.set()
    text = [c for c in chunks if "choices" in c and c["choices"][0]["delta"].get("content")]
    assert text and "error" in chunks[-1] and chunks[-1]["error"]["type"] == "server_error"
    assert "simulated llama.cpp fault" in chunks[-1]["error"]["message"]
    answers_well(base)


def test_a_client_that_hangs_up_on_a_whole_answer_cancels_it_and_frees_the_models(served):
    base, _ = served
    before = health(base)["cancelled"]
    body = {"model": "specem", "messages": ASK, "max_tokens": 300, "temperature": 0.8, "seed": 3}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{base}/v1/chat/completions", json=body, timeout=httpx.Timeout(60, read=1.5))
    poll_until(lambda: health(base)["cancelled"] > before, 60, "the hang-up never cancelled the answer")
    poll_until(lambda: not health(base)["answering"], 60, "the models were never freed")
    started = time.monotonic()
    answers_well(base)
    assert time.monotonic() - started < 60
