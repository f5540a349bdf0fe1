"""``specem serve`` as a real process on a loopback port, with the demo trio, answered through
the official ``openai`` client (and raw HTTP where a client would hide what is checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import anthropic
import httpx
import openai
import pytest

from specem_research.load import start_server
from tests.conftest import ROOT, poll_until, stop_process

KEY = "test-key-123"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("serve-data")
    process, base = start_server(
        "--api-key", KEY, "--queue", "1", "--parallel", "1", "--max-body-bytes", "20000",
        env={"SPECEM_DATA_DIR": str(data)},
    )  # fmt: skip
    yield {"base": base, "data": data, "process": process}
    stop_process(process, 30)


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server["base"] + "/v1", api_key=KEY, max_retries=0, timeout=300)


def health(server) -> dict:
    return httpx.get(f"{server['base']}/health", headers={"Authorization": f"Bearer {KEY}"}).json()


ENDLESS = {"ignore_eos": True}  # an answer runs to its max_tokens, so its length is known


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_models_lists_the_ensemble_and_its_members(client):
    model, *alone = client.models.list().data
    members = ["qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"]
    assert model.id == "specem" and model.model_extra["members"] == members
    assert [entry.id for entry in alone] == [f"specem/{name}" for name in members]  # each member on its own


def test_streamed_deltas_equal_the_answer_and_carry_the_authors(server, client):
    cancelled = health(server)["cancelled"]
    request = dict(model="specem", messages=ask("What is the capital of France?"), temperature=0, seed=7, max_tokens=40)
    whole = client.chat.completions.create(**request)
    chunks = list(client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert all(
        c.model_extra["x_specem"]["author"] in ("qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m")
        for c in content_chunks
    )
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    assert "x_specem" in whole.model_extra and whole.model_extra["x_specem"]["wins"]
    assert health(server)["cancelled"] == cancelled  # answers that ran to their end are not counted


def test_a_stop_string_and_a_multi_turn_conversation(client):
    counted = client.chat.completions.create(
        model="specem",
        messages=ask("Count from one to ten in words, separated by commas."),
        temperature=0,
        max_tokens=60,
        stop=["five"],
    )
    assert "five" not in counted.choices[0].message.content and counted.choices[0].finish_reason == "stop"
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    reply = client.chat.completions.create(model="specem", messages=conversation, temperature=0, max_tokens=20)
    assert "Ada" in reply.choices[0].message.content


def test_a_trailing_assistant_message_is_continued(client):
    """As llama.cpp's server does: the reply is the rest of the answer, not a new one."""
    question = ask("Count from one to ten in words, separated by commas.")
    whole = client.chat.completions.create(model="specem", messages=question, temperature=0, max_tokens=40)
    text = whole.choices[0].message.content
    cut = text.index(",") + 1  # "One," (a segment may end anywhere; the text is what counts)
    started = [*question, {"role": "assistant", "content": text[:cut]}]
    rest = client.chat.completions.create(model="specem", messages=started, temperature=0, max_tokens=20)
    continuation = rest.choices[0].message.content
    assert continuation and not continuation.lstrip().lower().startswith("one")
    assert "two" in (text[:cut] + continuation).lower()


def test_a_client_that_goes_away_cancels_its_answer_and_the_next_is_answered(server, client):
    before = health(server)["cancelled"]
    with httpx.stream(
        "POST",
        f"{server['base']}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": "specem",
            "messages": ask("Write a very long story about a dragon."),
            "stream": True,
            "max_tokens": 400,
            "temperature": 0.8,
        },
        timeout=120,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                break  # one chunk, then hang up
    deadline = time.monotonic() + 60
    while health(server)["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert health(server)["cancelled"] == before + 1 and not health(server)["answering"]
    after = client.chat.completions.create(model="specem", messages=ask("Say hi."), max_tokens=8)
    assert after.choices[0].message.content


def test_one_answer_at_a_time_one_waits_and_the_next_is_told_to_retry(server, client):
    """The first answer cannot end early (``ignore_eos``, 2,000 tokens): it is still running
    however slow the machine while the line is checked, and it ends when its client hangs up."""
    results: dict[str, object] = {}
    hang_up = threading.Event()

    def endless() -> None:
        stream = client.chat.completions.create(
            model="specem", messages=ask("Tell me a long story."), max_tokens=2000, stream=True, extra_body=ENDLESS
        )
        results["first"] = 0
        for _chunk in stream:
            results["first"] += 1
            if hang_up.is_set():
                break
        stream.close()

    def short() -> None:
        try:
            reply = client.chat.completions.create(model="specem", messages=ask("Say hi."), max_tokens=8)
            results["second"] = reply.choices[0].message.content
        except openai.APIStatusError as error:
            results["second"] = error.status_code

    cancelled = health(server)["cancelled"]
    first = threading.Thread(target=endless)
    first.start()
    poll_until(lambda: health(server)["answering"], 120, "the first answer never started")
    second = threading.Thread(target=short)
    second.start()
    poll_until(lambda: health(server)["waiting"] >= 1, 120, "the second request never waited in line")
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="specem", messages=ask("Me too?"), max_tokens=4)
    assert int(refused.value.response.headers["retry-after"]) >= 1  # the answers ahead, at the recent pace
    assert health(server)["answering"] and "second" not in results  # nothing above raced the first answer
    hang_up.set()
    first.join()
    second.join()
    assert results["first"] >= 1 and isinstance(results["second"], str) and results["second"]
    assert health(server)["cancelled"] == cancelled + 1


