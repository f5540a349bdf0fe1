"""How sure an answer is, on the demo trio through real clients (issue 55): the ``openai`` client's
``logprobs`` / ``top_logprobs`` whole and streamed, the ``ollama`` client's ``logprobs``,
``x_specem.confidence`` in [0, 1] with the shipped calibrator's name, ``abstain_below`` marking an
answer unsure (its text kept), escalation to a reserve member, ``--batch --min-confidence``, and
a confidence kept in the history and read back."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import ollama
import openai
import pytest

from specem_local.engine import Ensemble
from specem_local.models import load_config
from specem_local.storage.history import History
from specem_research.load import start_server
from tests.conftest import ROOT, stop_process

pytestmark = pytest.mark.models

QUESTION = "What is 12 plus 30? Answer with the number."
FITTED = "the demo trio's 520 GSM8K train answers"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("confidence-serve")
    process, base = start_server("--parallel", "1", env={"SPECEM_DATA_DIR": str(data)})
    yield base, data
    stop_process(process, 30)


def test_openai_logprobs_whole_and_streamed_are_the_authors_and_the_confidence_is_the_trios(served):
    base, data = served
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)
    asked = {"model": "specem", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0, "max_tokens": 24}
    whole = client.chat.completions.create(**asked, logprobs=True, top_logprobs=2)
    tokens = whole.choices[0].logprobs.content
    assert "".join(t.token for t in tokens) == whole.choices[0].message.content
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in tokens)
    assert all(t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in tokens)  # the best alternative first
    facts = whole.model_extra["x_specem"]
    assert 0 <= facts["confidence"] <= 1 and FITTED in facts["confidence_from"]
    streamed = list(client.chat.completions.create(**asked, logprobs=True, top_logprobs=2, stream=True))
    pieces = [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [(t.token, round(t.logprob, 4)) for t in pieces] == [(t.token, round(t.logprob, 4)) for t in tokens]
    history = History(data / "specem.db")  # the server keeps every answer, its confidence too
    kept = [turn.final for chat in history.chats() for turn in history.load(chat.id).turns if turn.final is not None]
    assert any(final.confidence == pytest.approx(facts["confidence"], abs=5.1e-5) for final in kept)  # said to 4 places
    assert history.unsure(1.01) and all(0 <= found.confidence <= 1 for found in history.unsure(1.01))


def test_ollama_logprobs_and_the_confidence_on_the_last_line(served):
    base, _ = served
    client = ollama.Client(host=base, timeout=120)
    reply = client.chat(model="specem", messages=[{"role": "user", "content": QUESTION}], logprobs=True,
                        options={"temperature": 0, "num_predict": 24})  # fmt: skip
    assert reply.logprobs and all(entry.logprob <= 0 for entry in reply.logprobs)
    assert "".join(entry.token for entry in reply.logprobs) == reply.message.content


def test_abstain_below_marks_the_answer_unsure_and_keeps_its_text(trio):
    sure = trio.generate(QUESTION, greedy=True, max_tokens=24)
    unsure = trio.generate(QUESTION, greedy=True, max_tokens=24, abstain_below=0.999999)
    assert unsure.text == sure.text and unsure.unsure and not sure.unsure
    assert unsure.confidence == pytest.approx(sure.confidence) and FITTED in sure.confidence_from


def test_an_unsure_answer_is_escalated_to_the_reserve_member(tmp_path):
    config = load_config(ROOT / "models.toml")
    text = (ROOT / "models.toml").read_text()
    reserve = text + '\n[[models]]\nname = "reserve"\ndemo = "qwen2.5-coder-1.5b"\nrole = "reserve"\n'
    (tmp_path / "models.toml").write_text(reserve)
    with Ensemble.from_config(load_config(tmp_path / "models.toml")) as ensemble:
        assert [m.name for m in ensemble.reserve] == ["reserve"] and len(ensemble.members) == len(config.models)
        final = ensemble.generate(QUESTION, greedy=True, max_tokens=24, escalate_below=0.999999)
        kept = ensemble.generate(QUESTION, greedy=True, max_tokens=24, escalate_below=0.0)
    assert final.escalated == "reserve" and final.ensemble_text == kept.text and final.text
    assert not kept.escalated


def test_batch_min_confidence_writes_the_less_sure_to_the_review_file(tmp_path):
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"id": str(i), "prompt": f"What is {i} plus {i}?"}) + "\n" for i in (2, 7)))
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "SPECEM_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy", "--max-tokens", "24", "--batch",
         str(lines), "-o", str(out), "--min-confidence", "1"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    review = [json.loads(line) for line in (tmp_path / "out.review.jsonl").read_text().splitlines()]
    assert all(0 <= r["confidence"] <= 1 and math.isfinite(r["confidence"]) for r in records)
    assert sorted(r["id"] for r in review) == ["2", "7"]  # every answer is less sure than 1
