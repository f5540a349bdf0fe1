import json

import pytest

from specem_local.commands.cli import main
from specem_research.adaptive import adaptive_report, adaptive_vote


@pytest.mark.parametrize(
    ("answers", "chosen", "asked"),
    [
        (["4", "4", "5"], 0, 2),  # the first two agree: the third is never asked
        (["4", "5", "5"], 1, 3),
        (["4", "5", "6"], 0, 3),  # no two agree: ties go to the earliest
        ([None, "5", "6", "5"], 1, 4),
        ([None, None], -1, 2),  # nobody answered
        (["7", None, "8", None], 0, 4),
    ],
)
def test_adaptive_vote_stops_when_two_agree(answers, chosen, asked):
    assert adaptive_vote(answers) == (chosen, asked)


def test_a_single_voter_suffices_when_one_is_asked_to_agree():
    assert adaptive_vote(["3", "4"], agree=1) == (0, 1)


def _answer(extracted: str | None, correct: bool, seconds: float = 1.0, tokens: int = 10) -> dict:
    return {"extracted": extracted, "correct": correct, "seconds": seconds, "tokens": tokens, "finish_reason": "eos"}


def test_the_report_counts_the_cost_of_the_voters_asked():
    items = [
        [_answer("4", True), _answer("4", True), _answer("9", False, seconds=5)],  # 2 asked
        [_answer("1", False), _answer("2", True, seconds=3), _answer("2", True)],  # 3 asked, gained
    ]
    report = adaptive_report(items)
    assert report["correct"] == 2 and report["first_voter_correct"] == 1
    assert report["vs_first_voter"] == {"only_this": 1, "only_first": 0, "p_value": 1.0}
    assert report["mean_voters_asked"] == 2.5
    assert report["seconds_vs_first_voter"] == (2 + 5) / 2
    assert report["tokens_vs_first_voter"] == 5 / 2


def test_eval_adaptive_command(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    records = [
        {
            "id": "a",
            "systems": {"qwen": _answer("4", False), "ensemble": _answer("5", True), "gemma": _answer("5", True)},
        },
        {"id": "b", "systems": {"qwen": _answer("3", True), "ensemble": _answer("3", True)}},  # gemma missing
    ]
    (folder / "items.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    voters = [arg for system in ("qwen", "ensemble", "gemma") for arg in ("--voter", f"{folder}:{system}")]
    assert main(["eval-adaptive", *voters, "--output", str(tmp_path / "adaptive.json")]) == 0
    assert "1/1" in capsys.readouterr().out  # only the item every voter answered
    assert json.loads((tmp_path / "adaptive.json").read_text())["vs_first_voter"]["only_this"] == 1
    for bad, message in (
        (["--voter", "no-colon"], "write RUN_FOLDER:SYSTEM"),
        (["--voter", f"{tmp_path / 'missing'}:qwen"], "missing: no items.jsonl with answers"),
        (["--voter", f"{folder}:qwen", "--voter", f"{folder}:smol"], "share no answered items"),
    ):
        assert main(["eval-adaptive", *bad]) == 1
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1