def test_streamed_requests_arriving_together_are_counted_in_line(server):
    """Four streams at once: one answers, one waits, two are refused. Each answer is 48 tokens
    whatever the models would say (``ignore_eos``), far longer than four requests take to
    arrive."""

    def stream(results: list[int]) -> None:
        with httpx.stream(
            "POST",
            f"{server['base']}/v1/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={"model": "specem", "messages": ask("Tell me a story."), "stream": True, "max_tokens": 48, **ENDLESS},
            timeout=300,
        ) as response:
            response.read()
            results.append(response.status_code)

    poll_until(lambda: not (health(server)["answering"] or health(server)["waiting"]), 300, "the server never idled")
    results: list[int] = []
    threads = [threading.Thread(target=stream, args=(results,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [200, 200, 429, 429]  # one answering, one waiting (--queue 1)
    poll_until(lambda: not (health(server)["answering"] or health(server)["waiting"]), 30, "the server never idled")


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
        ({"model": "specem", "messages": [{"role": "user", "content": "hi"}], "n": 9}, 400, "n"),
        (
            {"model": "specem", "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"1": 5}},
            400,
            "logit_bias",
        ),
        (
            {
                "model": "specem",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "get weather"}}],
            },
            400,
            "tools",
        ),
        (
            {
                "model": "specem",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
            },
            400,
            "messages[0].content",
        ),
        ({"model": "specem", "messages": []}, 400, "messages"),
        ({"model": "specem", "messages": [{"role": "user", "content": "hi"}], "temperature": -1}, 400, "temperature"),
    ],
)
def test_what_the_ensemble_cannot_do_is_an_openai_error_naming_the_field(server, body, status, param):
    response = httpx.post(
        f"{server['base']}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and error["message"]
    if status == 404:
        assert "'specem'" in error["message"]


def test_bad_json_an_oversized_body_and_keys(server):
    url, auth = f"{server['base']}/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}
    bad = httpx.post(url, content=b"{not json", headers={**auth, "Content-Type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    big = httpx.post(url, json={"model": "specem", "messages": ask("x" * 30000)}, headers=auth)
    assert big.status_code == 413
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/health")):
            refused = httpx.request(method, server["base"] + path, headers=headers, json={})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


def test_the_anthropic_client_gets_a_message_with_the_key_as_x_api_key(server):
    messages = anthropic.Anthropic(base_url=server["base"], api_key=KEY, max_retries=0, timeout=300).messages
    asked = ask("What is the capital of France?")
    message = messages.create(model="specem", max_tokens=16, messages=asked, extra_body={"temperature": 0})  # type: ignore[arg-type]
    assert [block.type for block in message.content] == ["text"] and message.content[0].text.strip()  # type: ignore[union-attr]
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0 and message.id.startswith("msg_")
    assert set(message.model_extra["x_specem"]["wins"]) <= {"qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"}  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server["base"], api_key="wrong", max_retries=0).messages.create(
            model="specem",
            max_tokens=4,
            messages=asked,  # type: ignore[arg-type]
        )


def test_answers_served_are_in_the_history(server, client):
    client.chat.completions.create(model="specem", messages=ask("A question for the history?"), max_tokens=8)
    listed = subprocess.run(
        [sys.executable, "-m", "specem_local", "history", "list", "--origin", "serve", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "SPECEM_DATA_DIR": str(server["data"])},
    )
    titles = [chat["title"] for chat in json.loads(listed.stdout)]
    assert "A question for the history?" in titles


def test_binding_beyond_loopback_needs_a_key():
    refused = subprocess.run(
        [sys.executable, "-m", "specem_local", "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "SPECEM_API_KEY": ""},
    )
    assert refused.returncode == 1 and "would let other machines use these models" in refused.stderr
    assert refused.stderr.count("\n") == 1
