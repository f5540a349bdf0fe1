"""``specem eval`` answering on fake members (issue 44: paths no test ran): ``--schema`` (the
answer graded from the JSON's ``answer`` field) and ``--one-call`` (tool-call items answered with
one call, where the members would write two)."""

from __future__ import annotations

import json

from specem_local.commands.cli import main

AREA = {
    "type": "function",
    "function": {
        "name": "area",
        "description": "The area of a triangle.",
        "parameters": {
            "type": "object",
            "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}},
            "required": ["base", "height"],
        },
    },
}
BFCL_AREA = {**AREA["function"], "parameters": {**AREA["function"]["parameters"], "type": "dict"}}


def report(folder) -> dict:
    return json.loads((folder / "report.json").read_text())["systems"]


def test_eval_schema_grades_the_jsons_answer_field(members, tmp_path, capsys):
    reply = '{"reasoning": "six sevens", "answer": 42}'
    members += [("a", reply), ("b", "It is 42.")]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "1", "question": "What is six times seven?", "answer": 42}\n')
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"reasoning": {"type": "string"},
                                  "answer": {"type": "number"}}, "required": ["reasoning", "answer"],
                                  "additionalProperties": False}))  # fmt: skip
    out = tmp_path / "out"
    assert main(["eval", str(tasks), "--schema", str(schema), "--max-tokens", "80", "--output", str(out)]) == 0
    [item] = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    for name in ("ensemble", "a"):
        assert json.loads(item["systems"][name]["text"])["answer"] == 42
    assert item["systems"]["b"]["text"].startswith('{"reasoning": "')  # prose made JSON (cut: it never ends)
    assert report(out)["ensemble"]["correct"] == 1


def test_eval_one_call_answers_tool_items_with_one_call(members, tmp_path, capsys):
    two = '{"tool_calls": [{"name": "area", "arguments": {"base": 10, "height": 5}}, ' \
          '{"name": "area", "arguments": {"base": 3, "height": 4}}]}'  # fmt: skip
    members += [("a", two), ("b", two)]
    item = {"id": "t1", "messages": [{"role": "user", "content": "Area of a triangle of base 10, height 5?"}],
            "tools": [AREA], "functions": [BFCL_AREA], "answer": [{"area": {"base": [10], "height": [5]}}]}  # fmt: skip
    tasks = tmp_path / "tools.jsonl"
    tasks.write_text(json.dumps(item) + "\n")
    plain, one = tmp_path / "plain", tmp_path / "one"
    assert main(["eval", str(tasks), "--ensemble-only", "--max-tokens", "160", "--output", str(plain)]) == 0
    assert main(["eval", str(tasks), "--ensemble-only", "--one-call", "--max-tokens", "160", "--output", str(one)]) == 0
    calls = {name: json.loads(json.loads((folder / "items.jsonl").read_text())["systems"]["ensemble"]["text"])
             for name, folder in (("plain", plain), ("one", one))}  # fmt: skip
    assert len(calls["plain"]["tool_calls"]) == 2 and report(plain)["ensemble"]["correct"] == 0  # two calls: wrong
    assert calls["one"]["tool_calls"] == [{"name": "area", "arguments": {"base": 10, "height": 5}}]
    assert report(one)["ensemble"]["correct"] == 1


A, B = "qwen2.5-coder-0.5b", "gemma-3-270m"  # names of the demo config, which --member checks


def test_eval_prediction_from_reads_each_items_answer_of_another_run_ahead(members, tmp_path, capsys):
    members += [(A, "It is 42."), (B, "It is 42.")]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "1", "question": "Six times seven?", "answer": 42}\n'
                     '{"id": "2", "question": "Six times six?", "answer": 36}\n')  # fmt: skip
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["eval", str(tasks), "--members-only", "--member", A, "--limit", "1", "--output", str(first)]) == 0
    asked = ["eval", str(tasks), "--members-only", "--member", B, "--prediction-from", f"{first}:{A}"]
    assert main([*asked, "--output", str(second)]) == 0
    one, two = [json.loads(line)["systems"][B] for line in (second / "items.jsonl").read_text().splitlines()]
    assert one["text"] == "It is 42." and one["predicted_tokens"] == len("It is 42.")  # a byte a token
    assert "predicted_tokens" not in two  # no answer of A's for the second item: none read ahead
    for wrong in (f"{first}:nobody", f"{tmp_path / 'none'}:{A}", A):
        assert main(["eval", str(tasks), "--prediction-from", wrong, "--output", str(tmp_path / "x")]) == 1
        assert "--prediction-from" in capsys.readouterr().err
