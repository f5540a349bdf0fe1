"""Issue 25: files we read are bounded and checked, and their messages say what is true,
through the real ``specem`` command (no model is loaded). Checked against 38f6557: a FIFO,
``/dev/zero`` or a symlink loop as a model path said "no file at"; a 6,000-character path was
an ENAMETOOLONG traceback; ``--config`` naming a folder said "does not exist" and ``--config
<(...)`` could not be read; a folder as the tasks file said "no such tasks file"."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from specem_local.errors import SpecemError
from specem_local.events import FinalEvent
from specem_local.storage.weights import StoredWeights, WeightStore
from tests.conftest import write_gguf
from tests.doors.test_files_we_write import specem


def models_toml(folder: Path, path: str) -> Path:
    config = folder / "models.toml"
    config.write_text(f'[[models]]\nname = "m"\npath = "{path}"\n')
    return config


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: os.mkfifo(p), "is a named pipe (FIFO), not a file"),
        (lambda p: p.symlink_to(p), "is a symlink loop"),
        (lambda p: None, "is no such file"),
    ],
)
def test_a_model_path_that_is_not_a_file_says_what_it_is(tmp_path, make, words):
    make(tmp_path / "m.gguf")
    config = models_toml(tmp_path, "m.gguf")
    result = specem(tmp_path, "run", "hi", "--config", str(config))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[-300:]
    assert f"model 'm': {tmp_path / 'm.gguf'} {words}" in result.stderr
    listed = specem(tmp_path, "models", "verify", "--config", str(config))
    assert listed.returncode == 1 and words in listed.stdout + listed.stderr


def test_a_device_and_a_name_too_long_are_named(tmp_path):
    result = specem(tmp_path, "run", "hi", "--config", str(models_toml(tmp_path, "/dev/zero")))
    assert result.returncode == 1 and "/dev/zero is a device, not a file" in result.stderr
    long = "a/" * 3000 + "m.gguf"
    result = specem(tmp_path, "run", "hi", "--config", str(models_toml(tmp_path, long)))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "a name too long for this system (" in result.stderr


def test_config_names_what_it_points_at_and_reads_a_pipe(tmp_path):
    result = specem(tmp_path, "models", "list", "--config", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.strip() == f"specem: error: --config points at {tmp_path}: a folder, not a file"
    pipe = tmp_path / "config-pipe"
    os.mkfifo(pipe)

    def feed() -> None:
        with open(pipe, "w") as stream:
            stream.write('[[models]]\nname = "g"\ndemo = "gemma-3-270m"\n')

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    listed = specem(tmp_path, "models", "list", "--config", str(pipe))
    writer.join(5)
    assert not writer.is_alive(), listed.stderr  # specem opened the pipe and read it
    assert listed.returncode == 0 and "demo:gemma-3-270m" in listed.stdout, listed.stderr


def test_a_folder_as_the_tasks_file_is_named(tmp_path):
    result = specem(tmp_path, "eval", str(tmp_path), "--limit", "1")
    assert result.returncode == 1
    assert result.stderr.strip() == f"specem: error: tasks file {tmp_path}: a folder, not a file"


GOOD = '{"id": "a", "question": "1+1?", "answer": "2"}'


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1,2,3]", 'expected an object {"question": ..., "answer": ...}, got list'),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply to be a task"),
        ("{not json", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
        ('{"question": "q", "answer": {"n": 2}}', '"answer" must be a number or a string'),
        ('{"question": "q", "answer": "two"}', "\"answer\" 'two' is not a number"),
        ('{"question": "q", "answer": "nan"}', "\"answer\" 'nan' is not a number"),
        ('{"question": "q", "answer": "A", "choices": []}', '"choices" must be a list of 2 to 10 strings'),
        ('{"question": "q", "answer": "Z", "choices": ["x", "y"]}', "\"answer\" 'Z' must be one of the letters A, B"),
        ('{"answer": "2"}', '"question" must be a non-empty string'),
    ],
)
def test_a_task_that_cannot_be_scored_is_refused_with_its_line(tmp_path, line, message):
    """Checked against 38f6557: AttributeError, RecursionError tracebacks, or the item accepted
    and counted ("calibrated on 1 items")."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(f"{GOOD}\n\n{line}\n")
    for command in ("eval", "calibrate"):
        result = specem(tmp_path, command, str(tasks), "--ensemble", "demo")
        assert result.returncode == 1, (command, result.stderr[-300:])
        assert result.stderr.startswith(f"specem: error: {tasks}:3: {message}") and result.stderr.count("\n") == 1


