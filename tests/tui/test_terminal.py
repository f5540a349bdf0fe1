"""The real specem-chat binary in a real terminal (tmux): type a question, see the answer."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import poll_until

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


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_quitting_mid_answer_keeps_the_text_and_chat_id_resumes_it(tmp_path):
    """Ctrl+Q while an answer streams: the history keeps what was written, marked stopped; then
    ``specem-chat --chat ID`` opens that chat with the text on the screen."""
    from specem_local.storage.history import History

    binary = Path(sys.executable).with_name("specem-chat")
    config = tmp_path / "models.toml"
    config.write_text(
        '[ensemble]\nmax_tokens = 400\nignore_eos = true\n[[models]]\nname = "qwen"\ndemo = "qwen2.5-coder-0.5b"\n'
        '[[models]]\nname = "smol"\ndemo = "smollm2-135m"\n'
    )
    history = History(tmp_path / "data" / "specem.db", chat_files=tmp_path / "none")
    start = f"SPECEM_DATA_DIR={tmp_path}/data TERM=xterm-256color {binary} --config {config}"

    def written() -> str:
        chats = history.chats()
        return history.load(chats[0].id).turns[-1].content if chats else ""

    tmux("new-session", "-d", "-s", SESSION, "-x", "100", "-y", "30", start)
    try:
        wait_for("Message (Enter sends", 120)
        tmux("send-keys", "-t", SESSION, "Write a long story about a lighthouse keeper.", "Enter")
        poll_until(lambda: len(written()) > 40, 120, "no text was recorded while the answer streamed", every=0.2)
        tmux("send-keys", "-t", SESSION, "C-q")
        wait_until_gone(30)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    [summary] = history.chats()
    answer = history.load(summary.id).turns[-1]
    assert answer.role == "assistant" and len(answer.content) > 40
    ended = answer.final.finish_reason if answer.final is not None else answer.error
    assert ended in ("cancelled", "the app was closed while it was being written"), ended  # marked, not left open
    tmux("new-session", "-d", "-s", SESSION, "-x", "100", "-y", "30", f"{start} --chat {summary.id}")
    try:
        wait_for("Message (Enter sends", 120)
        # the end of the answer is kept in sight once its Markdown is drawn (a frame or more later)
        ending = [w.strip(".,;:!?'\"") for w in answer.content.split()[-12:]]
        word = max((w for w in ending if w.isalpha()), key=len)
        screen = wait_for(word, 30)
        assert "lighthouse keeper" in screen, screen
        tmux("send-keys", "-t", SESSION, "C-q")
        wait_until_gone(30)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_pick_a_candidate_and_go_on_from_it_in_a_real_terminal(tmp_path):
    """Issue 27 end to end: the real binary, real models, keys only. Tab to the answer, Enter
    opens the inspector, Down highlights the losing candidate, g goes on from it."""
    from specem_local.storage.history import History

    binary = Path(sys.executable).with_name("specem-chat")
    config = tmp_path / "models.toml"
    config.write_text(
        "[ensemble]\nmax_tokens = 24\ngreedy = true\nmodel_exit = false\nsegment_tokens = 6\n"
        '[[models]]\nname = "qwen"\ndemo = "qwen2.5-coder-0.5b"\n'
        '[[models]]\nname = "smol"\ndemo = "smollm2-135m"\n'
    )
    history = History(tmp_path / "data" / "specem.db", chat_files=tmp_path / "none")
    command = f"SPECEM_DATA_DIR={tmp_path}/data TERM=xterm-256color {binary} --config {config}"
    tmux("new-session", "-d", "-s", SESSION, "-x", "100", "-y", "30", command)
    try:
        wait_for("Message (Enter sends", 120)
        tmux("send-keys", "-t", SESSION, "Name a colour of the rainbow.", "Enter")
        wait_for("tok ·", 120)
        tmux("send-keys", "-t", SESSION, "Tab")
        time.sleep(0.5)
        tmux("send-keys", "-t", SESSION, "Enter")
        wait_for("Round 1 of", 30)
        tmux("send-keys", "-t", SESSION, "Down")
        time.sleep(0.5)
        tmux("send-keys", "-t", SESSION, "g")
        wait_for("Ensemble (from your pick) · 2/2", 60)
        poll_until(
            lambda: history.load(history.chats()[0].id).turns[-1].kind == "continued", 120, "not kept", every=0.5
        )
        tmux("send-keys", "-t", SESSION, "C-q")
        wait_until_gone(30)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    answer = history.load(history.chats()[0].id).turns[-1]
    [first] = answer.alternatives
    picked = answer.rounds[0]
    assert picked.decision == "picked" and answer.content.startswith(picked.text)
    assert picked.author != first.rounds[0].author or picked.text != first.rounds[0].text


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_escape_sequences_in_a_stored_chat_reach_neither_the_clipboard_nor_the_title(tmp_path):
    """Issue 36: a chat whose question, answer and title hold OSC 52 (the clipboard) and OSC 0
    (the title), as `specem run`, a serve client or an imported file can record them, opened in
    a real terminal that honours both (tmux, ``set-clipboard on``): nothing is set. The same
    sequences printed by a shell first show that this terminal would have taken them."""
    from specem_local.storage.chats import Chat, Turn
    from specem_local.storage.history import History

    socket = ["-L", "specem-osc-test"]

    def server(*args: str) -> str:
        return subprocess.run(["tmux", *socket, *args], capture_output=True, text=True).stdout.strip()

    def buffers() -> str:
        return server("list-buffers", "-F", "#{buffer_sample}")

    binary = Path(sys.executable).with_name("specem-chat")
    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nname = "smol"\ndemo = "smollm2-135m"\n')
    history = History(tmp_path / "data" / "specem.db", chat_files=tmp_path / "none")
    osc = "\x1b]52;c;UFdORUQ=\x07\x1b]0;owned\x07"  # "PWNED" to the clipboard, "owned" as the title
    chat = Chat(title=f"hostile{osc}")
    history.add(chat, Turn("user", f"question{osc}"))
    history.add(chat, Turn("assistant", f"answer{osc}", error=f"cut{osc}"))
    try:
        shell = "sleep 1; printf '\\033]52;c;c2hlbGw=\\007\\033]0;shell-title\\007'; sleep 60"
        server("new-session", "-d", "-s", "shell", "-x", "100", "-y", "30", shell)
        server("set-option", "-g", "set-clipboard", "on")
        poll_until(lambda: buffers() == "shell", 10, "this tmux does not take OSC 52 from a shell", every=0.2)
        assert server("display-message", "-p", "-t", "shell", "#{pane_title}") == "shell-title"
        server("delete-buffer")
        start = f"SPECEM_DATA_DIR={tmp_path}/data TERM=xterm-256color {binary} --config {config} --chat {chat.id}"
        server("new-session", "-d", "-s", "app", "-x", "100", "-y", "30", start)
        poll_until(lambda: "hostile" in server("capture-pane", "-p", "-t", "app"), 120, "the chat was not shown")
        time.sleep(1)  # every repaint of the chat has been written
        assert buffers() == ""
        assert server("display-message", "-p", "-t", "app", "#{pane_title}") != "owned"
        assert "question\\x1b]52;c;UFdORUQ=\\x07" in server("capture-pane", "-p", "-t", "app")
    finally:
        server("kill-server")
