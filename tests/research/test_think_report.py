"""Think first, then the format: the report that holds the pre-registered bound
(research/think_report.py, docs/structured-output.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from specem_research import think_report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "research" / "results"
SCHEMA = ROOT / "research" / "data" / "gsm8k_answer_schema.json"


def test_the_lower_bound_is_the_pre_registered_wald_bound():
    """``d - 1.645 * sqrt(b + c - (b - c)^2 / n) / n``, as the quality log fixed it before the
    confirm run: the confirm run's two systems, by hand."""
    difference, bound = think_report.lower_bound(3, 7, 200)
    assert difference == pytest.approx(-0.02)
    assert bound == pytest.approx(-0.02 - 1.6449 * math.sqrt(10 - 16 / 200) / 200)
    assert round(100 * bound, 1) == -4.6
    assert round(100 * think_report.lower_bound(13, 12, 200)[1], 1) == -3.6
    assert think_report.lower_bound(0, 0, 50) == (0.0, 0.0)  # no discordant item: no spread
    assert think_report.lower_bound(5, 0, 5) == (1.0, 1.0)  # all one way: the spread is 0, not negative


@pytest.mark.parametrize(
    ("text", "parses", "number"),
    [
        ('{"reasoning": "r", "answer": 42}', True, 42.0),
        ('{"reasoning": "r", "answer": "42"}', True, None),  # the schema's answer is a number
        ('{"reasoning": "r", "answer": true}', True, None),
        ("[42]", True, None),
        ('{"reasoning": "it is 42', False, None),
    ],
)
def test_json_answer(text, parses, number):
    assert think_report.json_answer(text)[:2] == (parses, number)


def test_a_json_answer_is_right_only_when_whole():
    whole = {"text": '{"reasoning": "r", "answer": 42}', "finish_reason": "eos"}
    assert think_report.json_right(whole, 42.0)
    assert not think_report.json_right(whole, 41.0)
    assert not think_report.json_right({**whole, "finish_reason": "length"}, 42.0)
    assert not think_report.json_right({"text": '{"reasoning": "42', "finish_reason": "length"}, 42.0)


def test_reasoning_parts_from_plain_only_where_the_texts_differ():
    assert not think_report.parted("So 6 * 7 = 42.", "So 6 * 7 = 42.")
    assert not think_report.parted("So 6 * 7", "So 6 * 7 = 42.")  # the budget cut it short
    assert think_report.parted("So 6 * 8 = 48.", "So 6 * 7 = 42.")


def answer(text: str, finish: str = "eos", reasoning: str = "", switched: str | None = None) -> dict:
    return {"text": text, "finish_reason": finish, "reasoning": reasoning, "switched": switched, "seconds": 3.0}


def plain_answer(correct: bool, text: str = "6 * 7 = 42. The answer is 42.") -> dict:
    return {"text": text, "correct": correct, "finish_reason": "eos", "seconds": 2.0}


def runs() -> tuple[dict, dict, dict]:
    json42, json41 = '{"reasoning": "r", "answer": 42}', '{"reasoning": "r", "answer": 41}'
    plain = {
        "a": {"s": plain_answer(True)},
        "b": {"s": plain_answer(False)},
        "c": {"s": plain_answer(True)},
        "d": {"s": plain_answer(True)},
    }
    run = {
        "a": {"s": answer(json42, reasoning="6 * 7 = 42. The answer is 42.", switched="eos")},  # both right
        "b": {"s": answer(json42, reasoning="6 * 7 = 42.", switched="budget")},  # only thinking right
        "c": {"s": answer(json41, reasoning="6 * 7 = 41.", switched="eos")},  # parted; only plain right
        "d": {"s": answer(json42, "length", reasoning="6 * 7", switched="budget")},  # cut: wrong, though 42
    }
    return plain, run, {item: 42.0 for item in run}


def test_compare_counts_each_item_once_and_credits_no_cut_answer():
    plain, run, expected = runs()
    schema = json.loads(SCHEMA.read_text())
    entry = think_report.compare(plain, run, "s", schema, expected)
    assert (entry["items"], entry["correct"], entry["plain_correct"]) == (4, 2, 3)
    assert (entry["only_this"], entry["only_plain"], entry["p_value"]) == (1, 2, 1.0)
    assert (entry["difference_points"], entry["ended"], entry["valid_of_ended"]) == (-25.0, 3, 3)
    assert entry["json_disagrees_with_reasoning"] == 1  # d: its reasoning ends on 7, its cut JSON has none
    assert entry["reasoning_parted_from_plain"] == 1  # c
    assert entry["switched"] == {"eos": 2, "budget": 2}
    assert entry["time_vs_plain"] == 1.5


def test_against_a_json_baseline_both_are_graded_as_json():
    _, run, expected = runs()
    baseline = {item: {"s": answer('{"reasoning": "r", "answer": 42}', "length")} for item in run}  # all cut
    entry = think_report.compare(baseline, run, "s", json.loads(SCHEMA.read_text()), expected, plain_json=True)
    assert (entry["plain_correct"], entry["only_this"], entry["only_plain"]) == (0, 2, 0)
    assert entry["reasoning_parted_from_plain"] is None


def test_main_writes_the_report(tmp_path, monkeypatch, capsys):
    plain, run, _ = runs()
    for name, items in (("plain", plain), ("think", run)):
        (tmp_path / name).mkdir()
        lines = [json.dumps({"id": i, "expected": "42", "systems": systems}) for i, systems in items.items()]
        (tmp_path / name / "items.jsonl").write_text("\n".join(lines) + "\n")
    output = tmp_path / "report.json"
    argv = ["think_report", "--plain", str(tmp_path / "plain"), "--schema", str(SCHEMA), str(tmp_path / "think")]
    monkeypatch.setattr(sys, "argv", [*argv, "--output", str(output)])
    think_report.main()
    report = json.loads(output.read_text())
    assert list(report) == ["think/s"] and report["think/s"]["correct"] == 2
    assert "think s:" in capsys.readouterr().out


def test_the_confirm_runs_figures_are_made_again_from_the_stored_answers():
    """docs/structured-output.md quotes these (the goal: a bound above -5 points); the
    stored answers and this version's grading give them again."""
    plain = think_report.answers(RESULTS / "issue46-confirm200-plain400")
    run = think_report.answers(RESULTS / "issue46-confirm200-think")
    expected = think_report.expected_answers(RESULTS / "issue46-confirm200-think")
    schema = json.loads(SCHEMA.read_text())
    stored = json.loads((RESULTS / "issue46-confirm200-report-recount.json").read_text())
    for system, (correct, bound) in {"ensemble": (49, -4.6), "qwen2.5-coder-0.5b": (54, -3.6)}.items():
        entry = think_report.compare(plain, run, system, schema, expected)
        assert (entry["correct"], entry["plain_correct"], entry["lower_bound_points"]) == (correct, 53, bound)
        assert entry == stored[f"issue46-confirm200-think/{system}"]
