"""Every member lost mid-answer (issue 40's promise, issue 44's test): the server answers 503,
says why, records the answer as failed, and the next request is answered once the members are
back."""

from __future__ import annotations

import httpx

from specem_local.server import EnsembleServer, ServerOptions
from specem_local.storage.history import History
from tests.engine.conftest import fake_ensemble, fake_member
from tests.engine.test_lost_members import REASON, LoseAt
from tests.server.test_routes import BASE

ASK = {"model": "specem", "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 60}


async def test_no_member_left_is_a_503_recorded_as_failed_and_the_next_request_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    story = "Once upon a time there was a river."
    members = [fake_member("a", story, on_decode=LoseAt(4)), fake_member("b", story, on_decode=LoseAt(4))]
    ensemble = fake_ensemble(*members, model_exit=False, segment_tokens=4)
    server = EnsembleServer(ensemble, ServerOptions(queue=2, record=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url=BASE) as http:
        response = await http.post("/v1/chat/completions", json=ASK)
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["type"] == "server_error" and "every member that could draft was lost" in error["message"]
        assert REASON in error["message"]
        [chat] = History().chats()
        answer = History().load(chat.id).turns[-1]
        assert answer.error and "every member that could draft was lost" in answer.error and answer.final is None
        again = await http.post("/v1/chat/completions", json=ASK)  # the fakes come back (restart)
        assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == story
    ensemble.close()
