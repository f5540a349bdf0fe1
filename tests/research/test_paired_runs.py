"""Two eval runs compared item by item (research/paired_runs.py)."""

from __future__ import annotations

import json

import pytest

from specem_research import paired_runs


def run(folder, correct: dict[str, list[bool]]) -> None:
    folder.mkdir()
    lines = []
    for index in range(len(next(iter(correct.values())))):
        systems = {name: {"correct": marks[index], "seconds": 2.0, "tokens": 10} for name, marks in correct.items()}
        lines.append(json.dumps({"id": f"item-{index}", "systems": systems}))
    (folder / "items.jsonl").write_text("\n".join(lines) + "\n")


def test_paired_counts_and_the_exact_p(tmp_path, capsys):
    run(tmp_path / "a", {"ensemble": [True, True, False, False, True], "m": [True] * 5})
    run(tmp_path / "b", {"ensemble": [True, False, False, True, True], "m": [False] * 5})
    result = paired_runs.paired(paired_runs.answers(tmp_path / "a"), paired_runs.answers(tmp_path / "b"), "m")
    assert (result["both"], result["only_first"], result["only_second"], result["neither"]) == (0, 5, 0, 0)
    assert result["p"] == pytest.approx(0.0625) and result["seconds_ratio"] == 1.0
    assert paired_runs.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "ensemble" in out and "1.000" in out


def test_one_run_compares_the_ensemble_with_each_member(tmp_path, capsys):
    run(tmp_path / "a", {"ensemble": [True, True, False, False], "m": [True, False, False, True], "n": [False] * 4})
    items = paired_runs.answers(tmp_path / "a")
    result = paired_runs.paired(items, items, "m", "ensemble")
    counts = (result["first_correct"], result["second_correct"], result["only_first"], result["only_second"])
    assert counts == (2, 2, 1, 1)
    assert paired_runs.some_member_right(items) == 2
    assert paired_runs.main([str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "some member right: 2" in out and "ensemble " not in out.split("\n", 2)[2]
