"""Checking structured answers against their schemas (research/schema_validity.py): an empty
object or array is valid where a schema requires nothing, and is counted apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specem_research import schema_validity

ROOT = Path(__file__).resolve().parents[2]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ('{"name": "Ada", "age": 36}', "valid"),
        ("{}", "valid"),  # nothing is required
        ('{"age": "old"}', "invalid: 'old' is not of type 'integer'"),
        ('{"name": "Ada"', "not JSON"),
    ],
)
def test_check(text, outcome):
    assert schema_validity.check(PERSON, text).startswith(outcome)


def test_a_multiple_of_is_checked_in_decimal():
    assert schema_validity.check({"type": "number", "multipleOf": 0.01}, "10000.89") == "valid"


@pytest.mark.parametrize(
    ("text", "empty"), [("{}", True), (" [ ] ", True), ('{"a": {}}', False), ("0", False), ("{", False)]
)
def test_empty(text, empty):
    assert schema_validity.empty(text) is empty


def write_run(folder: Path, records: list[dict]) -> Path:
    folder.mkdir()
    (folder / "items.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder / "items.jsonl"


def test_the_report_counts_empty_answers_apart_from_the_valid_ones(tmp_path, capsys):
    records = [
        {"set": "s", "id": "1", "outcome": "valid", "text": '{"name": "Ada"}'},
        {"set": "s", "id": "2", "outcome": "valid", "text": "{}"},
        {"set": "s", "id": "3", "outcome": "valid", "text": "[]", "notes": ["oneOf as anyOf. More."]},
        {"set": "s", "id": "4", "outcome": "cut (length)", "text": "{"},
        {"set": "s", "id": "5", "outcome": "refused", "why": "cannot be enforced: a look-around"},
        {"set": "s", "id": "6", "outcome": "valid", "text": '{"age": "old"}'},  # checked again: invalid
    ]
    items = write_run(tmp_path / "run", records)
    by_key = {("s", str(i)): PERSON for i in range(1, 7)}
    by_key["s", "3"] = {"type": "array"}
    summary = schema_validity.report(items, tmp_path / "report.json", by_key)
    entry = summary["s"]
    counts = {key: entry[key] for key in ("schemas", "refused", "valid", "empty", "cut", "invalid", "approximated")}
    assert counts == {"schemas": 6, "refused": 1, "valid": 3, "empty": 2, "cut": 1, "invalid": 1, "approximated": 1}
    assert entry["refusals"] == {"a look-around": 1} and entry["approximations"] == {"oneOf as anyOf": 1}
    assert json.loads((tmp_path / "report.json").read_text()) == summary
    out = capsys.readouterr().out
    assert "3 valid (2 of them empty, {} or [])" in out
    assert "all sets: 3 valid, 2 of them empty ({} or []), 1 with content" in out


def test_the_real_schemas_run_recounted_without_a_model(tmp_path, capsys):
    """docs/structured-output.md's issue 43 table, from the stored answers: 265 valid, 80 of
    them the empty object."""
    summary = schema_validity.recount(ROOT / "research/results/issue43-schema-validity-r2", tmp_path / "r.json")
    assert sum(entry["valid"] for entry in summary.values()) == 265
    assert {name: entry["empty"] for name, entry in summary.items()} == {
        "github_hard": 10,
        "jsonschemastore": 24,
        "snowplow": 33,
        "washingtonpost": 13,
    }
    stored = json.loads((ROOT / "research/results/issue43-schema-validity-r2-recount.json").read_text())
    assert summary == stored
