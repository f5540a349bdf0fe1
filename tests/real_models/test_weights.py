"""Carried weights, calibration and the larger built-in ensemble, as a user meets them: the
real ``specem`` command on the demo models, in a fresh data dir per test."""

from __future__ import annotations

import json

import pytest

from specem_local.engine import Ensemble
from specem_local.engine.learned import calibrate
from specem_local.models.demo_models import DEMO_MODELS, demo_path
from tests.conftest import demo_config
from tests.real_models.test_cli import assert_clean_error, specem

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell?"


def start_and_final(*flags: str) -> tuple[dict, dict]:
    result = specem("run", "--json", "--greedy", "--max-tokens", "24", *flags, QUESTION)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    return events[0], events[-1]


def test_weights_carry_over_between_runs_and_reset():
    carry = ("--carry-weights", "--no-model-exit")  # with model exit only Qwen drafts: nothing to learn
    first_start, first_final = start_and_final(*carry)
    assert first_start["weights_from"] == "built-in" and first_start["weights"]["qwen2.5-coder-0.5b"] > 0.9
    second_start, _ = start_and_final(*carry)
    assert second_start["weights_from"] == "calibrated" and second_start["learned_answers"] == 1
    assert second_start["weights"] == pytest.approx(first_final["weights"], abs=1e-6)
    default = start_and_final()[0]  # by default nothing learned is carried: the calibration it went on from
    assert default["weights"] == pytest.approx(first_start["weights"]) and default["drafters"] == ["qwen2.5-coder-0.5b"]
    fresh, _ = start_and_final(*carry, "--fresh-weights")
    assert fresh["weights_from"] == "prior" and fresh["weights"]["qwen2.5-coder-0.5b"] < 0.7
    listing = specem("weights", "list")
    assert "gemma-3-270m + qwen2.5-coder-0.5b + smollm2-135m" in listing.stdout and "then 2 answers;" in listing.stdout
    assert "built in: gemma-3-270m + qwen2.5-coder-0.5b + smollm2-135m" in listing.stdout
    assert "forgot the weights of 1 ensemble" in specem("weights", "reset").stdout
    assert start_and_final(*carry)[0]["weights_from"] == "built-in"


def test_calibrate_sets_the_starting_weights_from_labelled_items():
    result = specem("calibrate", "research/data/gsm8k_train_dev120.jsonl", "--limit", "2", "--max-tokens", "64")
    assert result.returncode == 0, result.stderr
    assert "calibrated on 2 items" in result.stdout and "RIGHT ALONE" in result.stdout
    start, _ = start_and_final()
    assert start["weights_from"] == "calibrated" and start["calibrated_items"] == 2
    assert "weights started from calibrated on 2 items" in specem("run", "--authors", "--max-tokens", "8", "Hi").stdout


def test_the_larger_ensemble_by_name(tmp_path):
    """scripts/test.sh pulls the 1.5B, so this runs in CI; without it, the error says how."""
    pulled = demo_path(DEMO_MODELS["qwen2.5-coder-1.5b"])
    assert pulled.is_file(), "pull it first: specem models pull qwen2.5-coder-1.5b (scripts/test.sh does)"
    without = tmp_path / "models"  # the same cache, less the 1.5B
    without.mkdir()
    for path in pulled.parent.iterdir():
        if not path.name.startswith(pulled.name):
            (without / path.name).symlink_to(path)
    result = specem("run", "--ensemble", "demo-1.5b", "Hi", env={"SPECEM_CACHE_DIR": str(tmp_path)})
    assert_clean_error(result, "specem models pull qwen2.5-coder-1.5b")
    start, final = start_and_final("--ensemble", "demo-1.5b")
    assert start["models"] == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma-3-270m"]
    assert start["weights"]["qwen2.5-coder-1.5b"] > 0.5 and final["text"]
    assert final["confidence_from"].startswith("demo-1.5b's 270 GSM8K train answers (")  # its own, not the prior
    _, checked = start_and_final("--ensemble", "demo-1.5b", "--confidence-check", "samples")
    assert "one more sampled answer of the 1.5B" in checked["confidence_from"]  # the one fitted with the check
    assert checked["evidence"]["witnesses"] in (0.0, 1.0) and checked["text"] == final["text"]
    named, chosen = start_and_final("--ensemble", "demo-1.5b", "--choices", "yes,no", "--task", "boolq")
    assert named["weights_from"] == "task" and named["calibrated_items"] == 100  # its own, shipped
    assert "fitted on 100 labelled boolq train items" in named["notes"][-1] and chosen["text"] in ('"yes"', '"no"')


def test_the_python_api_starts_from_a_calibration_and_model_exit_uses_it(tmp_path, monkeypatch):
    """``Ensemble.from_config`` finds the calibration in the user data dir; with model exit, the
    members it marks as losing stop drafting from the first round."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    config = demo_config(max_tokens=24, greedy=True, fresh_weights=False, model_exit=True)
    with Ensemble.from_config(config) as ensemble:
        wrong = {"qwen2.5-coder-0.5b": 16, "gemma-3-270m": 19, "smollm2-135m": 20}
        calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, wrong, 20)
        assert ensemble.weights_origin() == "calibrated on 20 items"
        events = list(ensemble.stream(QUESTION))
        start, final = events[0], events[-1]
        assert start.weights_from == "calibrated" and start.weights["qwen2.5-coder-0.5b"] > 0.85
        assert start.drafters == ("qwen2.5-coder-0.5b",) and final.text
        assert all(r.drafters == ("qwen2.5-coder-0.5b",) for r in events[1:-1])
        assert ensemble.reset_weights() and ensemble.weights_origin() == "the built-in calibration (20 items)"
