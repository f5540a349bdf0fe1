"""A kept response read back, its input items listed page by page, and deleted, through the
``openai`` client's ``responses.retrieve``, ``responses.input_items.list`` and
``responses.delete`` against a live server over fake models, kept in memory and in the history
database; each refusal a clear error, and the next request answered."""

from __future__ import annotations

import openai
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import serving

ANSWER = "Paris is the capital."


def client_of(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture(params=["memory", "history"])
def base(request, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=4096), fake_member("b", ANSWER, n_ctx=4096), max_tokens=60)
    served = EnsembleServer(ensemble, ServerOptions(queue=2, record=request.param == "history"))
    with serving(served) as url:
        yield url
    ensemble.close()
    assert (tmp_path / "specem.db").exists() == (request.param == "history")  # kept where the fixture says


def test_a_response_is_read_back_as_it_was_given(base):
    client = client_of(base)
    made = client.responses.create(model="specem", input="Capital of France?", instructions="Be brief.")
    read = client.responses.retrieve(made.id)
    assert read.model_dump() == made.model_dump()
    assert read.output_text == ANSWER and read.status == "completed"
    streamed = list(client.responses.create(model="specem", input="And of Spain?", stream=True))
    finished = streamed[-1].response  # type: ignore[union-attr]
    assert client.responses.retrieve(finished.id).model_dump() == finished.model_dump()


def test_input_items_are_listed_newest_first_with_ids_and_paged(base):
    client = client_of(base)
    first = client.responses.create(model="specem", input="Capital of France?")
    asked = [{"role": "user", "content": "And of Spain?"}, {"role": "user", "content": "And of Italy?"}]
    again = client.responses.create(model="specem", input=asked, previous_response_id=first.id)  # type: ignore[arg-type]
    page = client.responses.input_items.list(again.id)
    texts = [item.content[0].text for item in page.data]  # type: ignore[union-attr]
    assert texts == ["And of Italy?", "And of Spain?", ANSWER, "Capital of France?"]  # what it read, newest first
    assert [item.type for item in page.data] == ["message"] * 4
    assert page.data[3].content[0].type == "input_text" and page.data[2].content[0].type == "output_text"  # type: ignore[union-attr]
    assert page.data[2].id == first.output[0].id and all(item.id for item in page.data)
    assert not page.has_more and page.first_id == page.data[0].id and page.last_id == page.data[3].id
    oldest = client.responses.input_items.list(again.id, order="asc", limit=3)
    assert [item.id for item in oldest.data] == [item.id for item in reversed(page.data)][:3] and oldest.has_more
    rest = client.responses.input_items.list(again.id, order="asc", limit=3, after=oldest.data[-1].id)
    assert [item.id for item in rest.data] == [page.data[0].id] and not rest.has_more
    paged = list(client.responses.input_items.list(again.id, limit=1))  # the client walks every page
    assert [item.id for item in paged] == [item.id for item in page.data]
    assert client.responses.input_items.list(again.id).data[0].id == page.data[0].id  # ids stay as given


def test_a_deleted_response_is_gone_everywhere_and_the_next_is_answered(base):
    client = client_of(base)
    made = client.responses.create(model="specem", input="Capital of France?")
    deleted = client.responses.delete(made.id)
    assert deleted is None  # the client reads no body; the server's own is checked below
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(made.id)
    assert gone.value.body["message"] == f"Response with id {made.id!r} not found."  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(made.id)
    with pytest.raises(openai.BadRequestError) as continued:
        client.responses.create(model="specem", input="Again?", previous_response_id=made.id)
    assert continued.value.code == "previous_response_not_found"
    other = client.responses.create(model="specem", input="Capital of France?")
    raw = client.responses.with_raw_response.delete(other.id)
    assert raw.http_response.json() == {"id": other.id, "object": "response", "deleted": True}


def test_what_is_not_kept_or_not_asked_right_is_refused_in_a_line(base):
    client = client_of(base)
    unkept = client.responses.create(model="specem", input="Capital of France?", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)
    for strange in ("x" * 300, "resp_ü"):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(strange)
    made = client.responses.create(model="specem", input="Capital of France?")
    for query, param in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order"),
                         ({"after": "msg_none"}, "after")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.input_items.list(made.id, **query)  # type: ignore[arg-type]
        assert refused.value.body["param"] == param, refused.value.body  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as again:
        client.get(f"/responses/{made.id}", cast_to=object, options={"params": {"stream": "true"}})
    assert again.value.body["param"] == "stream"  # type: ignore[index]
    assert again.value.body["message"].startswith("stream: a kept response is not streamed again here")  # type: ignore[index]
    assert client.responses.retrieve(made.id).output_text == ANSWER  # still there, and served


def test_a_response_kept_by_an_older_version_is_continued_but_not_read_back(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=4096), fake_member("b", ANSWER, n_ctx=4096), max_tokens=60)
    with serving(EnsembleServer(ensemble, ServerOptions(record=True))) as url:
        client = client_of(url)
        client.responses.create(model="specem", input="Capital of France?")  # the database is made
        with sqlite3.connect(tmp_path / "specem.db") as db:
            db.execute("INSERT INTO responses (id, items, created) VALUES ('resp_old', ?, 1.0)",
                       ('[{"role": "user", "content": "Capital of France?"}]',))  # fmt: skip
        with pytest.raises(openai.NotFoundError) as old:
            client.responses.retrieve("resp_old")
        assert "kept by an older specem only to be continued" in old.value.body["message"]  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list("resp_old")
        assert client.responses.create(model="specem", input="Again?", previous_response_id="resp_old").output_text
        client.responses.delete("resp_old")
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="specem", input="Again?", previous_response_id="resp_old")
    ensemble.close()


def test_a_web_page_elsewhere_cannot_delete_and_one_allowed_may(base):
    import httpx

    client = client_of(base)
    made = client.responses.create(model="specem", input="Capital of France?")
    where = f"{base}/v1/responses/{made.id}"
    foreign = httpx.delete(where, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403 and client.responses.retrieve(made.id).id == made.id  # still kept
    asked = httpx.options(where, headers={"Origin": base, "Access-Control-Request-Method": "DELETE"})
    assert "DELETE" in asked.headers["access-control-allow-methods"].split(", ")
    assert httpx.delete(where, headers={"Origin": base}).json()["deleted"] is True


def test_other_methods_are_405s_and_stream_false_is_the_response(base):
    import httpx

    client = client_of(base)
    made = client.responses.create(model="specem", input="Capital of France?")
    where = f"{base}/v1/responses/{made.id}"
    assert httpx.post(where, json={}).status_code == 405
    assert httpx.delete(f"{where}/input_items").status_code == 405
    assert httpx.put(where, json={}).status_code == 405
    for said in ("false", "0", "False"):
        assert httpx.get(where, params={"stream": said}).json()["id"] == made.id
    assert httpx.delete(f"{base}/v1/responses/{'x' * 300}").status_code == 404
    assert client.responses.retrieve(made.id).id == made.id  # nothing else was deleted


def test_an_assistant_message_sent_as_text_is_listed_as_output_text(base):
    client = client_of(base)
    asked = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
             {"role": "user", "content": "Capital of France?"}]  # fmt: skip
    made = client.responses.create(model="specem", input=asked)  # type: ignore[arg-type]
    said = client.responses.input_items.list(made.id, order="asc").data
    assert [(item.role, item.content[0].type) for item in said] == [  # type: ignore[union-attr]
        ("user", "input_text"),
        ("assistant", "output_text"),
        ("user", "input_text"),
    ]
