"""Issue 45: on the server's path a request is prepared once. Counted: the format compiled once
(in the format compiler's child), each member's prompt tokenized once, the weight store read
once, for OpenAI's route and Ollama's, streamed or not."""

from __future__ import annotations

import httpx
import pytest

from specem_local.engine import formats, learned, request
from specem_local.server import EnsembleServer, ServerOptions
from specem_local.storage.weights import WeightStore
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.test_routes import BASE
from tests.server.test_structured import ASK, REPLY, SCHEMA, json_schema


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**ASK, "response_format": json_schema(SCHEMA)}),
        ("/v1/chat/completions", {**ASK, "stream": True, "response_format": json_schema(SCHEMA)}),
        ("/api/chat", {"model": "specem", "messages": ASK["messages"], "format": SCHEMA, "stream": False}),
    ],
)
async def test_a_request_is_compiled_tokenized_and_weighed_once(monkeypatch, tmp_path, path, body):
    counts = {"compiled": 0, "weights read": 0}
    tokenized: dict[str, int] = {}
    compiler = formats.compiler()
    real_compile, real_weights, real_tokens = compiler.compile, learned.starting_weights, request.prompt_tokens

    def compile_counted(*args, **kwargs):
        counts["compiled"] += 1
        return real_compile(*args, **kwargs)

    def weights_counted(*args, **kwargs):
        counts["weights read"] += 1
        return real_weights(*args, **kwargs)

    def tokens_counted(member, *args, **kwargs):
        tokenized[member.name] = tokenized.get(member.name, 0) + 1
        return real_tokens(member, *args, **kwargs)

    monkeypatch.setattr(compiler, "compile", compile_counted)
    monkeypatch.setattr("specem_local.engine.runner.starting_weights", weights_counted)
    monkeypatch.setattr("specem_local.engine.ensemble.prompt_tokens", tokens_counted)
    store = WeightStore(tmp_path / "w.db")
    ensemble = fake_ensemble(fake_member("a", REPLY), fake_member("b", REPLY), weight_store=store)
    server = EnsembleServer(ensemble, ServerOptions(queue=2, record=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as http:
        response = await http.post(path, json=body)
    ensemble.close()
    assert response.status_code == 200, response.text
    assert '"eos"' in response.text or '"done_reason":"stop"' in response.text  # the answer came, whole
    assert counts == {"compiled": 1, "weights read": 1} and tokenized == {"a": 1, "b": 1}
