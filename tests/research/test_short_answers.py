"""Where the time of a short answer goes (research/short_answers.py), on fake members: every
answer's text is kept, so "the same answers" can be checked."""

from __future__ import annotations

from specem_research import short_answers
from tests.engine.conftest import fake_ensemble, fake_member


def test_profile_keeps_every_answers_text_and_counts_the_same_ones():
    ensemble = fake_ensemble(fake_member("a", "The answer is 42."), fake_member("b", "The answer is 42."))
    items = [{"prompt": f"Question {n}?", "options": {"max_tokens": 40}} for n in range(3)]
    with ensemble:
        report = {
            "maths/ensemble": short_answers.profile(ensemble, items, None),
            "maths/a": short_answers.profile(ensemble, items, ["a"]),
        }
    for entry in report.values():
        assert entry["items"] == 3 and len(entry["texts"]) == 3
        assert entry["texts"] == ["The answer is 42."] * 3
        assert set(entry["prompt_seconds"]) <= {"a", "b"} and entry["seconds"] >= 0
    assert set(report["maths/a"]["prompt_seconds"]) == {"a"}
    assert short_answers.same_answers(report, ["maths"], "a") == {"maths": {"same": 3, "items": 3}}


def test_same_answers_counts_only_identical_texts():
    report = {
        "bfcl/ensemble": {"texts": ['{"a": 1}', '{"a": 2}']},
        "bfcl/m": {"texts": ['{"a": 1}', '{"a": 3}']},
        "gsm8k/ensemble": {"texts": ["x"]},
        "gsm8k/m": {"texts": ["x "]},
    }
    assert short_answers.same_answers(report, ["bfcl", "gsm8k"], "m") == {
        "bfcl": {"same": 1, "items": 2},
        "gsm8k": {"same": 0, "items": 1},
    }
