"""How sure an answer is, and each token's log-probability, through both APIs (issue 55): the
``openai`` client's ``logprobs`` / ``top_logprobs`` whole and streamed, Ollama's ``logprobs``,
and ``x_specem.confidence`` on the last chunk, the completion and Ollama's last line."""

from __future__ import annotations

import json

import httpx
import openai

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import serving

ANSWER = "Paris is the capital."
ASKED = [{"role": "user", "content": "Capital of France?"}]


def server() -> EnsembleServer:
    ensemble = fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER, n_params=500), max_tokens=40)
    return EnsembleServer(ensemble, ServerOptions(queue=2, record=False))


def test_the_openai_client_reads_each_tokens_logprobs_and_the_answers_confidence():
    served = server()
    with serving(served) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        reply = client.chat.completions.create(model="specem", messages=ASKED, logprobs=True, top_logprobs=2)
        choice = reply.choices[0]
        assert choice.logprobs is not None and "".join(t.token for t in choice.logprobs.content) == ANSWER
        assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in choice.logprobs.content)
        facts = reply.model_extra["x_specem"]
        assert 0 < facts["confidence"] < 1 and facts["confidence_from"] and facts["unsure"] is False
        chunks = list(client.chat.completions.create(model="specem", messages=ASKED, logprobs=True, stream=True))
        streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
        assert "".join(t.token for t in streamed) == ANSWER and all(t.top_logprobs == [] for t in streamed)
        assert 0 < chunks[-1].model_extra["x_specem"]["confidence"] < 1
        plain = client.chat.completions.create(model="specem", messages=ASKED)
        assert plain.choices[0].logprobs is None  # not asked: none
    served.ensemble.close()


def test_ollamas_logprobs_and_the_confidence_on_its_last_line():
    served = server()
    with serving(served) as base:
        body = {"model": "specem", "messages": ASKED, "stream": False, "logprobs": True, "top_logprobs": 1}
        whole = httpx.post(f"{base}/api/chat", json=body, timeout=60).json()
        assert "".join(t["token"] for t in whole["logprobs"]) == whole["message"]["content"] == ANSWER
        assert all(len(t["top_logprobs"]) == 1 for t in whole["logprobs"])
        assert 0 < whole["x_specem"]["confidence"] < 1
        with httpx.stream("POST", f"{base}/api/chat", json={**body, "stream": True}, timeout=60) as lines:
            streamed = [json.loads(line) for line in lines.iter_lines() if line]
        tokens = [t["token"] for line in streamed if not line["done"] for t in line.get("logprobs", [])]
        assert "".join(tokens) == ANSWER and 0 < streamed[-1]["x_specem"]["confidence"] < 1
        refused = httpx.post(f"{base}/api/chat", json={**body, "logprobs": "yes"}, timeout=60)
        assert refused.status_code == 400 and "logprobs" in refused.json()["error"]
        too_many = httpx.post(f"{base}/api/chat", json={**body, "top_logprobs": 50}, timeout=60)
        assert too_many.status_code == 400 and "top_logprobs" in too_many.json()["error"]
    served.ensemble.close()
