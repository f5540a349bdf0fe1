"""Issue 25: files we read are bounded and checked, and their messages say what is true,
through the real ``specem`` command (no model is loaded). Checked against 38f6557: a FIFO,
``/dev/zero`` or a symlink loop as a model path said "no file at"; a 6,000-character path was
an ENAMETOOLONG traceback; ``--config`` naming a folder said "does not exist" and ``--config
<(...)`` could not be read; a folder as the tasks file said "no such tasks file"."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

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
    assert listed.returncode == 0 and "demo:gemma-3-270m" in listed.stdout, listed.stderr


def test_a_folder_as_the_tasks_file_is_named(tmp_path):
    result = specem(tmp_path, "eval", str(tmp_path), "--limit", "1")
    assert result.returncode == 1
    assert result.stderr.strip() == f"specem: error: tasks file {tmp_path}: a folder, not a file"
