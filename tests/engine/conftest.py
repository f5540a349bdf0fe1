"""Ensembles of fake models (tests/fake_model.py): the round loop in seconds, no llama.cpp."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from specem_local.engine import Ensemble
from specem_local.engine.loading import prompt_format_for
from specem_local.engine.member import Member
from specem_local.models.config import ModelSpec
from specem_local.settings import EnsembleSettings
from specem_local.storage.weights import WeightStore
from tests.fake_model import FakeModel

QUESTION = "What is six times seven?"


@pytest.fixture(autouse=True)
def stop_signals_given_back() -> Iterator[None]:
    """A command stopped by Ctrl-C in-process ignores the stop signals after it (``specem run``
    finishing its stop, commands/terminal.py): pytest gets its own handlers back after each test."""
    kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for number, handler in kept.items():
        if handler is not None and signal.getsignal(number) is not handler:
            signal.signal(number, handler)


def fake_member(name: str, target: str, *, role: str = "both", **model_options) -> Member:
    spec = ModelSpec(name=name, path=f"{name}.gguf", role=role)
    model = FakeModel(target, **model_options)
    return Member(spec, model, prompt_format_for(spec, model))


def fake_ensemble(*members: Member, weight_store: WeightStore | None = None, **settings) -> Ensemble:
    """Greedy unless the settings say otherwise; no carried weights unless given a store; no
    thinking before a format unless ``reasoning_budget`` is given (tests/engine/test_thinking.py)."""
    chosen = {"greedy": True, "reasoning_budget": 0, **settings}
    return Ensemble(list(members), EnsembleSettings(**chosen), weight_store=weight_store)
