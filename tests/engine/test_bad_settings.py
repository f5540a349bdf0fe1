"""The Python API refuses bad values as ``SettingError`` (a ``SpecemError``, one line) before
anything runs, and whatever an answer's set-up raises, the ensemble serves the next one."""

from __future__ import annotations

import math

import pytest

from specem_local.errors import SettingError
from tests.engine.conftest import fake_ensemble, fake_member

ANSWER = "Forty-two."


@pytest.mark.parametrize(("name", "value"), [("seed", -5), ("temperature", math.nan), ("top_p", math.inf)])
def test_generate_with_a_bad_value_is_a_setting_error_and_the_next_answer_runs(name, value):
    with fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER)) as ensemble:
        with pytest.raises(SettingError) as caught:
            ensemble.generate("What is six times seven?", **{name: value})
        assert caught.value.field == name and "\n" not in str(caught.value)
        assert ensemble.generate("What is six times seven?", max_tokens=8).text


def test_an_answer_whose_set_up_fails_frees_the_ensemble(monkeypatch):
    with fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER)) as ensemble:
        import specem_local.engine.answer_stream as engine

        def broken(*_args, **_kwargs):
            raise ValueError("a fault while setting up the answer")

        monkeypatch.setattr(engine, "RoundLoop", broken)
        with pytest.raises(ValueError):
            ensemble.generate("What is six times seven?")
        monkeypatch.undo()
        assert ensemble.generate("What is six times seven?", max_tokens=8).text
