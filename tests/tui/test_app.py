"""specem-chat driven headless by Textual's pilot, against the real demo ensemble."""

from __future__ import annotations

from pathlib import Path

import pytest

from specem_local.engine.learned import calibrate
from specem_local.storage.history import History
from specem_tui.app import SpecemChatApp
from specem_tui.screens.chat import ChatScreen
from specem_tui.screens.history import HistoryScreen
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.screens.settings import SettingsScreen
from specem_tui.widgets.answer import AnswerView, SegmentText
from specem_tui.widgets.weights import WeightsPanel
from tests.conftest import demo_config
from tests.tui.pilot import answered, ask, chat_ready, data_dir, wait_until

__all__ = ["data_dir"]  # the autouse fixture

pytestmark = pytest.mark.models


async def test_answer_authors_weights_inspector_and_saved_chat():
    app = SpecemChatApp(demo_config(max_tokens=40, greedy=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        await ask(pilot, app, "Natalia sold 48 clips in April and half as many in May. How many in total?")
        await wait_until(pilot, lambda: answered(app))
        screen = app.screen
        turn = screen.chat.turns[-1]
        assert turn.role == "assistant" and turn.final.finish_reason in ("eos", "length")
        assert turn.rounds and all(r.author in app.ensemble.model_names for r in turn.rounds)
        assert turn.content == "".join(r.text for r in turn.rounds)
        panel = screen.query_one(WeightsPanel)
        assert sum(panel.weights.values()) == pytest.approx(1.0)
        assert sum(panel.wins.values()) == len(turn.rounds)

        view = screen.query(AnswerView).last()
        view.focus()
        await pilot.press("right", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
        inspector = app.screen
        voted = next(i for i, r in enumerate(turn.rounds) if r.decision == "vote")
        inspector.index = voted
        inspector.show_round()
        assert inspector.query_one("DataTable").row_count == 3  # K candidates
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)

        # a mouse click on the first segment opens the inspector at round 1
        view.focus()
        view.show_markdown = False
        await wait_until(pilot, lambda: view.query_one(SegmentText).display and view.query_one(SegmentText).size.width)
        await pilot.click(SegmentText, offset=(1, 0))
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
        assert app.screen.index == 0
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)

        await pilot.press("ctrl+e")  # export to Markdown in the current folder
        exported = Path.cwd() / f"specem-chat-{screen.chat.id}.md"
        await wait_until(pilot, exported.exists, 5)
        assert exported.read_text().startswith("# Natalia sold") and "## Ensemble" in exported.read_text()

    saved = History().chats()
    assert len(saved) == 1 and History().load(saved[0].id).turns[-1].content == turn.content

    # the chat reloads in a new app, through the history screen
    app = SpecemChatApp(demo_config(max_tokens=40, greedy=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), 5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)
        assert app.screen.chat.id == saved[0].id
        assert len(app.screen.query(AnswerView)) == 1


async def test_the_weights_panel_shows_a_calibration_and_ctrl_r_resets_it():
    app = SpecemChatApp(demo_config(max_tokens=16, greedy=True, fresh_weights=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        panel = app.screen.query_one(WeightsPanel)
        assert panel.border_subtitle == "from the built-in calibration (20 items)"
        ensemble = app.ensemble
        wrong = {"qwen2.5-coder-0.5b": 16, "gemma-3-270m": 19, "smollm2-135m": 20}
        calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, wrong, 20)
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: panel.border_subtitle == "from calibrated on 20 items")
        assert panel.weights["qwen2.5-coder-0.5b"] > 0.85
        await wait_until(pilot, lambda: answered(app))
        await pilot.press("ctrl+r", "ctrl+r")  # back to what the trio ships (the first press asks)
        await wait_until(pilot, lambda: panel.border_subtitle == "from the built-in calibration (20 items)", 5)
        assert panel.weights["qwen2.5-coder-0.5b"] == pytest.approx(0.932, abs=0.001)


async def test_escape_stops_a_long_answer_and_keeps_it():
    app = SpecemChatApp(demo_config(max_tokens=400))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        await ask(pilot, app, "Write a very long story about a dragon and a knight.")
        screen = app.screen
        await wait_until(pilot, lambda: screen.inflight is not None and len(screen.inflight.view.turn.rounds) >= 1)
        await pilot.press("escape")
        await wait_until(pilot, lambda: answered(app), 30)
        turn = screen.chat.turns[-1]
        assert turn.stopped and turn.content and turn.final.tokens < 400
    assert History().load(History().chats()[0].id).turns[-1].stopped


async def test_settings_apply_to_the_next_answer():
    app = SpecemChatApp(demo_config(max_tokens=12, greedy=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), 5)
        settings = app.screen
        settings.query_one("#model-1").value = False  # gemma sits out
        settings.query_one("#model-2").value = False  # smollm2 sits out
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)
        await ask(pilot, app, "Say hello.")
        await wait_until(pilot, lambda: answered(app))
        final = app.screen.chat.turns[-1].final
        assert final.plain_generation and set(final.wins) == {"qwen2.5-coder-0.5b"}


async def test_a_model_that_fails_to_load_is_reported_and_the_rest_run(tmp_path):
    from dataclasses import replace

    from specem_local.models.config import ModelSpec

    bad = tmp_path / "broken.gguf"
    bad.write_text("not a model")
    config = demo_config("smollm2-135m", max_tokens=8)
    config = replace(config, models=(*config.models, ModelSpec(name="broken", path=str(bad))))
    app = SpecemChatApp(config)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        assert [f.model for f in app.ensemble.load_failures] == ["broken"]
        assert app.ensemble.model_names == ["smollm2-135m"]
        await pilot.pause(0.2)  # let the Header's title watcher run before exit (it raced teardown once in CI)
