"""A real ``specem serve`` (demo trio, no key, as a user starts it) against what a hostile
tester tried on 63faf3c: each of issue 24's five repros, then a good request that must answer.
Also Ollama's own ``ollama`` client and the ``openai`` client streaming from the same server,
and a short fuzz run (research/fuzz.py) with its invariants."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import httpx
import ollama
import openai
import pytest

from specem_research import fuzz
from specem_research.load import start_server
from tests.conftest import ROOT, stop_process

GOOD = {"model": "specem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile-data")
    log = data / "serve.log"
    process, base = start_server("--queue", "2", env={"SPECEM_DATA_DIR": str(data)}, log=log)
    yield {"base": base, "data": data, "log": log}
    stop_process(process, 30)
    assert "Traceback" not in log.read_text(errors="replace")


def answers(server) -> None:
    response = httpx.post(server["base"] + "/v1/chat/completions", json=GOOD, timeout=300)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


def serve_chats(server) -> int:
    listed = subprocess.run(
        [sys.executable, "-m", "specem_local", "history", "list", "--origin", "serve", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "SPECEM_DATA_DIR": str(server["data"])},
    )
    return len(json.loads(listed.stdout or "[]"))


def test_1_a_negative_seed_is_a_400_and_does_not_wedge_the_server(server):
    response = httpx.post(server["base"] + "/v1/chat/completions", json={**GOOD, "seed": -5}, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "seed"
    answers(server)
    with httpx.Client(base_url=server["base"]) as http:
        health = fuzz.settled_health(http)
    assert not health["answering"] and health["waiting"] == 0


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/chat/completions", 405),
        ("DELETE", "/v1/models", 405),
        ("POST", "/v1/completions", 404),
        ("POST", "/v1/embeddings", 404),
        ("OPTIONS", "/v1/chat/completions", 204),
    ],
)
def test_2_routes_and_methods_the_server_lacks_are_404_and_405(server, method, path, status):
    headers = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
    response = httpx.request(method, server["base"] + path, json={}, headers=headers)
    assert response.status_code == status
    if status != 204:
        assert response.json()["error"]["message"]
    answers(server)


def test_3_a_deeply_nested_body_is_a_400(server):
    response = httpx.post(
        server["base"] + "/v1/chat/completions", content=b"[" * 100_000, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and "nested" in response.json()["error"]["message"]
    answers(server)


def test_4_no_web_page_on_another_site_can_use_the_models(server):
    before = serve_chats(server)
    rebound = httpx.post(server["base"] + "/v1/chat/completions", json=GOOD, headers={"Host": "evil.example.com:18080"})
    assert rebound.status_code == 403
    drive_by = httpx.post(
        server["base"] + "/v1/chat/completions",
        content=json.dumps(GOOD),
        headers={"Content-Type": "text/plain", "Origin": "http://evil.example.com"},
    )
    assert drive_by.status_code == 403
    assert serve_chats(server) == before  # nothing ran, nothing was recorded
    answers(server)
    assert serve_chats(server) == before + 1


@pytest.mark.parametrize(("args", "field"), [(["--seed", "-1"], "seed"), (["--temperature", "nan"], "temperature")])
def test_5_the_cli_refuses_bad_values_in_one_line_with_exit_2(tmp_path, args, field):
    result = subprocess.run(
        [sys.executable, "-m", "specem_local", "run", *args, "hi"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "SPECEM_DATA_DIR": str(tmp_path)},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"specem: error: {field} must be") and result.stderr.count("\n") == 1


def test_ollamas_client_lists_shows_and_streams(server):
    client = ollama.Client(host=server["base"], timeout=300)
    members = ["qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"]
    assert [m.model for m in client.list().models] == ["specem:latest", *(f"specem/{m}:latest" for m in members)]
    assert client.show("specem").modelinfo["specem.members"] == ["qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"]
    question = [{"role": "user", "content": "What is the capital of France?"}]
    options = {"temperature": 0, "num_predict": 24, "seed": 1}
    parts = list(client.chat(model="specem", messages=question, stream=True, options=options))
    assert parts[-1].done and parts[-1].eval_count > 0 and parts[-1].done_reason in ("stop", "length")
    streamed = "".join(part.message.content for part in parts)
    whole = client.chat(model="specem:latest", messages=question, options=options)
    assert streamed == whole.message.content and "Paris" in streamed
    generated = client.generate(model="specem", prompt="What is the capital of France?", options=options)
    assert generated.response == streamed
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="llama3", messages=question)
    assert refused.value.status_code == 404


def test_openais_client_streams_from_the_same_server(server):
    client = openai.OpenAI(base_url=server["base"] + "/v1", api_key="unused", max_retries=0, timeout=300)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    chunks = client.chat.completions.create(
        model="specem", messages=question, stream=True, temperature=0, max_tokens=24, seed=1
    )
    assert "Paris" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="specem", messages=question, seed=-5)
    assert refused.value.body["param"] == "seed"


@pytest.mark.timeout(900)
def test_a_short_fuzz_run_keeps_every_invariant(tmp_path):
    """All 120 requests are sent however slow the machine (no wall-clock budget: the pytest
    timeout is the guard against a hang), and refusals of a mutated field did occur."""
    result = fuzz.run(requests=120, seconds=math.inf, seed=1, folder=tmp_path)
    assert result["violations"] == [] and result["server_errors"] == 0
    assert result["requests"] == 120 and result["closing_request"] == 200
    assert result["refusals_naming_the_field"] >= 5 and result["responses_by_code"].get("200", 0) >= 5
