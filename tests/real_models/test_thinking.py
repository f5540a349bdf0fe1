"""Think first, then the format (issue 46), with the real demo trio: a script that sends a schema
through the ``openai`` client (parse, streamed), the ``ollama`` client, instructor, the Python
API or ``specem run`` gets valid JSON, and finds the reasoning where its ecosystem looks for it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import instructor
import ollama
import openai
import pydantic
import pytest

from specem_local.engine import Ensemble
from specem_local.events import RoundEvent
from specem_research.load import start_server
from tests.conftest import ROOT, demo_config, stop_process


class Total(pydantic.BaseModel):
    answer: int


QUESTION = "A shop sells 3 boxes of 12 eggs and 2 boxes of 6 eggs. How many eggs is that?"
SCHEMA = Total.model_json_schema()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("thinking-serve")
    process, base = start_server(env={"SPECEM_DATA_DIR": str(data)})
    yield base
    stop_process(process, 30)


def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=600)


def test_the_python_api_thinks_then_parses():
    with Ensemble.from_config(demo_config(greedy=True)) as ensemble:
        events = list(ensemble.stream(QUESTION, schema=Total, think="low", max_tokens=256))
    final = events[-1]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert isinstance(final.parsed, Total) and final.reasoning and final.switched in ("eos", "budget")
    assert {e.phase for e in rounds} == {"reasoning", "answer"} and 0 < final.reasoning_tokens < final.tokens
    assert final.text == json.dumps(final.parsed.model_dump()) or json.loads(final.text) == final.parsed.model_dump()


def test_openai_parse_gets_the_object_and_the_reasoning_content(server):
    completion = client(server).chat.completions.parse(
        model="specem",
        messages=[{"role": "user", "content": QUESTION}],
        response_format=Total,
        temperature=0,
        max_tokens=256,
        reasoning_effort="low",
    )
    message = completion.choices[0].message
    assert isinstance(message.parsed, Total) and completion.choices[0].finish_reason == "stop"
    assert message.model_extra.get("reasoning_content")  # read where llama.cpp's clients read it
    assert completion.usage.completion_tokens_details.reasoning_tokens > 0


def test_openai_streams_the_reasoning_then_the_content(server):
    response_format = {"type": "json_schema", "json_schema": {"name": "total", "schema": SCHEMA}}
    stream = client(server).chat.completions.create(
        model="specem",
        messages=[{"role": "user", "content": QUESTION}],
        response_format=response_format,
        temperature=0,
        max_tokens=256,
        stream=True,
    )
    kinds, content = [], ""
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if (delta.model_extra or {}).get("reasoning_content"):
            kinds.append("reasoning")
        if delta.content:
            kinds.append("content")
            content += delta.content
    assert kinds and kinds == sorted(kinds, key=["reasoning", "content"].index) and "reasoning" in kinds
    Total.model_validate_json(content)


def test_the_ollama_client_gets_thinking_and_valid_content(server):
    response = ollama.Client(host=server).chat(
        model="specem",
        messages=[{"role": "user", "content": QUESTION}],
        format=SCHEMA,
        think=True,
        options={"temperature": 0, "num_predict": 256},
    )
    assert response.message.thinking
    Total.model_validate_json(response.message.content)


def test_instructor_gets_a_validated_object_with_the_default_thinking(server):
    patched = instructor.from_openai(client(server), mode=instructor.Mode.JSON_SCHEMA)
    total = patched.chat.completions.create(
        model="specem", response_model=Total, messages=[{"role": "user", "content": QUESTION}], max_retries=0
    )
    assert isinstance(total, Total)


def test_specem_run_prints_the_json_alone_and_the_thinking_on_stderr(tmp_path):
    schema = tmp_path / "total.json"
    schema.write_text(json.dumps(SCHEMA))
    command = [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy", "--max-tokens", "256"]
    asked = [*command, "--schema", str(schema), "--think=low", QUESTION]
    shown = subprocess.run(asked, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert shown.returncode == 0, shown.stderr
    Total.model_validate_json(shown.stdout)  # stdout: the JSON alone
    assert len(shown.stderr.strip()) > 20  # the thinking went to stderr
    hidden = subprocess.run(
        [*command, "--schema", str(schema), "--think=low", "--hide-thinking", QUESTION],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert hidden.returncode == 0 and hidden.stdout == shown.stdout
    assert re.fullmatch(r"\[confidence [01]\.\d+\]", hidden.stderr.strip())  # no thinking: how sure, alone
    bad = subprocess.run([*command, "--schema", str(schema), "--think=lots", QUESTION], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)  # fmt: skip
    assert bad.returncode == 2 and "think must be" in bad.stderr and bad.stderr.count("\n") == 1
