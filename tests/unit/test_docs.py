"""Every ``specem`` command in the README and docs parses as written (a renamed or removed
flag fails here), every tasks file and run folder they read is in the repository, and every
``./scripts/`` command they name exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from specem_local.commands.cli import build_parser
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "research" / "quality-log.md"]
CODE_BLOCK = re.compile(r"```[a-z]*\n(.*?)```", re.DOTALL)


def commands(path: Path) -> list[str]:
    found = []
    for block in CODE_BLOCK.findall(path.read_text("utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith(("specem ", "./scripts/")):
                found.append(line)
    return found


ALL = [(path.relative_to(ROOT).as_posix(), line) for path in DOCS for line in commands(path)]


def test_the_docs_have_commands_to_check():
    assert len(ALL) > 20


@pytest.mark.parametrize(("doc", "line"), ALL)
def test_a_documented_command_parses_and_its_inputs_exist(doc, line):
    words = shlex.split(line, comments=True)
    for stop in ("|", ">"):
        words = words[: words.index(stop)] if stop in words else words
    if words[0].startswith("./scripts/"):
        assert (ROOT / words[0]).is_file()
        return
    args = build_parser().parse_args(words[1:])  # exits (fails the test) on a flag that does not exist
    inputs = {
        "eval": lambda: [args.tasks],
        "eval-pool": lambda: list(args.runs),
        "eval-adaptive": lambda: [voter.rpartition(":")[0] for voter in args.voter],
    }.get(args.command, list)()
    for name in inputs:
        assert (ROOT / name).exists(), f"{doc}: {name} is not in the repository"


def test_every_setting_is_in_the_configuration_doc():
    from specem_local.setting_fields import describe
    from specem_local.settings import EnsembleSettings, LoadSettings

    text = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    missing = [
        item.name for cls in (EnsembleSettings, LoadSettings) for item in describe(cls) if f"`{item.name}`" not in text
    ]
    assert missing == []
