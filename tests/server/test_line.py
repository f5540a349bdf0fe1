"""The line for the models against clients that go away (issue 39): a request that waits and
whose client hangs up gives its place back at once and never starts an answer; an answer that
fails is recorded as failed in the history."""

from __future__ import annotations

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
    clients got 429, and each ghost later started an answer of its own."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    ensemble = fake_ensemble(fake_member("a", "Once upon a time " * 40, on_decode=slow), fake_member("b", "Once"),
                             ignore_eos=True)
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
        answered = health(base)["answered"]
        streamed.join(120)
        poll_until(lambda: not health(base)["answering"], 30, "the long answer did not end")
        time.sleep(1)  # a ghost would have started by now
        assert health(base)["answered"] == answered + 1  # the long answer only: no ghost answers
    assert len(History().chats()) == 1
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
