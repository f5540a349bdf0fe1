"""The chat app as a new user and a hostile tester met it (issue 17, parts 2 and 3), on fake
models: history search and delete, partial answers saved while streaming, settings kept,
keys that work from the input box, and no markup eaten from messages."""

from __future__ import annotations

import time

from specem_local.storage import history as history_module
from specem_local.storage.chats import Chat, Turn
from specem_local.storage.history import History
from specem_tui.screens.chat import ChatScreen
from specem_tui.screens.history import HistoryScreen
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.screens.settings import SettingsScreen
from specem_tui.widgets.answer import AnswerView, SegmentText
from specem_tui.widgets.prompt import PromptInput
from tests.engine.conftest import fake_member
from tests.tui.pilot import answered, ask, chat_ready, data_dir, wait_until
from tests.tui.test_chat import ANSWER, app_with, pair

__all__ = ["data_dir"]  # the autouse fixture


async def open_inspector(pilot, app) -> None:
    """Ask a question, wait for the answer, and open the inspector on it."""
    await ask(pilot, app, "What is six times seven?")
    await wait_until(pilot, lambda: answered(app))
    app.screen.query_one(AnswerView).focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_a_partial_answer_is_in_the_history_while_it_streams(monkeypatch):
    monkeypatch.setattr(history_module, "FLUSH_SECONDS", 0.0)
    slow = {"rounds": 0}

    def pause(model, rows):
        time.sleep(0.02)

    app = app_with(*pair(on_decode=pause), segment_tokens=3)
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        screen = app.screen
        await wait_until(pilot, lambda: screen.inflight is not None and len(screen.inflight.view.turn.rounds) >= 2)
        saved = History().load(screen.chat.id).turns[-1]
        assert saved.content and ANSWER.startswith(saved.content) and saved.final is None
        slow["rounds"] = len(saved.rounds)
        await wait_until(pilot, lambda: answered(app))
    done = History().load(History().chats()[0].id).turns[-1]
    assert done.content == ANSWER and done.final is not None and len(done.rounds) > slow["rounds"] >= 1


async def test_the_history_screen_searches_every_chat_and_deletes_one_with_two_presses():
    history = History()
    for title, text in (("zebras", "Tell me about zebras"), ("lions", "Tell me about lions")):
        chat = Chat(title=title)
        history.add(chat, Turn("user", text))
    app = app_with(*pair())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), 5)
        screen = app.screen
        await pilot.press(*"zebra")  # full-text: a word, not a prefix of a title
        await pilot.press(*"s")
        await wait_until(pilot, lambda: screen.query_one("#chats").option_count == 1, 5)
        await pilot.press("down", "ctrl+d")
        assert len(History().chats()) == 2  # the first press only asks
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: [c.title for c in History().chats()] == ["lions"], 5)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)


async def open_settings(pilot, app) -> None:
    """Wait for the chat, then open the settings form (F2)."""
    await wait_until(pilot, lambda: chat_ready(app))
    await pilot.press("f2")
    await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), 5)


async def test_settings_open_on_a_field_are_kept_for_the_next_start():
    app = app_with(*pair())
    async with app.run_test(size=(100, 40)) as pilot:
        await open_settings(pilot, app)
        assert app.focused is not None and app.focused.id == "model-0"
        segment = app.screen.query_one("#setting-segment_tokens")
        segment.value = "7"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)
        assert app.screen.settings.ensemble.segment_tokens == 7
    again = app_with(*pair())
    async with again.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(again))
        assert again.screen.settings.ensemble.segment_tokens == 7


async def test_the_settings_form_refuses_what_models_toml_and_the_flags_refuse():
    """Issue 24: F2 took temperature 1e999 and kept inf; now the same one line as everywhere."""
    app = app_with(*pair())
    async with app.run_test(size=(100, 40)) as pilot:
        await open_settings(pilot, app)
        for field, bad, says in (
            ("temperature", "1e999", "temperature must be a finite number"),
            ("seed", "-1", "seed must be in [0, 2^64)"),
        ):
            app.screen.query_one(f"#setting-{field}").value = bad
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda says=says: any(says in toast for toast in toasts(app)), 5)
            assert isinstance(app.screen, SettingsScreen)
            app.screen.query_one(f"#setting-{field}").value = "1"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)
        assert app.screen.settings.ensemble.temperature == 1.0 and app.screen.settings.ensemble.seed == 1


async def test_export_works_from_the_input_box_and_tab_goes_somewhere_visible(tmp_path):
    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        assert isinstance(app.focused, PromptInput)
        await pilot.press("ctrl+e")
        exported = tmp_path / f"specem-chat-{app.screen.chat.id}.md"
        await wait_until(pilot, exported.exists, 5)
        await pilot.press("tab")
        assert isinstance(app.focused, AnswerView)  # not the scrolling conversation itself


