"""Is every structured answer valid? For each schema of the vendored sets (JSONSchemaBench's
folders, JSON-Schema-Test-Suite draft 2020-12; research/data/schemas/): refused up front (with
the reason), or answered by the ensemble and checked with ``jsonschema`` (formats included).
Resumable: schemas already in the output are skipped. A valid answer that is the empty object or
array (``{}``, ``[]``: valid only because the schema requires nothing, and of no use to a user)
is counted apart, as ``empty``, of the valid ones.

    python -m specem_research.schema_validity [--sets a,b] [--limit N] [--max-tokens N] [--think false] [--output DIR]
    python -m specem_research.schema_validity vendor JSONSCHEMABENCH_DATA   # write the JSONSchemaBench sets
    python -m specem_research.schema_validity recount RUN_DIR REPORT.json   # a run counted again, no model
"""

from __future__ import annotations

import argparse
import collections
import decimal
import json
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema

from specem_local.commands import config_from_args
from specem_local.engine import Ensemble
from specem_local.errors import SettingError, SpecemError

DATA = Path(__file__).parent / "data" / "schemas"
SETS = ("glaiveai2k", "github_easy", "test_suite_2020_12")  # issue 37
ALL_SETS = (*SETS, "github_hard", "jsonschemastore", "snowplow", "washingtonpost")
REAL_SETS = ("github_hard", "jsonschemastore", "snowplow", "washingtonpost")  # issue 43: the schemas people have
FOLDERS = {  # JSONSchemaBench's folder of each vendored set
    "glaiveai2k": "Glaiveai2K",
    "github_easy": "Github_easy",
    "github_hard": "Github_hard",
    "jsonschemastore": "JsonSchemaStore",
    "snowplow": "Snowplow",
    "washingtonpost": "WashingtonPost",
}
PER_SET = 100
PROMPT = "Write one realistic example of this data."


