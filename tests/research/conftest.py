"""Fixtures of the harness's tests."""

from __future__ import annotations

import pytest

from specem_local.engine import Ensemble
from tests.engine.conftest import fake_ensemble, fake_member


@pytest.fixture
def members(monkeypatch):
    """(name, target) of the members each run loads, new ones every time (eval closes them)."""
    chosen: list = []

    def from_config(cls, config=None, **overrides):
        return fake_ensemble(*(fake_member(name, target, n_ctx=2048) for name, target in chosen))

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))
    return chosen
