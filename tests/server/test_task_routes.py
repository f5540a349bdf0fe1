"""A request names its task (issue 56): ``task`` on the OpenAI, Responses and Anthropic routes
(``extra_body`` in their clients), ``options.task`` on Ollama's, so the task's kept weights choose
among the options; a bad name is a 400 naming the field as sent, and the next request is answered."""

from __future__ import annotations

import math

import anthropic
import httpx
import ollama
import openai
import pytest

from specem_local.engine import options as opt
from specem_local.engine.task_weights import TaskWeights, keep_task_weights
from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import serving

PETS = {"type": "json_schema", "json_schema": {"name": "pet", "schema": {"enum": ["cat", "dog"]}}}
ASKED = [{"role": "user", "content": "Which pet?"}]


@pytest.fixture
def base(tmp_path, monkeypatch):
    """``a`` says cat, ``b`` dog; the task ``shelter`` trusts ``b`` nine times ``a``, ``cattery`` ``a``."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    ensemble = fake_ensemble(fake_member("a", '"cat"'), fake_member("b", '"dog"'))
    for task, toward in (("shelter", "b"), ("cattery", "a")):
        weights = {opt.source(m, way): 9.0 if m == toward else 1.0 for m in ("a", "b") for way in opt.WAYS}
        keep_task_weights(ensemble.members, TaskWeights(task, weights, {}, 40, "forty labelled items"))
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        yield url
    ensemble.close()


def test_the_openai_and_responses_routes_take_the_task_from_the_request(base):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    for task, answer in (("shelter", '"dog"'), ("cattery", '"cat"')):
        reply = client.chat.completions.create(model="specem", messages=ASKED, response_format=PETS,
                                               extra_body={"task": task})  # fmt: skip
        assert reply.choices[0].message.content == answer
        assert any(f"task {task!r}" in note for note in reply.model_extra["x_specem"]["notes"])
        text = {"format": {"type": "json_schema", "name": "pet", "schema": {"enum": ["cat", "dog"]}}}
        response = client.responses.create(model="specem", input="Which pet?", text=text, extra_body={"task": task})
        assert response.output_text == answer
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="specem", messages=ASKED, response_format=PETS,
                                       extra_body={"task": "no such task!"})  # fmt: skip
    assert refused.value.body["param"] == "task" and "task" in refused.value.body["message"]
    assert client.chat.completions.create(model="specem", messages=ASKED, response_format=PETS).choices


def test_the_anthropic_route_takes_the_task_from_the_request(base):
    client = anthropic.Anthropic(base_url=base, api_key="none", max_retries=0, timeout=60)
    schema = {"type": "json_schema", "schema": {"enum": ["cat", "dog"]}}
    for task, answer in (("shelter", '"dog"'), ("cattery", '"cat"')):
        message = client.messages.create(model="specem", max_tokens=20, messages=ASKED,
                                         extra_body={"task": task, "output_config": {"format": schema}})  # fmt: skip
        assert message.content[0].text == answer


def test_ollama_takes_the_task_in_its_options_and_names_a_bad_one_as_sent(base):
    client = ollama.Client(host=base, timeout=60)
    for task, answer in (("shelter", '"dog"'), ("cattery", '"cat"')):
        reply = client.chat(model="specem", messages=ASKED, format={"enum": ["cat", "dog"]}, options={"task": task})
        assert reply.message.content == answer
    body = {"model": "specem", "messages": ASKED, "stream": False, "format": {"enum": ["cat", "dog"]},
            "options": {"task": 7}}  # fmt: skip
    refused = httpx.post(f"{base}/api/chat", json=body, timeout=60)
    assert refused.status_code == 400 and "options.task" in refused.json()["error"]
    body["options"] = {"task": "shelter"}
    assert httpx.post(f"{base}/api/chat", json=body, timeout=60).json()["message"]["content"] == '"dog"'
    for route, asked in (("chat", {"messages": ASKED}), ("generate", {"prompt": "Which pet?"})):
        for name, value in (("task", "cattery"), ("choice_points", False)):  # the OpenAI body's place: not here
            moved = {"model": "specem", **asked, "stream": False, "format": {"enum": ["cat", "dog"]}, name: value}
            refused = httpx.post(f"{base}/api/{route}", json=moved, timeout=60)
            assert refused.status_code == 400 and refused.json()["error"] == (
                f'{name} goes in "options" on Ollama\'s routes: "options": {{"{name}": ...}}'
            )
    assert httpx.post(f"{base}/api/chat", json=body, timeout=60).json()["message"]["content"] == '"dog"'


def test_a_damaged_weights_file_is_the_servers_fault_logged_and_mended_by_deleting_it(base, caplog):
    from specem_local.engine.task_weights import user_weights_path

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    kept = user_weights_path().read_bytes()
    user_weights_path().write_text("[{broken")
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="specem", messages=ASKED, response_format=PETS)
    said = failed.value.body["message"]
    assert said.startswith(f"the task weights in {user_weights_path()} are damaged (") and "delete it" in said
    assert failed.value.status_code == 500 and any(said in record.getMessage() for record in caplog.records)
    assert client.chat.completions.create(model="specem", messages=ASKED).choices  # no options: answered
    user_weights_path().write_bytes(kept)
    reply = client.chat.completions.create(
        model="specem", messages=ASKED, response_format=PETS, extra_body={"task": "shelter"}
    )
    assert reply.choices[0].message.content == '"dog"'


def test_logprobs_of_an_answer_among_options_give_each_options_probability_on_both_clients(base):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    reply = client.chat.completions.create(model="specem", messages=ASKED, response_format=PETS, logprobs=True,
                                           top_logprobs=2, extra_body={"task": "shelter"})  # fmt: skip
    [entry] = reply.choices[0].logprobs.content
    assert entry.token == '"dog"' and [top.token for top in entry.top_logprobs] == ['"dog"', '"cat"']
    assert math.exp(entry.logprob) == pytest.approx(reply.model_extra["x_specem"]["confidence"])
    assert sum(math.exp(top.logprob) for top in entry.top_logprobs) == pytest.approx(1.0)
    streamed = client.chat.completions.create(model="specem", messages=ASKED, response_format=PETS, logprobs=True,
                                              top_logprobs=2, extra_body={"task": "shelter"}, stream=True)  # fmt: skip
    tokens = [
        t
        for chunk in streamed
        if chunk.choices and chunk.choices[0].logprobs
        for t in chunk.choices[0].logprobs.content
    ]
    assert [(t.token, t.logprob) for t in tokens] == [(entry.token, entry.logprob)]
    ollama_client = ollama.Client(host=base, timeout=60)
    answer = ollama_client.chat(model="specem", messages=ASKED, format={"enum": ["cat", "dog"]},
                                options={"task": "cattery"}, logprobs=True, top_logprobs=2)  # fmt: skip
    assert answer.message.content == '"cat"' and [t.token for t in answer.logprobs] == ['"cat"']
