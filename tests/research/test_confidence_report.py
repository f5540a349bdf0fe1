"""The confidence measures of research/confidence.py on numbers whose answers are known: AUROC,
ECE, two signals' AUROC compared on the same answers, and the escalation curve (the ensemble's
answer, or the reserve's below the threshold)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from specem_local.engine.evidence import FEATURES
from specem_research import confidence as report


def test_auroc_is_the_chance_a_right_answer_scores_above_a_wrong_one():
    assert report.auroc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert report.auroc([0.1, 0.9], [True, False]) == 0.0
    assert report.auroc([0.5, 0.5], [True, False]) == 0.5  # a tie counts half


def test_ece_is_the_gap_between_said_and_seen_weighed_by_bin():
    assert report.ece([0.95] * 20, [True] * 19 + [False]) == pytest.approx(0.0, abs=1e-9)
    assert report.ece([0.9] * 10, [False] * 10) == pytest.approx(0.9)


def test_the_paired_auroc_difference_resamples_the_same_answers_for_both_signals():
    right = [True, False] * 20
    perfect = [1.0 if r else 0.0 for r in right]
    backwards = [0.0 if r else 1.0 for r in right]
    ahead = report.paired_auroc_difference(perfect, backwards, right)
    assert ahead["difference"] == 1.0 and ahead["ci95"] == [1.0, 1.0] and ahead["not_ahead"] == 0.0
    level = report.paired_auroc_difference(perfect, perfect, right)
    assert level["difference"] == 0.0 and level["ci95"] == [0.0, 0.0] and level["not_ahead"] == 1.0
    noisy = [0.9, 0.2, 0.4, 0.6, 0.8, 0.1, 0.7, 0.3] * 5
    mixed = report.paired_auroc_difference(noisy, backwards, right)
    assert mixed["difference"] == pytest.approx(report.auroc(noisy, right) - 0.0)
    assert mixed["ci95"][0] < mixed["difference"] < mixed["ci95"][1] + 1e-9 and mixed["not_ahead"] == 0.0


def test_the_escalation_curve_takes_the_reserves_answer_and_time_below_the_threshold():
    answers = [
        {"id": "a", "correct": True, "seconds": 1.0},
        {"id": "b", "correct": False, "seconds": 1.0},
        {"id": "c", "correct": False, "seconds": 2.0},
    ]
    reserve = {"a": {"correct": False, "seconds": 3.0}, "b": {"correct": True, "seconds": 3.0},
               "c": {"correct": True, "seconds": 5.0}}  # fmt: skip
    curve = report.escalation_curve(answers, [0.9, 0.3, 0.6], reserve, thresholds=(0.0, 0.5, 0.7, 1.0))
    assert [p["escalated"] for p in curve] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert [p["accuracy"] for p in curve] == pytest.approx([1 / 3, 2 / 3, 1, 2 / 3])
    assert [p["seconds"] for p in curve] == [4.0, 7.0, 12.0, 15.0]


def test_the_ece_a_calibrated_confidence_would_show_is_read_beside_the_measured_one():
    probabilities = [0.2, 0.5, 0.8] * 100
    calibrated = [i % 10 < 2 for i in range(100)] + [i % 2 == 0 for i in range(100)] + [i % 5 > 0 for i in range(100)]
    calibrated = [calibrated[k + 100 * j] for k in range(100) for j in range(3)]  # each answer beside its probability
    floor = report.ece_if_calibrated(probabilities, calibrated)
    assert report.ece(probabilities, calibrated) == pytest.approx(0.0, abs=1e-9)
    assert 0.0 < floor["mean"] < floor["p95"] < 0.1 and floor["p"] == 1.0  # chance alone gives an ECE above 0
    overconfident = report.ece_if_calibrated([0.95] * 300, [i % 2 == 0 for i in range(300)])
    assert overconfident["p"] == 0.0 and overconfident["mean"] < 0.05  # 0.45 off: no draw comes near
    again = report.ece_if_calibrated(probabilities, calibrated)
    assert again == floor  # seeded: the same answers give the same floor


def test_a_penalty_is_scored_on_answers_its_fit_did_not_see():
    evidence = [{"mean_logprob": -0.1 * (i % 7), "least_logprob": -0.5 * (i % 5)} for i in range(60)]
    right = [i % 7 < 3 for i in range(60)]  # mean_logprob says it exactly
    light, heavy = (report.cross_validated_log_loss(evidence, right, l2) for l2 in (0.1, 100.0))
    assert light < heavy < math.log(2)  # an answer held out is still predicted better than a coin
    noise = [i % 3 == 0 for i in range(60)]  # no feature says it: a held-out answer is predicted worse
    overfitted, shrunk = (report.cross_validated_log_loss(evidence, noise, l2) for l2 in (0.1, 100.0))
    assert overfitted > shrunk


def write_records(folder, records):
    """A specem eval output folder holding ``records`` (its items.jsonl lines)."""
    folder.mkdir()
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def write_run(folder, answers):
    """A specem eval output folder whose ensemble gave ``answers`` (evidence, right) in order."""
    lines = [
        {"id": f"{folder.name}-{i}", "systems": {"ensemble": {"evidence": e, "correct": right, "extracted": "1"}}}
        for i, (e, right) in enumerate(answers)
    ]
    return write_records(folder, lines)


def test_fit_and_penalty_pool_the_answers_of_every_run_named(tmp_path, monkeypatch):
    first = write_run(tmp_path / "dev", [({"mean_logprob": -0.1 * (i % 7)}, i % 7 < 3) for i in range(30)])
    second = write_run(tmp_path / "more", [({"mean_logprob": -0.2 * (i % 5)}, i % 5 < 1) for i in range(40)])
    for l2 in ("1", "100"):
        out = tmp_path / f"calibrator-{l2}.json"
        argv = ["confidence", "fit", str(first), str(second), "--name", "both", "--l2", l2, "--output", str(out)]
        monkeypatch.setattr(sys, "argv", argv)
        report.main()
    light, heavy = (json.loads((tmp_path / f"calibrator-{l2}.json").read_text()) for l2 in ("1", "100"))
    assert light["answers"] == heavy["answers"] == 70 and light["fitted_on"] == "both"
    mean = FEATURES.index("mean_logprob")
    assert abs(heavy["weights"][mean]) < abs(light["weights"][mean])  # the penalty named is the one used
    argv = ["confidence", "penalty", str(first), str(second), "--output", str(tmp_path / "p.json")]
    monkeypatch.setattr(sys, "argv", argv)
    report.main()
    penalties = json.loads((tmp_path / "p.json").read_text())
    assert penalties["answers"] == 70 and penalties["run"] == [str(first), str(second)]
    assert penalties["best"] == min(report.PENALTIES, key=lambda l2: penalties["log_loss"][str(l2)])


def test_a_witness_recorded_by_another_run_is_read_by_id(tmp_path):
    """``RUN:SYSTEM`` takes that member's answer to the same item from another run, matched by id
    (not by position); an item no check answered is left out (a check is reported where it ran)."""
    answers = [{"id": i, "systems": {"ensemble": {"evidence": {}, "correct": True, "extracted": x}}}
               for i, x in (("a", "7"), ("b", "8"), ("c", "9"))]  # fmt: skip
    run = write_records(tmp_path / "run", answers)
    recorded = [{"id": i, "systems": {"ensemble": {"extracted": "0"}, "small": {"extracted": x}}}
                for i, x in (("b", "5"), ("a", "7"))]  # fmt: skip
    other = write_records(tmp_path / "other", recorded)
    checked = report.with_checks(report.items(run), "ensemble", [f"{other}:small"], [])
    shares = {a["id"]: a["evidence"].get(report.CHECK) for a in checked}
    assert shares == {"a": 1.0, "b": 0.0}
    assert len(report.with_checks(report.items(run), "ensemble", [], [])) == 3  # no check named: every answer


def test_a_samples_run_names_its_system_unless_it_holds_one_and_every_check_must_answer(tmp_path):
    """A bare samples run is read only when it holds one system (an older run with a variant
    beside the member must name it, ``RUN:SYSTEM``); an item not every check answered is left
    out (a share over the same answers), and checks that answer nothing are an error."""
    mine = [{"id": i, "systems": {"ensemble": {"evidence": {}, "correct": True, "extracted": "7"}}} for i in "ab"]
    run = write_records(tmp_path / "run", mine)
    mixed = write_records(
        tmp_path / "mixed", [{"id": "a", "systems": {"variant": {"extracted": "3"}, "big": {"extracted": "7"}}}]
    )
    alone = write_records(
        tmp_path / "alone", [{"id": i, "systems": {"big": {"extracted": x}}} for i, x in (("a", "3"), ("b", "7"))]
    )
    with pytest.raises(SystemExit, match=r"holds 2 systems .*big, variant.*RUN:SYSTEM"):
        report.with_checks(report.items(run), "ensemble", [], [str(mixed)])
    assert [
        a["evidence"][report.CHECK] for a in report.with_checks(report.items(run), "ensemble", [], [str(alone)])
    ] == [0.0, 1.0]
    both = report.with_checks(report.items(run), "ensemble", [], [str(alone), f"{mixed}:big"])
    assert [(a["id"], a["evidence"][report.CHECK]) for a in both] == [("a", 0.5)]  # b: only one check answered it
    with pytest.raises(SystemExit, match="no answer was checked by every one of"):
        report.with_checks(report.items(run), "ensemble", [f"{mixed}:typo"], [])


def test_report_sets_the_calibrated_confidence_beside_the_checks_agreement_alone(tmp_path, monkeypatch):
    """With a check, ``report`` measures its agreement alone and the calibrated confidence's AUROC
    minus it on the same answers (the goal's self-consistency comparison)."""
    lines = []
    for i in range(40):  # the sample agrees with the right answers and every fifth wrong one
        right = i % 7 < 3
        evidence = {"mean_logprob": -0.1 * (i % 7), "least_logprob": -1.0}
        ensemble = {"evidence": evidence, "correct": right, "extracted": "1", "confidence": 0.5}
        lines.append(
            {
                "id": str(i),
                "systems": {"ensemble": ensemble, "sample": {"extracted": "1" if right or i % 5 == 0 else "2"}},
            }
        )
    run = write_records(tmp_path / "run", lines)
    calibrator = tmp_path / "c.json"
    monkeypatch.setattr(
        sys, "argv", ["c", "fit", str(run), "--name", "n", "--witness", "sample", "--output", str(calibrator)]
    )
    report.main()
    out = tmp_path / "r.json"
    argv = ["c", "report", str(run), "--calibrator", str(calibrator), "--witness", "sample", "--output", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    report.main()
    said = json.loads(out.read_text())
    alone, calibrated = said[report.CHECK]["auroc"], said["calibrated"]["auroc"]
    assert 0.5 < alone < 1 and said["calibrated_minus_witnesses"]["difference"] == pytest.approx(calibrated - alone)
    assert said["calibrated_minus_mean_logprob"]["difference"] == pytest.approx(
        calibrated - said["mean_logprob"]["auroc"]
    )


def test_escalation_takes_the_unsure_answers_from_the_escalated_system_and_the_base_from_the_reserves(
    tmp_path, monkeypatch
):
    lines = [
        {"id": str(i), "systems": {
            "ensemble": {"evidence": {}, "correct": i == 0, "confidence": [0.9, 0.2][i], "seconds": 1.0},
            "big": {"correct": True, "seconds": 4.0},
            "big+prediction": {"correct": i == 1, "seconds": 2.0}}}
        for i in range(2)
    ]  # fmt: skip
    run = write_records(tmp_path / "run", lines)
    out = tmp_path / "e.json"
    argv = ["c", "escalation", str(run), "--reserve", str(run), "--reserve-system", "big",
            "--escalated-system", "big+prediction", "--output", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    report.main()
    said = json.loads(out.read_text())
    assert said["reserve_alone"] == {"accuracy": 1.0, "seconds": 8.0} and said["escalated_system"] == "big+prediction"
    at_half = next(point for point in said["curve"] if point["threshold"] == 0.5)
    assert at_half == {"threshold": 0.5, "escalated": 0.5, "accuracy": 1.0, "seconds": 4.0}  # 1 + (1 + 2)
