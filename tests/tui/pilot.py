"""Driving specem-chat with Textual's pilot: waits on conditions, never fixed sleeps."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specem_tui.screens.chat import ChatScreen


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Chats are saved to, and exported in, a fresh folder."""
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


async def wait_until(pilot, condition: Callable[[], bool], seconds: float = 60) -> None:
    """Let the app run until ``condition()`` holds (checked every 20 ms)."""
    for _ in range(int(seconds * 50)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("timed out waiting for the app")


def chat_ready(app) -> bool:
    """The chat screen is mounted (its Header too: setting a title earlier races Textual) and
    the prompt has focus (keys typed earlier are lost)."""
    screen = app.screen
    return (
        isinstance(screen, ChatScreen)
        and bool(screen.query("HeaderTitle"))
        and app.focused is not None
        and (app.focused.id == "prompt")
    )


async def ask(pilot, app, text: str) -> None:
    """Type a question and send it; returns once the user turn and the answer turn exist."""
    await wait_until(pilot, lambda: chat_ready(app))
    before = len(app.screen.chat.turns)
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(app.screen.chat.turns) >= before + 2)


def answered(app) -> bool:
    screen = app.screen
    return isinstance(screen, ChatScreen) and screen.inflight is None and bool(screen.chat.turns)


async def open_recorded(pilot, app, chat_id: int, answers: int) -> None:
    """Open a chat recorded elsewhere (the server, ``specem run``) once the app is ready, and wait
    until its ``answers`` answers are drawn."""
    from specem_local.storage.history import History
    from specem_tui.widgets.answer import AnswerView

    await wait_until(pilot, lambda: chat_ready(app))
    app.screen.show_chat(History().load(chat_id))
    await wait_until(pilot, lambda: len(app.screen.query(AnswerView)) == answers)
    await pilot.pause()
