"""What an ensemble ships for options, checked on confirm items from recorded scores."""

from __future__ import annotations

import json

import pytest

from specem_local.engine import TaskWeights
from specem_research import option_shipped as shp
from tests.research.test_option_report import GUESSES, KNOWS, LEANS, records


def write(folder, made):
    folder.mkdir()
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))
    return folder


def test_what_ships_is_scored_against_uniform_the_old_source_and_the_best(tmp_path, monkeypatch, capsys):
    shipped = tmp_path / "option_weights.json"
    shipped.write_text(json.dumps([
        {"key": "KEY", "task": "t", "weights": {KNOWS: 1.0}, "priors": {}, "items": 100, "fitted_on": "t"},
        {"key": "KEY", "task": "choices", "weights": {LEANS: 1.0}, "priors": {}, "items": 0, "fitted_on": "m"},
        {"key": "OTHER", "task": "t", "weights": {LEANS: 1.0}, "priors": {}, "items": 1, "fitted_on": "o"},
    ]))  # fmt: skip
    monkeypatch.setattr(shp, "SHIPPED", shipped)
    monkeypatch.setattr(shp, "FIVE", ("t", "u"))  # each task's other_tasks: the other one
    monkeypatch.setattr(shp, "members_choices", lambda key: TaskWeights("choices", {KNOWS: 1.0}, {}, 0, key))
    train = write(tmp_path / "train", records("t", 150, 4) + records("u", 150, 5))
    confirm = write(tmp_path / "confirm", records("t", 80, 6) + records("u", 60, 7))
    out = tmp_path / "report.json"
    argv = [
        "--train",
        str(train),
        "--confirm",
        str(confirm),
        "--ensemble-key",
        "KEY",
        "--old",
        GUESSES,
        "--output",
        str(out),
    ]
    assert shp.main(argv) == 0
    report = json.loads(out.read_text())
    t, u, pooled = report["tasks"]["t"], report["tasks"]["u"], report["pooled"]
    assert t["items"] == 80 and u["items"] == 60 and pooled["items"] == 140
    assert t["accuracy"]["task"] == t["accuracy"]["best"] > 0.75  # the task's own weights follow the source that knows
    assert u["accuracy"]["task"] == u["accuracy"]["choices"] < 0.7  # no weights of its own: choices, which lean
    assert t["accuracy"]["old"] != t["accuracy"]["task"] and set(t["paired"]) == {
        "task vs uniform", "task vs old", "task vs best", "choices vs uniform", "choices vs old"}  # fmt: skip
    assert t["paired"]["task vs best"] == {"ahead": 0, "behind": 0, "p": 1.0}
    assert pooled["accuracy"]["uniform"] == pytest.approx(
        (80 * t["accuracy"]["uniform"] + 60 * u["accuracy"]["uniform"]) / 140
    )
    assert "pooled" in capsys.readouterr().out
    chosen = report["label_free_on_train"]  # on the train items past the labelled 100: 50 of t, 50 of u
    assert set(chosen) == {"t", "u", "pooled"} and set(chosen["t"]["accuracy"]) == set(shp.LABEL_FREE)
    assert chosen["t"]["accuracy"]["members"] > 0.75 > chosen["t"]["accuracy"]["uniform"]  # the members know
    assert sum(chosen["pooled"]["paired"]["members vs uniform"][k] for k in ("ahead", "behind")) <= 100


def test_an_ensemble_without_choices_weights_is_said_and_nothing_written(tmp_path, monkeypatch, capsys):
    shipped = tmp_path / "option_weights.json"
    shipped.write_text(
        json.dumps([{"key": "KEY", "task": "t", "weights": {}, "priors": {}, "items": 1, "fitted_on": ""}])
    )
    monkeypatch.setattr(shp, "SHIPPED", shipped)
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit):
        shp.main(["--train", "x", "--confirm", "y", "--ensemble-key", "KEY", "--old", "o", "--output", str(out)])
    assert "no choices weights shipped for 'KEY'" in capsys.readouterr().err and not out.exists()
