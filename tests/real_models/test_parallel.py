"""Several answers at once with the demo trio (issue 48): four requests sent together through the
``openai`` client to a real ``specem serve --parallel 4`` run together and each gets the answer it
gets alone (greedy); a request cancelled among running ones leaves the others whole; ``specem run
--batch`` with a bad line, stopped by Ctrl-C and run again, ends with every good line answered.

"The answer it gets alone" up to llama.cpp's arithmetic: a batch of another size sums in another
order, so greedy answers can part after a near tie, a few words in (docs/api.md, numeric
differences). Each answer must be its own question's, beginning as it does alone."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from specem_research.faults import AT_A_TERMINAL
from specem_research.load import start_server
from tests.conftest import ROOT, poll_until, stop_process

QUESTIONS = [
    "What is the capital of France? Answer in one sentence.",
    "Name three primary colours.",
    "What is 12 times 11? Show the sum.",
    "Write one sentence about the sea.",
]
TOPICS = ["Paris", "red", "12", "sea"]  # what each question's answer holds, alone and together


def same_answer(together: str, alone: str, topic: str) -> bool:
    """The same question's answer: its topic, and the same first words as alone."""
    return topic in together and together.split()[:3] == alone.split()[:3]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("parallel-serve")
    process, base = start_server("--parallel", "4", "--no-log", env={"SPECEM_DATA_DIR": str(data)})
    yield base
    stop_process(process, 30)


def ask(base: str, question: str, max_tokens: int = 48) -> str:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)
    reply = client.chat.completions.create(
        model="specem", messages=[{"role": "user", "content": question}], temperature=0, max_tokens=max_tokens
    )
    return reply.choices[0].message.content or ""


def test_four_requests_together_run_together_and_each_is_its_answer_alone(server):
    alone = [ask(server, question) for question in QUESTIONS]
    most = []

    def watch(stop: threading.Event) -> None:
        while not stop.is_set():
            most.append(httpx.get(f"{server}/health", timeout=10).json()["answering"])
            time.sleep(0.05)

    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop,), daemon=True)
    watcher.start()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda q: ask(server, q), QUESTIONS))
    stop.set()
    watcher.join(10)
    assert not watcher.is_alive()
    assert max(most) >= 3  # they ran at the same time
    assert all(topic in answer for topic, answer in zip(TOPICS, alone)), alone
    assert all(map(same_answer, together, alone, TOPICS)), (together, alone)


def test_a_request_cancelled_among_running_ones_leaves_the_others_whole(server):
    alone = ask(server, QUESTIONS[1], 64)
    kept: list[str] = []
    other = threading.Thread(target=lambda: kept.append(ask(server, QUESTIONS[1], 64)))
    body = {"model": "specem", "messages": [{"role": "user", "content": "Tell me a long story."}], "stream": True,
            "max_tokens": 400, "temperature": 0}  # fmt: skip
    before = httpx.get(f"{server}/health", timeout=10).json()["cancelled"]
    with httpx.stream("POST", f"{server}/v1/chat/completions", json=body, timeout=600) as response:
        assert response.status_code == 200
        other.start()
        poll_until(lambda: httpx.get(f"{server}/health", timeout=10).json()["answering"] == 2, 120, "not together")
    poll_until(lambda: httpx.get(f"{server}/health", timeout=10).json()["cancelled"] == before + 1, 60, "not cancelled")
    other.join(600)
    assert not other.is_alive()
    assert len(kept) == 1 and same_answer(kept[0], alone, TOPICS[1]), (kept, alone)


def test_a_batch_with_a_bad_line_stopped_and_run_again_answers_every_good_line(tmp_path):
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps({"id": f"q{i}", "prompt": q}) for i, q in enumerate(QUESTIONS)]
    source.write_text("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n")
    command = [sys.executable, "-c", AT_A_TERMINAL, "run", "--batch", str(source), "-o", str(target), "--greedy",
               "--max-tokens", "32", "--parallel", "2", "--no-log"]  # fmt: skip
    first = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    poll_until(lambda: target.exists() and len(target.read_text().splitlines()) >= 2, 600, "no result came")
    first.send_signal(signal.SIGINT)
    _, said = first.communicate(timeout=120)
    assert first.returncode == 130, said
    kept = target.read_text()
    assert kept.endswith("\n") and all(json.loads(line) for line in kept.splitlines())  # whole lines only
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    bad = "line 3 (id line 3): not JSON"
    assert bad in said and bad in second.stderr  # its error record is run again
    assert second.returncode == 1 and "; 1 failed" in second.stderr
    results = {r["id"]: r for r in map(json.loads, target.read_text().splitlines())}
    assert sorted(results) == ["line 3", "q0", "q1", "q2", "q3"]
    assert all(results[f"q{i}"]["text"] for i in range(4)) and "error" in results["line 3"]