async def test_drafting_is_shown_and_an_early_stop_leaves_no_dangling_separator():
    def pause(model, rows):
        time.sleep(0.05)

    app = app_with(*pair(on_decode=pause))
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        view = app.screen.inflight.view
        assert "drafting" in str(view.query_one(SegmentText).content)
        await pilot.press("escape")
        await wait_until(pilot, lambda: answered(app), 10)
        assert view.turn.stopped  # the stop happened: the answer did not simply finish
        assert not view.border_subtitle.rstrip().endswith("·")


async def test_the_inspector_shows_whole_model_names():
    long_names = (
        fake_member("a-rather-long-model-name-q4", ANSWER, n_params=3000),
        fake_member("another-long-model-name-q8", "No idea."),
    )
    app = app_with(*long_names)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_inspector(pilot, app)
        table = app.screen.query_one("#candidates")
        labels = [str(column.label) for column in table.columns.values()]
        assert "by a-rather-long-model-name-q4" in labels and "by another-long-model-name-q8" in labels
        assert "↑/↓" in app.screen.query_one("#inspector").border_title


def test_a_colour_the_app_cannot_draw_is_a_one_line_error_before_loading(tmp_path, capsys):
    from specem_tui.app import main

    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nname = "m"\ndemo = "smollm2-135m"\ncolor = "notacolour"\n')
    assert main(["--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "color 'notacolour' is not a colour" in error


def shown_toasts(app) -> list[str]:
    """The notifications as the screen draws them (markup applied or not), not as passed."""
    from textual.widgets._toast import Toast

    return [str(toast.render()) for toast in app.screen.query(Toast)]


async def test_ctrl_c_says_how_to_quit_in_plain_words_and_brackets_are_drawn_as_they_are():
    """Checked against 38f6557: the toast read "Press [b]ctrl+q[/b] to quit the app"."""
    app = app_with(*pair())
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        app.set_focus(None)
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: any("to quit" in text for text in shown_toasts(app)), 5)
        assert any("Press Ctrl+Q to quit the app" in text for text in shown_toasts(app))
        assert not any("[b]" in text for text in shown_toasts(app))
        app.notify("check models.toml [ensemble] and [[models]]")
        await wait_until(pilot, lambda: any("[ensemble]" in text for text in shown_toasts(app)), 5)
        assert any("check models.toml [ensemble] and [[models]]" in text for text in shown_toasts(app))


async def test_ctrl_e_on_a_new_chat_exports_nothing(tmp_path):
    """Checked against 38f6557: it wrote a file named after an id the history never held."""
    app = app_with(*pair())
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("ctrl+e")
        await wait_until(pilot, lambda: any("Nothing to export yet" in text for text in shown_toasts(app)), 5)
        assert list(tmp_path.glob("specem-chat-*.md")) == []


async def test_learning_that_could_not_be_kept_is_said_after_the_answer(tmp_path):
    """Checked against 38f6557: with carried weights in a damaged database, the chat app said
    nothing (its warnings were shown only when the models had loaded)."""
    app = app_with(*pair())
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        ensemble = app.screen.ensemble
        ensemble.warnings.append("warning: weights database damaged; the weights this answer learned were not kept")
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        await wait_until(pilot, lambda: any("were not kept" in text for text in shown_toasts(app)), 5)
        count = sum("were not kept" in text for text in shown_toasts(app))
        await ask(pilot, app, "And eight times nine?")
        await wait_until(pilot, lambda: answered(app))
        await pilot.pause(0.2)
        assert sum("were not kept" in text for text in shown_toasts(app)) == count  # said once


async def test_the_inspector_lists_several_candidates_of_one_model():
    """With a drafting budget one model drafts several candidates: one row each, "big #2"."""
    app = app_with(*pair(), draft_budget=3, model_exit=False, extra_temperature=2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_inspector(pilot, app)
        rounds = app.screen.rounds  # the inspector's rounds: the answer's
        assert any(c.sample > 0 for r in rounds for c in r.candidates)
        table = app.screen.query_one("#candidates")
        names = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert "big" in names and "big #2" in names
        detail = app.screen.query_one("#detail")
        before = str(detail.render())
        await pilot.press("down")
        await wait_until(pilot, lambda: str(detail.render()) != before, 5)  # the next candidate, in full


async def test_the_inspector_says_a_draft_was_contrasted_token_by_token():
    """With contrast, a member of the drafter's vocabulary reads along: the inspector names it."""
    app = app_with(*pair(), contrast=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_inspector(pilot, app)
        why = str(app.screen.query_one("#why").render())
        assert "Drafted against small token by token (contrast)" in why
