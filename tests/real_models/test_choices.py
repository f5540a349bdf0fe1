"""Answers among options on the demo trio through every front end (issue 56): the Python API,
the ``openai`` client (a JSON Schema enum), the ``ollama`` client (``format``), ``specem run
--choices`` and a ``--batch`` file give the same option; each is scored by every member both
ways, never drafted, and its scores are the ones the eval recorded for the same item."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ollama
import openai
import pytest

from specem_local.events import RoundEvent
from specem_research.load import start_server
from tests.conftest import ROOT, stop_process

pytestmark = pytest.mark.models

ITEMS = [json.loads(line) for line in (ROOT / "research/data/choices/sst2_train300.jsonl").read_text().splitlines()[:2]]
RECORDED = {
    record["id"]: record
    for line in (ROOT / "research/results/issue56-train/items.jsonl").read_text().splitlines()
    if (record := json.loads(line))["id"] in {item["id"] for item in ITEMS}
}


def enum(item):
    return {"enum": item["choices"]}


@pytest.fixture(scope="module")
def answers(trio):
    """Each item through the Python API: its round (the options and their scores), its final.
    The members start empty, as the eval's did: a prompt split into batches differently (what the
    cache kept of earlier tests' answers) moves llama.cpp's numbers by up to 0.37."""
    for member in trio.members:
        member.reset()
    found = {}
    for item in ITEMS:
        events = list(trio.stream(item["question"], schema=enum(item)))
        found[item["id"]] = (next(e for e in events if isinstance(e, RoundEvent)), events[-1])
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("choices-serve")
    process, base = start_server("--parallel", "1", env={"SPECEM_DATA_DIR": str(data)})
    yield base
    stop_process(process, 30)


def test_the_api_scores_every_option_by_every_member_both_ways_as_the_eval_recorded(answers):
    for item in ITEMS:
        chosen, final = answers[item["id"]]
        assert chosen.decision == "options" and final.rounds == 1 and final.parsed in item["choices"]
        assert 0.5 <= final.confidence <= 1 and final.confidence == pytest.approx(
            max(c.combined for c in chosen.candidates)
        )
        sources = set(chosen.candidates[0].scores)
        assert sources == {
            f"{way}:{m}" for way in ("asked", "scored") for m in ("qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m")
        }
        recorded = RECORDED[item["id"]]["scores"]
        for source in sources:  # the same passes from an empty cache: the same numbers (0.0 apart here; 0.05 for a CPU
            # whose kernels round differently)
            assert [c.scores[source] for c in chosen.candidates] == pytest.approx(recorded[source], abs=0.05)


def test_the_openai_client_with_an_enum_schema_gets_the_same_option(server, answers):
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=120)
    for item in ITEMS:
        reply = client.chat.completions.create(
            model="specem",
            messages=[{"role": "user", "content": item["question"]}],
            response_format={"type": "json_schema", "json_schema": {"name": "label", "schema": enum(item)}},
            temperature=0,
        )
        assert json.loads(reply.choices[0].message.content) == answers[item["id"]][1].parsed
        assert reply.model_extra["x_specem"]["confidence"] == pytest.approx(answers[item["id"]][1].confidence, abs=0.02)


def test_the_ollama_client_with_an_enum_format_gets_the_same_option(server, answers):
    client = ollama.Client(host=server, timeout=120)
    for item in ITEMS:
        reply = client.chat(model="specem", messages=[{"role": "user", "content": item["question"]}],
                            format=enum(item), options={"temperature": 0})  # fmt: skip
        assert json.loads(reply.message.content) == answers[item["id"]][1].parsed


def test_run_choices_and_a_batch_file_give_the_same_options(tmp_path, answers):
    env = {"SPECEM_DATA_DIR": str(tmp_path / "data")}
    for item in ITEMS:
        done = subprocess.run(
            [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy",
             "--choices", ",".join(item["choices"]), item["question"]],
            capture_output=True, text=True, timeout=300, env={**os.environ, **env},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{answers[item['id']][1].parsed}\n" and "[confidence 0." in done.stderr
    lines = tmp_path / "in.jsonl"
    lines.write_text(
        "".join(json.dumps({"id": i["id"], "prompt": i["question"], "schema": enum(i)}) + "\n" for i in ITEMS)
    )
    done = subprocess.run(
        [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy", "--batch", str(lines),
         "-o", str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, timeout=600, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    for item in ITEMS:
        assert records[item["id"]]["parsed"] == answers[item["id"]][1].parsed


def test_an_enum_field_inside_an_object_is_scored_in_context_by_every_member_and_the_rest_drafted(trio):
    """A choice point (docs/choices.md): the label among the object's fields is not drafted."""
    item = ITEMS[0]
    schema = {
        "type": "object",
        "properties": {"label": enum(item), "why": {"type": "string", "maxLength": 30}},
        "required": ["label", "why"],
        "additionalProperties": False,
    }
    events = list(trio.stream(item["question"], schema=schema, max_tokens=60, choice_points=True))
    rounds, final = [e for e in events if isinstance(e, RoundEvent)], events[-1]
    [chosen] = [r for r in rounds if r.decision == "options"]
    assert set(chosen.candidates[0].scores) == {
        f"asked:{m}" for m in ("qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m")
    }
    best = max(chosen.candidates, key=lambda c: c.combined)
    assert chosen.text == best.text and sum(c.combined for c in chosen.candidates) == pytest.approx(1.0)
    assert any(r.decision not in ("options", "forced") for r in rounds)  # the reason was drafted
    parsed = final.parsed
    assert final.finish_reason == "eos" and parsed["label"] in item["choices"] and isinstance(parsed["why"], str)
    assert f'"label": "{parsed["label"]}"' in final.text and final.confidence is not None


def test_a_batch_learns_the_tasks_weights_from_its_labelled_lines(tmp_path):
    """Two labelled SST-2 lines, then one without: each labelled answer is graded and its scores
    kept in OUT; the task's weights are fitted on the two and kept; the third line is answered."""
    env = {"SPECEM_DATA_DIR": str(tmp_path / "data")}
    labelled = [{"id": i["id"], "prompt": i["question"], "schema": enum(i),
                 "label": i["choices"]["ABCDEFGHIJ".index(i["answer"])]} for i in ITEMS]  # fmt: skip
    later = {"id": "later", "prompt": ITEMS[0]["question"], "schema": enum(ITEMS[0])}
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps(line) + "\n" for line in (*labelled, later)))
    done = subprocess.run(
        [sys.executable, "-m", "specem_local", "run", "--no-log", "--greedy", "--batch", str(lines),
         "-o", str(tmp_path / "out.jsonl"), "--task", "reviews", "--parallel", "1"],
        capture_output=True, text=True, timeout=600, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    right = 0
    for line in labelled:
        record = records[line["id"]]
        assert record["label"] == line["label"] and record["right"] == (record["parsed"] == line["label"])
        assert set(record["option_scores"]) == set(RECORDED[line["id"]]["scores"])  # the six sources
        right += record["right"]
    assert records["later"]["parsed"] in ITEMS[0]["choices"] and "label" not in records["later"]
    [kept] = json.loads((tmp_path / "data" / "option_weights.json").read_text())
    assert kept["task"] == "reviews" and kept["items"] == 2 and kept["fitted_on"].startswith("2 labelled lines of in")
    said = f"task 'reviews': {right} of 2 labelled answers right; its weights fitted on 2 labelled answers"
    assert said in done.stderr
