"""The real specem-chat binary in a real terminal (tmux): type a question, see the answer."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.models

SESSION = "specem-chat-test"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def pane() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(text: str, seconds: float) -> str:
    deadline = time.time() + seconds
    while time.time() < deadline:
        screen = pane()
        if text in screen:
            return screen
        time.sleep(0.5)
    raise AssertionError(f"{text!r} did not appear; screen:\n{pane()}")


def wait_until_gone(seconds: float) -> None:
    deadline = time.time() + seconds
    while subprocess.run(["tmux", "has-session", "-t", SESSION], capture_output=True).returncode == 0:
        if time.time() > deadline:
            raise AssertionError(f"specem-chat did not quit; screen:\n{pane()}")
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_real_binary_answers_in_a_real_terminal(tmp_path):
    binary = Path(sys.executable).with_name("specem-chat")
    config = tmp_path / "models.toml"
    config.write_text(
        "[ensemble]\nmax_tokens = 24\ngreedy = true\n"
        '[[models]]\nname = "qwen"\ndemo = "qwen2.5-coder-0.5b"\n'
        '[[models]]\nname = "smol"\ndemo = "smollm2-135m"\n'
    )
    command = f"SPECEM_DATA_DIR={tmp_path}/data TERM=xterm-256color {binary} --config {config}"
    tmux("new-session", "-d", "-s", SESSION, "-x", "100", "-y", "30", command)
    try:
        wait_for("Message (Enter sends", 120)
        tmux("send-keys", "-t", SESSION, "What is the capital of France?", "Enter")
        wait_for("tok ·", 120)  # the answer's summary line appears when it completes
        screen = wait_for("Paris", 30)  # on the screen once the last repaint is captured
        assert "Weights" in screen and "wins" in screen
        tmux("send-keys", "-t", SESSION, "C-q")
        wait_until_gone(30)  # the app quits and its session ends
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