def test_bytes_that_are_not_utf8_name_their_line(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(GOOD.encode() + b"\n" + b'{"question": "\xff", "answer": "1"}\n')
    result = specem(tmp_path, "eval", str(tasks))
    assert result.returncode == 1
    assert result.stderr.strip() == f"specem: error: tasks file {tasks}:2: not UTF-8 text (byte 61); save it as UTF-8"


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_a_limit_below_one_is_a_usage_error(tmp_path, command):
    result = specem(tmp_path, command, "tasks.jsonl", "--limit", "-1")
    assert result.returncode == 2 and "--limit" in result.stderr and "Traceback" not in result.stderr


def test_models_add_refuses_what_would_break_the_file(tmp_path):
    """Checked against 38f6557: ``demo:nope`` said "updated" and broke every later command;
    these names were accepted; a truncated GGUF was added; a read-only models.toml was a
    traceback (or, as root, quietly replaced)."""
    config = tmp_path / "models.toml"
    config.write_text('# mine\n[[models]]\nname = "a"\ndemo = "smollm2-135m"\n')
    before = config.read_text()

    def add(name: str, source: str) -> subprocess.CompletedProcess[str]:
        return specem(tmp_path, "models", "add", name, source, "--config", str(config))

    result = add("z4", "demo:nope")
    assert result.returncode == 1 and "unknown demo model 'nope'; the demo models are" in result.stderr
    for name, problem in [
        ("", "is empty"),
        (" ", "is empty"),
        (" x", "starts or ends with a space"),
        ("x\ny", "holds a control character"),
        ("\x1b[31mred", "holds a control character"),
        ("n" * 5000, "is 5,000 characters long (at most 64)"),
    ]:
        result = add(name, "demo:gemma-3-270m")
        assert result.returncode == 1 and problem in result.stderr and "\x1b" not in result.stderr, name[:9]
        assert result.stderr.count("\n") == 1
    truncated = tmp_path / "cut.gguf"
    write_gguf(truncated, {"general.architecture": "llama"}, [("w", (64, 64), 0)])
    truncated.write_bytes(truncated.read_bytes()[:-100])
    result = add("cut", str(truncated))
    assert result.returncode == 1 and "truncated GGUF file" in result.stderr and "(not added)" in result.stderr
    assert config.read_text() == before
    assert specem(tmp_path, "models", "list", "--config", str(config)).returncode == 0
    config.chmod(0o444)  # as root too (CI runs as root): a file no one may write is left alone
    result = add("g", "demo:gemma-3-270m")
    assert result.returncode == 1 and "it is read-only" in result.stderr and config.read_text() == before
    config.chmod(0o644)
    assert add("g", "demo:gemma-3-270m").returncode == 0 and 'name = "g"' in config.read_text()


def test_a_negative_seed_in_models_toml_fails_models_list_too(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('[ensemble]\nseed = -1\n[[models]]\nname = "a"\ndemo = "smollm2-135m"\n')
    result = specem(tmp_path, "models", "list", "--config", str(config))
    assert result.returncode == 2 and "seed must be in [0, 2^64); got -1" in result.stderr


def test_nan_and_inf_never_enter_the_weights_nor_the_json(tmp_path):
    """Checked against 38f6557 (before issue 24's settings checks): ``--learning-rate nan
    --carry-weights`` stored NaN weights and ``weights list --json`` printed a bare NaN."""
    result = specem(tmp_path, "run", "hi", "--learning-rate", "nan", "--carry-weights")
    assert result.returncode == 2 and "learning_rate must be a finite number" in result.stderr
    store = WeightStore(tmp_path / "specem.db")
    bad = StoredWeights("a + b", {"a": math.nan, "b": 0.0}, {"a": 0.0, "b": 0.0}, 1, 0, 0.0)
    with pytest.raises(SpecemError, match="not finite"):
        store.update("a + b", lambda _old: bad)
    assert store.ensemble_keys() == []
    with sqlite3.connect(tmp_path / "specem.db") as db:  # what an older version may have written
        db.execute("INSERT INTO weights VALUES ('a + b', '{\"a\": NaN, \"b\": 0}', '{}', 1, 0, 0, 0, '')")
    with pytest.raises(SpecemError, match="damaged in the database; forget them with: specem weights reset"):
        store.get("a + b")
    listed = specem(tmp_path, "weights", "list")
    assert listed.returncode == 0 and "a + b: damaged in the database" in listed.stdout
    assert json.loads(specem(tmp_path, "weights", "list", "--json").stdout) == []
    assert specem(tmp_path, "weights", "reset", "--all").returncode == 0 and store.ensemble_keys() == []
    final = FinalEvent("x", "eos", 1, 1, math.inf, None, {"a": 1}, 1.0, {"a": math.nan, "b": 1.0}, False)
    assert json.loads(json.dumps(final.to_dict(), allow_nan=False))["weights"] == {"a": None, "b": 1.0}
