"""Every figure in the docs comes from a file in the repository: every path a doc cites
(``research/results/...``, a script, a test, a module) exists, and every ``python -m
specem_research.NAME`` it gives is a module of the harness."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "research" / "quality-log.md"]
PATH = re.compile(r"(?<![\w./-])((?:research|tests|specem_local|scripts|docs)/[\w./+{},-]*[\w}])")
PLACEHOLDER = re.compile(r"[A-Z]{3,}")  # scripts/mutation-reports/MODULE.txt: a file per module


def expanded(path: str) -> list[str]:
    """``a/run-{x,y}`` is ``a/run-x`` and ``a/run-y``."""
    match = re.search(r"\{([^{}]*)\}", path)
    if match is None:
        return [path]
    return [
        p for part in match.group(1).split(",") for p in expanded(path[: match.start()] + part + path[match.end() :])
    ]


def cited(doc: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(doc.read_text("utf-8").splitlines(), start=1):
        for match in PATH.finditer(line):
            found += [(number, path.rstrip(".,")) for path in expanded(match.group(1))]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_path_a_doc_cites_exists(doc):
    missing = [
        f"{doc.name}:{n}: {path}"
        for n, path in cited(doc)
        if not PLACEHOLDER.search(path) and not (ROOT / path).exists()
    ]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_research_command_a_doc_gives_is_a_module(doc):
    names = set(re.findall(r"python -m specem_research\.(\w+)", doc.read_text("utf-8")))
    assert [name for name in names if importlib.util.find_spec(f"specem_research.{name}") is None] == []
