"""Two specem processes editing one models.toml at once (``models add`` from a script's loop, or
in two terminals) lose no edit: the second waits for the first and reads what it wrote; one that
waits too long says so in a line, the file as it was. Real processes, real file locks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from specem_local.dirs import file_lock
from specem_local.errors import SpecemError
from specem_local.models import models_file
from specem_local.models.config import load_config
from specem_local.models.models_file import add_model, remove_model
from tests.conftest import ROOT

START = '[[models]]\nname = "first"\npath = "/models/first.gguf"\n'
ADD = "from pathlib import Path; from specem_local.models.models_file import add_model; " \
      "add_model(Path({path!r}), {name!r}, {{'path': '/models/{name}.gguf'}})"  # fmt: skip


def adding(path: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", ADD.format(path=str(path), name=name)], cwd=ROOT)


def names(path: Path) -> list[str]:
    return [spec.name for spec in load_config(path).models]


def test_an_edit_waits_while_another_process_holds_the_file_then_keeps_both(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text(START)
    with file_lock(tmp_path / ".models.toml.lock", "models.toml", 1.0):  # as another specem's edit would
        other = adding(config, "second")
        time.sleep(1.5)  # long enough for the process to start and reach the file
        assert other.poll() is None and names(config) == ["first"]  # waiting, the file untouched
    assert other.wait(timeout=60) == 0
    assert names(config) == ["first", "second"]


def test_many_processes_adding_at_once_all_land(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text(START)
    started = [adding(config, f"m{number}") for number in range(6)]
    assert [process.wait(timeout=120) for process in started] == [0] * 6
    assert sorted(names(config)) == sorted(["first", *(f"m{number}" for number in range(6))])


@pytest.mark.parametrize("edit", ["add", "remove"])
def test_an_edit_that_waits_too_long_says_so_and_leaves_the_file(tmp_path, monkeypatch, edit):
    config = tmp_path / "models.toml"
    config.write_text(START)
    monkeypatch.setattr(models_file, "EDIT_WAIT", 0.3)
    held = file_lock(tmp_path / ".models.toml.lock", "models.toml", 1.0)
    with held, pytest.raises(SpecemError) as caught:
        if edit == "add":
            add_model(config, "second", {"path": "/models/second.gguf"})
        else:
            remove_model(config, "first")
    assert str(caught.value) == (f"another specem is changing {config} (it holds {tmp_path / '.models.toml.lock'}); "
                                 "try again when it is done")  # fmt: skip
    assert config.read_text() == START
    add_model(config, "second", {"path": "/models/second.gguf"})  # released: the next edit goes through
    assert remove_model(config, "first")[1] == {"path": "/models/first.gguf"} and names(config) == ["second"]


def test_a_lock_that_cannot_be_made_is_a_line(tmp_path):
    missing = r"^cannot open .*missing.*: No such file or directory$"
    with pytest.raises(SpecemError, match=missing), file_lock(tmp_path / "missing" / "x.lock", "x", 0.1):
        pass
