"""``specem serve`` with several places (issue 48) on fake members, through the ``openai``
client: requests sent together run together (the health route counts them), each answer is
the one it gets alone, and a client that hangs up mid-answer stops only its own answer."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

from specem_local.server import EnsembleServer, ServerOptions
from tests.conftest import poll_until
from tests.engine.test_places import WORDS, ensemble
from tests.server.live import health, serving


def ask(base: str, word: str, **extra) -> str:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    reply = client.chat.completions.create(model="specem", messages=[{"role": "user", "content": word}], **extra)
    return reply.choices[0].message.content


def test_four_requests_at_once_run_together_and_each_is_its_answer_alone():
    with ensemble(1) as alone:
        solo = {word: alone.generate(word).text for word in WORDS[:4]}
    together = ensemble(4)
    for model in together.runner.models:  # answers long enough to be seen running together
        model.on_decode = lambda _model, _rows: time.sleep(0.005)
    seen: list[int] = []
    with serving(EnsembleServer(together, ServerOptions(queue=4, record=False))) as base:
        assert health(base)["places"] == 4
        watching = threading.Event()

        def watch() -> None:
            while not watching.wait(0.01):  # a look every 10 ms, not a busy loop beside the answers
                seen.append(health(base)["answering"])

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with ThreadPoolExecutor(4) as pool:
            answered = dict(zip(WORDS[:4], pool.map(lambda w: ask(base, w), WORDS[:4])))
        watching.set()
        watcher.join(10)
        assert not watcher.is_alive()
    together.close()
    assert answered == solo
    assert max(seen) >= 2  # answers ran at the same time


def test_a_client_that_hangs_up_stops_only_its_own_answer():
    together = ensemble(2, max_tokens=400, ignore_eos=True)
    for model in together.runner.models:  # the unread stream still runs when the other arrives
        model.on_decode = lambda _model, _rows: time.sleep(0.005)
    with serving(EnsembleServer(together, ServerOptions(queue=4, record=False))) as base:
        body = {"model": "specem", "messages": [{"role": "user", "content": "apple"}], "stream": True}
        kept: list[str] = []

        def whole() -> None:
            kept.append(ask(base, "river", max_tokens=120))

        other = threading.Thread(target=whole)
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            other.start()
            poll_until(lambda: health(base)["answering"] == 2, 30, "the two answers did not run together")
            # hang up mid-answer: leaving the block closes the connection
        poll_until(lambda: health(base)["cancelled"] == 1, 30, "the hung-up answer was not stopped")
        other.join(60)
        assert not other.is_alive()
        assert kept and kept[0].startswith("You said river") and len(kept[0]) > 100
        assert health(base)["answered"] == 2
    together.close()


def test_a_full_line_is_a_429_that_says_how_many_run_and_wait_with_retry_after():
    from tests.engine.test_scheduler import Gate, gated

    gate = Gate()
    with (
        gated(2, gate) as running,
        gate,
        serving(EnsembleServer(running, ServerOptions(queue=1, record=False))) as base,
    ):
        body = {"model": "specem", "messages": [{"role": "user", "content": "apple"}], "max_tokens": 8}
        codes: list[int] = []
        senders = [
            threading.Thread(
                target=lambda: codes.append(
                    httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60).status_code
                )
            )
            for _ in range(3)
        ]
        for sender in senders:
            sender.start()
        poll_until(lambda: health(base)["answering"] == 2 and health(base)["waiting"] == 1, 30, "the line did not fill")
        refused = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=10)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["message"] == "busy: 2 answers at once and 1 waiting; try again shortly"
        gate.open.set()
        for sender in senders:
            sender.join(60)
            assert not sender.is_alive()
        assert codes == [200, 200, 200]
