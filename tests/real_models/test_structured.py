"""Structured output with the real demo models (issue 37): the trio's three tokenizers write
one valid JSON answer together; a script gets a validated object through the Python API, the
CLI, and a real ``specem serve`` through the official ``openai`` and ``ollama`` clients and
instructor."""

from __future__ import annotations

import json
import subprocess
import sys

import instructor
import jsonschema
import ollama
import openai
import pydantic
import pytest

from specem_local.engine import Ensemble
from specem_local.engine.formats import FormatMatcher, output_format_from
from specem_local.events import RoundEvent
from specem_research.load import start_server
from tests.conftest import ROOT, demo_config, stop_process


class City(pydantic.BaseModel):
    name: str
    country: str
    population: int


SCHEMA = City.model_json_schema()
QUESTION = "Give the name, country and population of the capital of France."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("structured-serve")
    process, base = start_server(env={"SPECEM_DATA_DIR": str(data)})
    yield base
    stop_process(process, 30)


def test_three_tokenizers_draft_one_valid_json_answer_together():
    """Everyone drafts and votes (no calibration, no model exit): every candidate of every
    member, each in its own tokens, is a valid continuation, and the answer validates."""
    config = demo_config(max_tokens=120, greedy=True, model_exit=False)
    with Ensemble.from_config(config) as ensemble:
        events = list(ensemble.stream(QUESTION, schema=City, think=False))  # every round under the format
    final = events[-1]
    assert final.finish_reason == "eos" and isinstance(final.parsed, City), final.text
    jsonschema.validate(json.loads(final.text), SCHEMA)
    committed = FormatMatcher(output_format_from(City))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    for event in rounds:
        assert all(committed.accepts(c.text, c.ended) for c in event.candidates), event
        committed.commit(event.text)
    drafted = {c.model for e in rounds for c in e.candidates if c.text}
    assert drafted == {"qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"}
    assert any(e.decision == "forced" for e in rounds)


def test_specem_run_prints_the_json_alone(tmp_path):
    schema = tmp_path / "city.json"
    schema.write_text(json.dumps(SCHEMA))
    command = [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy", "--max-tokens", "120"]
    result = subprocess.run(
        [*command, "--schema", str(schema), QUESTION], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert result.returncode == 0, result.stderr
    City.model_validate_json(result.stdout)  # stdout holds the JSON and nothing else
    cut = subprocess.run(
        [*command[:-1], "3", "--schema", str(schema), QUESTION], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert cut.returncode == 1 and cut.stdout == ""
    assert cut.stderr.strip().endswith("was cut at max_tokens (3) before it was whole; raise --max-tokens")
    bad = subprocess.run([*command, "--regex", "a(b", QUESTION], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "regex: cannot be enforced" in bad.stderr


def test_the_openai_clients_parse_gets_a_validated_object(server):
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=600)
    completion = client.chat.completions.parse(
        model="specem",
        messages=[{"role": "user", "content": QUESTION}],
        response_format=City,
        temperature=0,
        max_tokens=120,
    )
    city = completion.choices[0].message.parsed
    assert isinstance(city, City) and completion.choices[0].finish_reason == "stop"
    with pytest.raises(openai.LengthFinishReasonError):  # cut by max_tokens: parse() says so
        client.chat.completions.parse(
            model="specem", messages=[{"role": "user", "content": QUESTION}], response_format=City, max_tokens=4
        )


def test_the_ollama_client_with_a_schema_gets_a_validated_object(server):
    client = ollama.Client(host=server)
    response = client.chat(
        model="specem",
        messages=[{"role": "user", "content": QUESTION}],
        format=SCHEMA,
        options={"temperature": 0, "num_predict": 120},
    )
    City.model_validate_json(response.message.content)
    plain = client.chat(model="specem", messages=[{"role": "user", "content": "Say hi."}], options={"num_predict": 8})
    assert plain.message.content  # no format, and the client's "tools": [] is no tools


def test_instructor_in_json_schema_mode_gets_a_validated_object(server):
    client = instructor.from_openai(
        openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=600),
        mode=instructor.Mode.JSON_SCHEMA,
    )
    city = client.chat.completions.create(
        model="specem",
        response_model=City,
        messages=[{"role": "user", "content": QUESTION}],
        max_retries=0,
        temperature=0,
        max_tokens=120,
    )
    assert isinstance(city, City)


def test_a_slice_of_the_vendored_schemas_is_refused_up_front_or_answered_validly(tmp_path):
    """Two schemas of each vendored set (issue 37's validity run, docs/structured-output.md)."""
    from specem_research import schema_validity

    with Ensemble.from_config(demo_config(max_tokens=200, greedy=True)) as ensemble:
        schema_validity.run(ensemble, schema_validity.schemas(2), tmp_path, {"max_tokens": 200})
    outcomes = [json.loads(line)["outcome"] for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert len(outcomes) == 6 and all(o == "valid" or o.startswith(("refused", "cut")) for o in outcomes), outcomes
    assert outcomes.count("valid") >= 4


def test_the_example_in_docs_structured_output_runs(capsys):
    import re

    text = (ROOT / "docs" / "structured-output.md").read_text("utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    exec(compile(example, "docs/structured-output.md", "exec"), {})
    assert capsys.readouterr().out.startswith("name=")  # a City, printed by its pydantic repr
