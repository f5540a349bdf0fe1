import json

import pytest

from specem_local.commands.cli import main
from specem_local.errors import SpecemError
from specem_research.evaluate import member_systems, parse_variant, summarise
from specem_research.pool import pool_runs
from specem_research.stats import paired_sign_flip_p


def test_variant_values_are_typed_like_models_toml():
    name, overrides = parse_variant("mix:scoring=logit,feedback=false,learning_rate=0.5,segment_tokens=6")
    assert name == "mix"
    assert overrides == {"scoring": "logit", "feedback": False, "learning_rate": 0.5, "segment_tokens": 6}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("noassignments", "expected NAME:key=value"),
        ("x:segment_token=4", "did you mean 'segment_tokens'?"),
        ("x:seed=abc", "seed must be an integer, got string 'abc'"),
        ("x:feedback=maybe", "feedback must be true or false"),
    ],
)
def test_bad_variants_are_one_line_errors(text, message):
    with pytest.raises(SpecemError, match=message):
        parse_variant(text)


def _record(ensemble: bool, qwen: bool, smol: bool) -> dict:
    def result(correct: bool) -> dict:
        return {"correct": correct, "tokens": 10, "seconds": 1.0, "finish_reason": "eos", "wins": {}}

    return {"systems": {"ensemble": result(ensemble), "qwen": result(qwen), "smol": result(smol)}}


def test_summary_pairs_each_ensemble_with_the_best_member():
    records = [_record(True, False, False)] * 3 + [_record(False, True, False)] * 5 + [_record(True, True, True)] * 2
    report = summarise(records, ["ensemble", "qwen", "smol"], ["qwen", "smol"])
    assert report["qwen"]["correct"] == 7 and report["ensemble"]["correct"] == 5
    assert "vs_best_member" not in report["qwen"]
    paired = report["ensemble"]["vs_best_member"]
    assert paired["baseline"] == "qwen" and paired["items"] == 10
    assert (paired["only_system_correct"], paired["only_baseline_correct"]) == (3, 5)
    assert paired["p_value"] == pytest.approx(0.7265625)


def test_members_are_the_systems_where_only_that_model_won():
    records = [
        {
            "systems": {
                "ensemble": {"wins": {"qwen": 3, "smol": 0}},
                "qwen": {"wins": {"qwen": 5}},
                "smol": {"wins": {}},
            }
        },
        {"systems": {"ensemble": {"wins": {"qwen": 1, "smol": 1}}, "qwen": {"wins": {"qwen": 2}}}},
    ]
    assert member_systems(records) == ["qwen", "smol"]


def _run(outcomes: dict[str, list[bool]]) -> list[dict]:
    """One eval run: item i's record with each system right or wrong as ``outcomes`` says."""
    items = len(next(iter(outcomes.values())))
    return [
        {
            "id": f"item-{i}",
            "systems": {
                name: {
                    "correct": results[i],
                    "extracted": "42" if results[i] else f"{name}-wrong-{i}",
                    "tokens": 10,
                    "seconds": 1.0,
                    "finish_reason": "eos",
                    "wins": {name: 1} if name != "ensemble" else {"qwen": 1, "smol": 1},
                    "weights": {},
                    "drafters_per_round": 2.0,
                }
                for name, results in outcomes.items()
            },
        }
        for i in range(items)
    ]


def test_pooled_runs_count_each_item_once_in_the_paired_test():
    first = _run({"ensemble": [True, True, False, False], "qwen": [False, True, True, False], "smol": [False] * 4})
    second = _run({"ensemble": [True, False, False, True], "qwen": [False, False, True, False], "smol": [False] * 4})
    second[0]["systems"]["extra"] = second[0]["systems"]["qwen"]  # only in one run: left out
    pooled = pool_runs([first, second])
    assert pooled["runs"] == 2 and pooled["items"] == 4
    assert set(pooled["systems"]) == {"ensemble", "qwen", "smol"}
    ensemble = pooled["systems"]["ensemble"]
    assert ensemble["correct_per_run"] == [2, 2] and ensemble["correct"] == 4 and ensemble["items"] == 8
    paired = ensemble["vs_best_member"]
    # per item, ensemble minus qwen over both runs: +2, 0, -2, +1
    assert paired["baseline"] == "qwen" and (paired["items_ahead"], paired["items_behind"]) == (2, 1)
    assert (paired["only_system_correct"], paired["only_baseline_correct"]) == (3, 2)
    assert paired["p_value"] == pytest.approx(paired_sign_flip_p([2, 0, -2, 1]))
    assert "vs_best_member" not in pooled["systems"]["qwen"]


def test_pooled_runs_vote_on_answers():
    # each item's right answer is "42"; per run, each system's extracted answers
    answers = [
        {"ensemble": ["42", "42", "5", "7"], "qwen": ["42", "1", "2", "42"]},
        {"ensemble": ["6", "42", "42", "13"], "qwen": ["42", "3", "2", "13"]},
        {"ensemble": ["42", "8", "42", "13"], "qwen": ["9", "4", "42", "8"]},
    ]
    runs = []
    for extracted in answers:
        run = _run({name: [answer == "42" for answer in values] for name, values in extracted.items()})
        for i, record in enumerate(run):
            for name, result in record["systems"].items():
                result["extracted"] = extracted[name][i]
        runs.append(run)
    pooled = pool_runs(runs)
    ensemble, qwen = pooled["systems"]["ensemble"], pooled["systems"]["qwen"]
    # ensemble: 42 wins items 0, 1 and 2; 13 wins item 3
    assert (ensemble["majority_correct"], ensemble["any_run_correct"]) == (3, 3)
    # qwen: 42 wins item 0; item 1 has no right answer; 2 wins item 2; item 3 is a 3-way tie (1/3)
    assert qwen["majority_correct"] == pytest.approx(1 / 3 + 1, abs=0.01) and qwen["any_run_correct"] == 3
    paired = ensemble["majority_vs_best_member"]
    assert (paired["baseline"], paired["items_ahead"], paired["items_behind"]) == ("qwen", 2, 1)
    # per item, ensemble minus qwen, in sixths: 0, +6, +6, -2
    assert paired["p_value"] == pytest.approx(paired_sign_flip_p([0, 6, 6, -2]))
    assert "majority_vs_best_member" not in qwen