def vendor(data: Path, names: tuple[str, ...] = REAL_SETS) -> None:
    """Write ``PER_SET`` schemas of each JSONSchemaBench folder under ``data`` (its ``data/``
    folder) as a vendored set: taken at an even stride from the sorted file names, so nothing
    is chosen by hand. A file that is not JSON (none in the sets vendored) is skipped."""
    for name in names:
        files = sorted((data / FOLDERS[name]).glob("*.json"))
        picked = [files[i * len(files) // PER_SET] for i in range(min(PER_SET, len(files)))]
        items = [{"id": f.stem, "schema": json.loads(f.read_text("utf-8"))} for f in picked]
        lines = [json.dumps(item, ensure_ascii=False) for item in items]
        (DATA / f"{name}.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
        print(f"{name}: {len(lines)} of {len(files)} schemas")


def schemas(limit: int | None, sets: tuple[str, ...] = SETS) -> list[tuple[str, str, dict[str, Any]]]:
    """(set, id, schema) of every vendored schema of ``sets``, the first ``limit`` of each."""
    out = []
    for name in sets:
        lines = (DATA / f"{name}.jsonl").read_text("utf-8").splitlines()[:limit]
        out += [(name, item["id"], item["schema"]) for item in map(json.loads, lines)]
    return out


def check(schema: dict[str, Any], text: str) -> str:
    """ "valid", or what is wrong with the answer (not JSON, or the first validation error)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        return f"not JSON: {error}"
    kind = jsonschema.validators.validator_for(schema)  # the schema's draft, and that draft's formats
    validator = kind(schema, format_checker=kind.FORMAT_CHECKER)
    try:
        error = next((e for e in validator.iter_errors(value) if not _float_multiple(e)), None)
    except Exception as failure:
        return f"unchecked: jsonschema cannot check it ({type(failure).__name__}: {str(failure)[:80]})"
    return "valid" if error is None else f"invalid: {error.message[:200]}"


def empty(text: str) -> bool:
    """The answer is the empty object or the empty array (whitespace aside)."""
    try:
        return json.loads(text) in ({}, [])
    except (ValueError, RecursionError):
        return False


def _float_multiple(error: jsonschema.ValidationError) -> bool:
    """A ``multipleOf`` error that is only binary floating point (10000.89 of 0.01): jsonschema
    divides floats; in decimal the number is a multiple."""
    if error.validator != "multipleOf" or not isinstance(error.instance, (int, float)):
        return False
    return decimal.Decimal(repr(error.instance)) % decimal.Decimal(repr(error.validator_value)) == 0


def run(
    ensemble: Ensemble, items: list[tuple[str, str, dict[str, Any]]], output: Path, options: dict[str, Any]
) -> None:
    """Answer each schema not answered yet (``options``: ``max_tokens``, ``think``, as given)."""
    output.mkdir(parents=True, exist_ok=True)
    done_path = output / "items.jsonl"
    lines = done_path.read_text().splitlines() if done_path.exists() else []
    done = {(r["set"], r["id"]) for r in map(json.loads, lines)}
    with done_path.open("a", encoding="utf-8") as out:
        for set_name, item_id, schema in items:
            if (set_name, item_id) in done:
                continue
            started = time.perf_counter()
            record: dict[str, Any] = {"set": set_name, "id": item_id}
            try:
                request = ensemble.prepare(PROMPT, schema=schema, greedy=True, **options)
                final = ensemble.stream(request).final()
            except SettingError as error:
                record.update(outcome="refused", why=str(error))
            except SpecemError as error:  # a schema longer than the models' context, say
                record.update(outcome="not answered", why=str(error))
            else:
                record["notes"] = list(request.notes)  # what was served only approximately
                outcome = check(schema, final.text) if final.finish_reason == "eos" else f"cut ({final.finish_reason})"
                record.update(outcome=outcome, text=final.text, tokens=final.tokens)
                record.update(reasoning_tokens=final.reasoning_tokens, switched=final.switched)
            record["seconds"] = round(time.perf_counter() - started, 2)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            print(f"{set_name}/{item_id}: {record['outcome'][:100]}", flush=True)
    report(done_path, output / "report.json", {(name, key): schema for name, key, schema in items})


def report(items_path: Path, report_path: Path, by_key: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """Per set: schemas, refused (and the reasons), answered, valid (and of those, ``empty``: the
    empty object or array), cut, invalid. Whole answers are checked again, so a run is reported
    with this version's checks."""
    summary: dict[str, Any] = {}
    for record in map(json.loads, items_path.read_text().splitlines()):
        schema = by_key.get((record["set"], record["id"]))
        if schema is not None and "text" in record and not record["outcome"].startswith("cut"):
            record["outcome"] = check(schema, record["text"])
        entry = summary.setdefault(
            record["set"],
            {
                "schemas": 0,
                "refused": 0,
                "not_answered": 0,
                "valid": 0,
                "empty": 0,
                "cut": 0,
                "invalid": 0,
                "unchecked": 0,
                "approximated": 0,
                "refusals": {},
                "approximations": {},
            },
        )
        entry["schemas"] += 1
        outcome = record["outcome"]
        if record.get("notes"):
            entry["approximated"] += 1
            for note in record["notes"]:
                short = note.split(". ")[0][:80]
                entry["approximations"][short] = entry["approximations"].get(short, 0) + 1
        kind = outcome.split(" ")[0].rstrip(":")
        if kind == "refused":
            entry["refused"] += 1
            reason = record["why"].split("cannot be enforced: ")[-1][:80]
            entry["refusals"][reason] = entry["refusals"].get(reason, 0) + 1
        elif kind == "valid":
            entry["valid"] += 1
            entry["empty"] += empty(record["text"])
        elif kind == "cut":
            entry["cut"] += 1
        elif kind == "not":
            entry["not_answered"] += 1
        elif kind == "unchecked":
            entry["unchecked"] += 1
        else:
            entry["invalid"] += 1
    report_path.write_text(json.dumps(summary, indent=2))
    for name, entry in summary.items():
        answered = entry["schemas"] - entry["refused"] - entry["not_answered"]
        print(
            f"{name}: {entry['schemas']} schemas, {entry['refused']} refused, {entry['not_answered']} longer than "
            f"the context, {answered} answered ({entry['approximated']} approximated): "
            f"{entry['valid']} valid ({entry['empty']} of them empty, {{}} or []), "
            f"{entry['cut']} cut at max_tokens, {entry['invalid']} invalid, "
            f"{entry['unchecked']} jsonschema could not check"
        )
        for reason, count in collections.Counter(entry["refusals"]).most_common(5):
            print(f"    refused {count}: {reason}")
    valid, empties = (sum(entry[key] for entry in summary.values()) for key in ("valid", "empty"))
    print(f"all sets: {valid} valid, {empties} of them empty ({{}} or []), {valid - empties} with content")
    return summary


def recount(run: Path, report_path: Path) -> dict[str, Any]:
    """A finished run's ``items.jsonl`` counted again with this version's checks against the
    vendored schemas (every set), written to ``report_path``: no model is loaded."""
    by_key = {(name, key): schema for name, key, schema in schemas(None, ALL_SETS)}
    return report(run / "items.jsonl", report_path, by_key)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specem_research.schema_validity", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--limit", type=int, help="the first N schemas of each set")
    parser.add_argument("--max-tokens", type=int, help="default: the ensemble's (512)")
    parser.add_argument("--think", choices=("true", "false"), help="default: the ensemble's (think first)")
    parser.add_argument("--output", default="research/results/schema-validity", help="folder (resumable)")
    parser.add_argument("--config", help="models.toml (default: the usual lookup)")
    parser.add_argument("--ensemble", help="a built-in ensemble")
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(ALL_SETS)}")
    if sys.argv[1:2] == ["vendor"]:
        vendor(Path(sys.argv[2]))
        return
    if sys.argv[1:2] == ["recount"]:
        recount(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    args = parser.parse_args()
    sets = tuple(args.sets.split(","))
    with Ensemble.from_config(config_from_args(args)) as ensemble:
        options = {"max_tokens": args.max_tokens} if args.max_tokens else {}
        if args.think:
            options["think"] = args.think == "true"
        run(ensemble, schemas(args.limit, sets), Path(args.output), options)


if __name__ == "__main__":
    main()
