"""``specem bench --quick`` and ``specem eval`` run end to end and write every documented field
(the numbers themselves are for the README, not asserted here)."""

from __future__ import annotations

import json

from tests.real_models.test_cli import specem


def test_bench_quick_writes_every_field(tmp_path):
    output = tmp_path / "bench.json"
    result = specem("bench", "--plan", "tiny", "--output", str(output))
    assert result.returncode == 0, result.stderr
    report = json.loads(output.read_text())
    assert {"verification", "round_time", "speed", "first_segment", "memory", "models", "seconds"} <= set(report)
    row = report["verification"][0]
    assert {
        "model",
        "context_tokens",
        "inline_ms",
        "one_at_a_time_ms",
        "from_scratch_ms",
        "max_score_difference",
    } <= set(row)
    assert {"round_seconds_near_tokens", "ratio_last_to_first", "rounds"} <= set(report["round_time"])
    speed = report["speed"]
    assert set(speed["members_tokens_per_second"]) == set(report["models"])
    assert {"round-robin", "threads", "round-robin, model exit", "threads, model exit"} == set(speed["ensemble"])
    assert {"peak_rss_bytes", "gguf_total_bytes", "overhead_bytes"} <= set(report["memory"])
    assert report["first_segment"]["seconds"] > 0 and report["first_segment"]["shipped"]["seconds"] > 0
    assert "Verification" in result.stdout and "Peak RSS" in result.stdout


def test_eval_reports_every_system_and_resumes(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "question": "What is 2 + 3?", "answer": "5"}\n'
        '{"id": "b", "question": "Which is a colour?", "choices": ["dog", "red", "run"], "answer": "B"}\n'
    )
    out = tmp_path / "out"
    args = ("eval", str(tasks), "--output", str(out), "--max-tokens", "24", "--variant", "paper:scoring=logit")
    result = specem(*args)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    systems = report["systems"]
    assert set(systems) == {"ensemble", "paper", "qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"}
    for entry in systems.values():
        assert entry["items"] == 2 and 0.0 <= entry["ci95"][0] <= entry["accuracy"] <= entry["ci95"][1] <= 1.0
    assert set(systems["ensemble"]["segment_share"]) == {"qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"}
    assert "mean_final_weights" in systems["paper"]
    lines = (out / "items.jsonl").read_text().splitlines()
    assert len(lines) == 2 and {"prompt", "expected", "systems"} <= set(json.loads(lines[0]))
    again = specem(*args)  # resumable: nothing left to do, nothing appended
    assert again.returncode == 0 and len((out / "items.jsonl").read_text().splitlines()) == 2
    (out / "report.json").unlink()
    rewritten = specem("eval", str(tasks), "--output", str(out), "--report-only")
    assert rewritten.returncode == 0, rewritten.stderr
    assert json.loads((out / "report.json").read_text())["systems"] == systems


def test_eval_report_only_needs_answers(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n')
    result = specem("eval", str(tasks), "--output", str(tmp_path / "out"), "--report-only")
    assert result.returncode == 1 and "no answers to report" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "items.jsonl").write_text("not json\n")
    result = specem("eval", str(tasks), "--output", str(tmp_path / "out"), "--report-only")
    assert result.returncode == 1 and "items.jsonl:1: not a line written by specem eval" in result.stderr


def test_eval_bad_tasks_file(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "no answer"}\n')
    result = specem("eval", str(tasks), "--output", str(tmp_path / "out"))
    assert result.returncode == 1 and 'tasks.jsonl:1: "answer" must be a number or a string' in result.stderr


def test_decode_cost_measures_every_member(trio):
    from specem_research.decode_cost import measure, print_report

    report = measure(trio, tokens=20, repeats=1)
    assert report["models"] == trio.model_names
    assert all(c["draft_step_ms"] > 0 and c["batch_rows"] == 20 and c["row_ms"] > 0 for c in report["costs"])
    assert 0 < report["ceiling"] < report["ceiling_with_shared_starts"] < 1
    answer = report["answer"]
    assert answer["tokens"] >= 20 and answer["drafting_seconds"] > 0 and answer["verification_seconds"] > 0
    print_report(report)


def test_drafting_comparison_alternates_every_mode(trio):
    from specem_research.drafting import MODES, compare

    report = compare(trio, repeats=1, tokens=12)
    assert set(report["median_ratio"]) == set(MODES)
    [run] = report["runs"]
    assert run["ideal"] > 0 and all(ratio > 0 for ratio in run["ratio"].values())