def test_pooling_runs_of_different_items_is_an_error():
    first = _run({"qwen": [True]})
    second = [{**record, "id": "elsewhere"} for record in _run({"qwen": [False]})]
    with pytest.raises(SpecemError, match="share no items"):
        pool_runs([first, second])


def test_eval_pool_command(tmp_path, capsys):
    folders = []
    for seed, outcomes in enumerate(([True, False], [True, True])):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        records = _run({"ensemble": outcomes, "qwen": [False, True], "smol": [False, False]})
        (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        folders.append(str(folder))
    assert main(["eval-pool", *folders, "--output", str(tmp_path / "pooled.json")]) == 0
    printed = capsys.readouterr().out
    assert "2 runs of 2 items" in printed and "(1/1 items)" in printed and "MAJORITY OF 2" in printed
    assert json.loads((tmp_path / "pooled.json").read_text())["systems"]["ensemble"]["correct_per_run"] == [1, 2]
    assert main(["eval-pool", folders[0], str(tmp_path / "missing")]) == 1
    assert "missing: no items.jsonl with answers" in capsys.readouterr().err
    assert main(["eval-pool", *folders, "--output", str(tmp_path / "no" / "such" / "dir.json")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_records_from_before_the_rename_still_summarise():
    records = _run({"ensemble": [True, False], "qwen": [True, True]})
    for record in records:
        record["systems"]["ensemble"]["models_per_round"] = record["systems"]["ensemble"].pop("drafters_per_round")
    report = summarise(records, ["ensemble", "qwen"], ["qwen"])
    assert report["ensemble"]["drafters_per_round"] == 2.0


def test_eval_member_must_be_a_model_of_the_ensemble(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n')
    assert main(["eval", str(tasks), "--member", "nope", "--output", str(tmp_path / "out")]) == 1
    assert "--member nope: not a model of this ensemble (qwen2.5-coder-0.5b, gemma-3-270m" in capsys.readouterr().err


def test_the_vote_gates_share_of_rounds_is_reported():
    records = _run({"ensemble": [True, False], "qwen": [True, True]})
    for record, (rounds, confident) in zip(records, [(10, 9), (30, 3)]):
        record["systems"]["ensemble"].update(rounds=rounds, confident_rounds=confident)
    assert summarise(records, ["ensemble", "qwen"], ["qwen"])["ensemble"]["confident_share"] == 0.3
    assert "confident_share" not in summarise(_run({"ensemble": [True], "qwen": [True]}), ["ensemble"], [])["ensemble"]


def _damaged_runs(root):
    """Run folders as a disk, an editor or another tool can leave them (issue 36)."""
    good = {"text": "3", "extracted": "3", "correct": True, "tokens": 3, "seconds": 1.0, "finish_reason": "eos"}
    record = {"id": "1", "systems": {"a": dict(good, wins={"a": 1}), "b": dict(good, wins={"b": 1})}}
    runs = {}
    for name in ("binary", "folder", "deep", "no-correct", "bad-report"):
        (root / name).mkdir()
        runs[name] = root / name
    (root / "binary" / "items.jsonl").write_bytes(b"\x00\xff\xfe binary\n")
    (root / "folder" / "items.jsonl").mkdir()
    (root / "deep" / "items.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    without = {"id": "1", "systems": {"a": {k: v for k, v in good.items() if k != "correct"}, "b": good}}
    (root / "no-correct" / "items.jsonl").write_text(json.dumps(without) + "\n")
    (root / "bad-report" / "items.jsonl").write_text(json.dumps(record) + "\n")
    (root / "bad-report" / "report.json").write_text('{"a":')
    return runs, record


def test_damaged_run_folders_are_one_line_errors_in_every_command(tmp_path, capsys):
    runs, record = _damaged_runs(tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "1", "question": "1 + 2?", "answer": 3}\n')
    for name, folder in runs.items():
        for args in (
            ["eval-adaptive", "--voter", f"{folder}:a", "--voter", f"{folder}:b"],
            ["eval-pool", str(folder)],
            ["eval", str(tasks), "--report-only", "--output", str(folder)],
        ):
            if name == "bad-report" and args[0] == "eval-adaptive":
                continue  # reads no report
            assert main(args) == 1, (name, args)
            err = capsys.readouterr().err
            assert err.startswith("specem: error: ") and err.count("\n") == 1, (name, args, err)
    zero = tmp_path / "zero"
    zero.mkdir()
    for result in record["systems"].values():
        result["seconds"] = 0
    (zero / "items.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["eval-adaptive", "--voter", f"{zero}:a", "--voter", f"{zero}:b"]) == 0  # no time: no ratio
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert row[header.index("TIME") :].split()[0] == "-"  # the TIME column says no ratio, not 0.00x


def test_one_call_is_for_tool_call_items(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n')
    assert main(["eval", str(tasks), "--one-call", "--output", str(tmp_path / "out")]) == 1
    assert "--one-call: these items offer no tools" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
