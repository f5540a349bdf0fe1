"""The option as one field of a JSON object (``option_eval inside``), on fake members: the field
scored as a choice point, drafted, and the option asked alone, each recorded by its index."""

from __future__ import annotations

import pytest

from specem_research import option_eval
from tests.engine.conftest import fake_ensemble, fake_member


@pytest.fixture(autouse=True)
def own_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))


def test_inside_records_the_choice_point_the_drafted_field_and_the_option_alone():
    item = {"id": "t-1", "task": "pets", "question": "Which pet?", "choices": ["cat", "dog"], "answer": 1}
    members = fake_member("a", '{"answer": "dog"}'), fake_member("b", '{"answer": "dog"}')
    with fake_ensemble(*members) as ensemble:
        record = option_eval.inside(ensemble, item)
    assert {k: record[k] for k in ("id", "task", "answer")} == {"id": "t-1", "task": "pets", "answer": 1}
    assert record["choice_point"] == record["drafted"] == 1 and record["alone"] in (0, 1)
    assert all(record[f"{name}_seconds"] > 0 for name in ("choice_point", "drafted", "alone"))


def test_run_records_every_sources_scores_or_those_of_the_members_named():
    item = {"id": "t-2", "task": "pets", "question": "Which pet?", "choices": ["cat", "dog"], "answer": 0}
    with fake_ensemble(fake_member("a", '"cat"'), fake_member("b", '"dog"')) as ensemble:
        every = option_eval.scored(ensemble, item)
        alone = option_eval.scored(ensemble, item, ["b"])
    assert sorted(every["scores"]) == ["asked:a", "asked:b", "scored:a", "scored:b"]
    assert sorted(alone["scores"]) == ["asked:b", "scored:b"]
    assert alone["scores"]["asked:b"] == pytest.approx(every["scores"]["asked:b"])
    assert every["choices"] == ["cat", "dog"] and every["answer"] == 0 and every["pick"] in (0, 1)
