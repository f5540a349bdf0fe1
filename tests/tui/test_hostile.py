"""The chat app against a hostile user (issue 36), on fake models: escape sequences in stored or
echoed text never reach the terminal, a failed export or a damaged chat never crashes the app,
and the keys do what their labels say."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from specem_local.engine import calibrate, learned
from specem_local.engine.choices import thumbs_rewards
from specem_local.events import Candidate, RoundEvent
from specem_local.storage.chat_files import chat_markdown
from specem_local.storage.chats import GIVEN, Chat, Turn
from specem_local.storage.history import History
from specem_local.storage.weights import WeightStore
from specem_tui.app import SpecemChatApp, main
from specem_tui.screens.chat import ChatScreen
from specem_tui.screens.history import HistoryScreen
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.screens.settings import SettingsScreen
from specem_tui.widgets.answer import AnswerView
from specem_tui.widgets.prompt import PromptInput
from specem_tui.widgets.weights import WeightsPanel
from tests.engine.conftest import fake_ensemble, fake_member
from tests.tui.pilot import answered, ask, chat_ready, data_dir, open_recorded, wait_until
from tests.tui.test_chat import app_with, pair

__all__ = ["data_dir"]  # the autouse fixture

CLIPBOARD = "\x1b]52;c;UFdORUQ=\x07"  # OSC 52: "PWNED" to the clipboard
TITLE = "\x1b]0;owned\x07"  # OSC 0: the terminal's title
CONTROLS = ("\x1b", "\x07", "\x9b", "\x9d")  # ESC, BEL, and the 8-bit CSI and OSC


def raw_controls(app) -> list[str]:
    """The control characters in what the app would draw now (its screenshot holds every
    visible cell: the conversation, titles, toasts, the screen on top)."""
    drawn = app.export_screenshot()
    return [repr(c) for c in CONTROLS if c in drawn]


async def test_escape_sequences_in_answers_questions_titles_and_toasts_are_shown_not_sent():
    """Toasts are drawn (``notifications=True``), the question holds the escapes as typed (set in
    the box: ``pilot.press`` drops ESC and BEL), and the inspector opens on every round, so the
    candidates holding escapes are drawn too."""
    echo = fake_member("big", f"Sure{CLIPBOARD} done{TITLE}.", n_params=3000)
    app = app_with(echo, fake_member("small", f"No{TITLE} way{CLIPBOARD}"))
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        screen = app.screen
        screen.query_one(PromptInput).text = f"Copy this{CLIPBOARD}{TITLE}"
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(screen.chat.turns) == 2 and answered(app))
        assert "\x1b" in screen.chat.turns[0].content and "\x1b" in screen.chat.turns[-1].content  # kept as is
        assert raw_controls(app) == [] and "\\x1b]52;c;" in app.export_screenshot()
        app.notify(f"a toast{TITLE}")
        await pilot.pause()
        assert any("\\x1b]0;owned" in str(n.message) or TITLE in str(n.message) for n in app._notifications)
        assert raw_controls(app) == []
        rounds = screen.chat.turns[-1].rounds
        view = screen.query_one(AnswerView)
        view.focus()
        inspected_escapes = 0
        for _ in rounds:
            await pilot.press("left", "enter")  # the inspector on the segment before
            await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
            await pilot.pause()
            assert raw_controls(app) == []
            inspected_escapes += "\\x1b" in app.export_screenshot()
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)
        assert inspected_escapes  # some inspected round showed a candidate holding an escape
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), 5)
        await wait_until(pilot, lambda: app.screen.query_one("#chats").option_count == 1, 5)
        assert raw_controls(app) == [] and "\\x1b]" in app.export_screenshot()


async def test_a_stored_chat_with_escapes_in_its_title_and_authors_is_shown_harmless():
    history = History()
    chat = Chat(title=f"title{TITLE}")
    history.add(chat, Turn("user", f"question{CLIPBOARD}"))
    author = f"sm{TITLE}ol"  # a name no models.toml allows, yet a stored chat may hold one
    voted = Candidate(author, f"answer{CLIPBOARD}", False, {author: -1.0}, {author: 1.0}, 1.0)
    said = RoundEvent(1, f"answer{CLIPBOARD}", author, "vote", (voted,), {author: 1.0}, (author,), {}, {}, {}, 0.1, 2)
    history.add(chat, Turn("assistant", f"answer{CLIPBOARD}", [said], kind=f"alone: {author}", error=f"cut{TITLE}"))
    app = app_with(fake_member("big", "Fine.", n_params=3000), fake_member("small", "Fine."))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        app.screen.show_chat(History().load(chat.id))
        await wait_until(pilot, lambda: len(app.screen.query(AnswerView)) == 1)
        await pilot.pause()
        assert raw_controls(app) == [] and "\\x1b]0;owned\\x07" in app.export_screenshot()
        assert "\x1b" not in app.screen.title
        app.screen.query_one(AnswerView).focus()
        await pilot.press("enter")  # the inspector on the stored round: its candidate's author holds escapes
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
        await pilot.pause()
        assert raw_controls(app) == [] and "sm\\x1b]0;owned" in app.export_screenshot()


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_ctrl_r_asks_first_and_ctrl_z_brings_a_calibration_and_choices_back(tmp_path):
    """Ctrl+R threw away a calibration and every choice at one press, with no way back."""
    store = WeightStore(tmp_path / "weights.db")
    app = app_with(*pair(), weight_store=store)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        ensemble = app.ensemble
        calibrate(store, ensemble.members, ensemble.settings, {"big": 9, "small": 2}, 10)
        thumbs = thumbs_rewards({"big": 1, "small": 3}, up=True)
        learned.choose(store, ensemble.members, ensemble.settings, "thumbs-up", thumbs)
        kept = "calibrated on 10 items and 1 of your choices"
        assert ensemble.weights_origin() == kept
        panel = app.screen.query_one(WeightsPanel)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: any("Press Ctrl+R again" in t for t in toasts(app)), 5)
        assert ensemble.weights_origin() == kept  # one press forgets nothing
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: panel.border_subtitle == "from the prior", 5)
        assert app.screen.query_one(PromptInput).has_focus
        await pilot.press("ctrl+z")  # the input box has focus: the reset is undone, not the typing
        await wait_until(pilot, lambda: panel.border_subtitle == f"from {kept}", 5)
        assert ensemble.weights_origin() == kept and "Brought back the weights the reset forgot." in toasts(app)


async def test_ctrl_z_in_the_input_box_undoes_the_choice_unless_it_holds_typing(tmp_path):
    """The toast says "Ctrl+Z undoes it" and focus is in the input box after every send."""
    app = app_with(*pair(), weight_store=WeightStore(tmp_path / "weights.db"))
    async with app.run_test(size=(100, 30)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        panel = app.screen.query_one(WeightsPanel)
        app.screen.query_one(AnswerView).focus()
        await pilot.press("plus")
        await wait_until(pilot, lambda: panel.border_subtitle.endswith("1 of your choices"), 5)
        prompt = app.screen.query_one(PromptInput)
        prompt.focus()
        await pilot.press(*"abc")
        await pilot.press("ctrl+z")  # typing in the box: Ctrl+Z undoes the typing
        await wait_until(pilot, lambda: prompt.text == "", 5)
        assert panel.border_subtitle.endswith("1 of your choices")
        await pilot.press("ctrl+z")  # an empty box: the choice
        await wait_until(pilot, lambda: panel.border_subtitle == "from the prior", 5)


async def test_a_failed_export_is_said_and_the_app_goes_on():
    """Ctrl+E where the export cannot be written (here a folder by that name) crashed the app."""
    app = app_with(*pair())
    async with app.run_test(size=(100, 30)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        (Path.cwd() / f"specem-chat-{app.screen.chat.id}.md").mkdir()
        await pilot.press("ctrl+e")
        await wait_until(pilot, lambda: any(t.startswith("Export failed") for t in toasts(app)), 5)
        await ask(pilot, app, "And seven times six?")  # the app is alive and answers
        await wait_until(pilot, lambda: answered(app) and len(app.screen.chat.turns) == 4)


async def test_a_crash_exits_non_zero_and_its_traceback_holds_no_chat_text(monkeypatch):
    def broken_help(screen) -> None:
        question = screen.chat.turns[0].content  # a local a traceback with locals would print
        raise RuntimeError(f"a bug ({len(question)})")

    monkeypatch.setattr(ChatScreen, "action_help", broken_help)
    printed: list = []
    monkeypatch.setattr(SpecemChatApp, "_print_error_renderables", lambda app: printed.extend(app._exit_renderables))
    app = app_with(*pair())
    with pytest.raises(RuntimeError, match="a bug"):
        async with app.run_test(size=(100, 30)) as pilot:
            await ask(pilot, app, "my secret question")
            await wait_until(pilot, lambda: answered(app))
            await pilot.press("f1")
            await pilot.pause()
    assert app.return_code == 1
    shown = "".join(segment.text for renderable in printed for segment in renderable.segments)
    assert "RuntimeError" in shown and "my secret question" not in shown


def test_specem_chat_returns_the_apps_code(monkeypatch):
    def crashed(app) -> None:
        app._return_code = 1

    monkeypatch.setattr(SpecemChatApp, "run", crashed)
    assert main([]) == 1


async def test_ctrl_o_lists_a_chat_whose_time_no_calendar_holds():
    history = History()
    history.add(chat := Chat(title="from an older import"), Turn("user", "hello"))
    with sqlite3.connect(history.path) as db:
        db.execute("UPDATE chats SET updated = 1e308 WHERE id = ?", (chat.id,))
    app = app_with(*pair())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), 5)
        await wait_until(pilot, lambda: app.screen.query_one("#chats").option_count == 1, 5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.chat.id == chat.id, 5)


async def test_a_thumbs_up_on_a_version_from_your_pick_counts_the_picked_segment(tmp_path):
    """The continued version's wins counted only what streamed after the pick, so a thumbs up
    on an answer the picked model mostly wrote moved weight away from it."""
    store = WeightStore(tmp_path / "weights.db")
    app = app_with(*pair(), weight_store=store, segment_tokens=40)  # one long segment: the pick is most of it
    async with app.run_test(size=(100, 30)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        first = app.screen.chat.turns[-1]
        view = app.screen.query(AnswerView).last()
        view.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
        loser = next(c for c in first.rounds[0].candidates if c.model != first.rounds[0].author)
        await pilot.press("down", "g")
        await wait_until(pilot, lambda: answered(app) and app.screen.chat.turns[-1] is not first)
        shown = app.screen.chat.turns[-1]
        assert shown.wins[loser.model] >= 1 and sum(shown.wins.values()) == len(shown.rounds)
        assert f"{loser.model} {shown.wins[loser.model]}" in view.border_subtitle
        await pilot.press("plus")
        await wait_until(pilot, lambda: store.choices()[-1].kind == "thumbs-up", 5)
        rewards = store.choices()[-1].rewards
        assert rewards[loser.model] == shown.wins[loser.model] / len(shown.rounds) > 0
        chat_id = app.screen.chat.id
    assert f"{loser.model}: {shown.wins[loser.model]}" in chat_markdown(History().load(chat_id))


async def test_messages_a_client_sent_show_as_sent_not_as_an_answer_being_drafted():
    """A serve client's system and earlier assistant messages showed as "drafting the first
    segment…" with their text hidden, and `history show` called them "## Ensemble"."""
    record = History().start_new_chat(
        "serve",
        [Turn("system", "Be brief."), Turn("user", "Hi"), Turn("assistant", "Hello! Ask me."), Turn("user", "2+2?")],
    )
    chat = History().load(record.chat_id)
    assert [t.kind for t in chat.turns[:3]] == [GIVEN, "", GIVEN] and chat.turns[0].done and chat.turns[2].done
    markdown = chat_markdown(chat)
    assert "## System (sent with the request)" in markdown and "## Assistant (sent with the request)" in markdown
    app = app_with(*pair())
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        app.screen.show_chat(chat)
        await wait_until(pilot, lambda: len(app.screen.query(AnswerView)) == 3)
        await pilot.pause()
        shown = app.export_screenshot().replace("&#160;", " ")
        assert "Hello! Ask me." in shown and "Be brief." in shown and "Assistant (sent with the request)" in shown
        given = app.screen.query(AnswerView)[1]
        given.focus()
        await pilot.press("plus")
        await wait_until(pilot, lambda: any("sent with a request" in t for t in toasts(app)), 5)


async def test_typing_a_fraction_in_a_whole_number_field_is_refused_not_read_as_another_number():
    """F2: "1.5" typed into segment_tokens was saved as 15 (the field dropped the dot); a
    5000-digit seed was "not an integer"."""
    app = app_with(*pair())
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), 5)
        field = app.screen.query_one("#setting-segment_tokens")
        field.value = ""
        field.focus()
        await pilot.press("1", "full_stop", "5")
        await wait_until(pilot, lambda: field.value == "1.5", 5)
        await pilot.press("ctrl+s")
        refused = "segment_tokens must be a whole number, got '1.5'"
        await wait_until(pilot, lambda: any(refused in t for t in toasts(app)), 5)
        assert isinstance(app.screen, SettingsScreen)
        field.value = "7"
        app.screen.query_one("#setting-seed").value = "9" * 5000
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: any("got a number of 5,000 digits" in t for t in toasts(app)), 5)
        app.screen.query_one("#setting-seed").value = "3"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), 5)
        assert (app.screen.settings.ensemble.segment_tokens, app.screen.settings.ensemble.seed) == (7, 3)


async def test_after_a_comparison_the_weights_panel_shows_every_model_again(tmp_path):
    app = app_with(*pair(), weight_store=WeightStore(tmp_path / "weights.db"))
    async with app.run_test(size=(100, 30)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        app.screen.query_one(AnswerView).focus()
        await pilot.press("k")
        await wait_until(pilot, lambda: any(t.startswith("Compared.") for t in toasts(app)), 30)
        assert list(app.screen.query_one(WeightsPanel).wins) == ["big", "small"]


async def test_a_finished_answer_in_markdown_is_scrolled_into_view_at_80_by_24():
    long_answer = "\n\n".join(f"Paragraph {n}: six sevens make forty-two." for n in range(12))
    app = app_with(fake_member("big", long_answer, n_params=3000), fake_member("small", "No."), max_tokens=400)
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "Explain at length.")
        await wait_until(pilot, lambda: answered(app))
        view = app.screen.query_one("#conversation")
        await wait_until(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y, 5)


async def test_editing_the_first_question_retitles_the_chat():
    app = app_with(*pair())
    async with app.run_test(size=(100, 30)) as pilot:
        await ask(pilot, app, "What is six times sevn?")
        await wait_until(pilot, lambda: answered(app))
        app.screen.query_one(AnswerView).focus()
        await pilot.press("e")
        prompt = app.screen.query_one(PromptInput)
        await wait_until(pilot, lambda: prompt.has_focus, 5)
        prompt.text = "What is six times seven?"
        await pilot.press("enter")
        await wait_until(pilot, lambda: answered(app) and app.screen.chat.turns[0].content.endswith("seven?"))
        assert app.screen.chat.title == "What is six times seven?" and "seven?" in app.screen.title
        chat_id = app.screen.chat.id
    assert History().load(chat_id).title == "What is six times seven?"


async def test_ctrl_o_searches_off_the_ui_thread_once_typing_pauses(monkeypatch):
    """Ctrl+O searched on every keystroke on the UI thread: one long question froze the app. Keys
    typed while a (slow) search runs must be taken during it, which a search on the UI thread
    cannot allow."""
    history = History()
    history.add(Chat(title="zebras"), Turn("user", "Tell me about zebras"))
    searches: list[str] = []
    running: list[tuple[float, float]] = []  # when each search ran
    changed: list[float] = []  # when each key reached the search box
    real_search = History.search

    def slow_search(self, query: str, limit: int = 20):
        searches.append(query)
        began = time.monotonic()
        time.sleep(1.0)  # a search that takes long
        running.append((began, time.monotonic()))
        return real_search(self, query, limit)

    real_changed = HistoryScreen.on_input_changed

    def on_changed(self, event) -> None:
        changed.append(time.monotonic())
        real_changed(self, event)

    monkeypatch.setattr(History, "search", slow_search)
    monkeypatch.setattr(HistoryScreen, "on_input_changed", on_changed)
    app = app_with(*pair())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), 5)
        screen = app.screen
        await pilot.press(*"zebras")
        await wait_until(pilot, lambda: searches == ["zebras"], 5)  # it runs now (after the pause in typing)
        await pilot.press(*" tell")
        assert screen.query_one("#search").value == "zebras tell"
        chats = screen.query_one("#chats")

        def found() -> bool:
            return chats.option_count == 1 and "[zebras]" in str(chats.get_option_at_index(0).prompt)

        await wait_until(pilot, found, 10)
        assert searches[-1] == "zebras tell" and len(searches) <= 2  # not one search per key
        began, ended = running[0]
        assert any(began < moment < ended for moment in changed)  # a key was taken while it searched


async def test_a_tool_reply_from_the_server_shows_as_its_calls_and_its_forced_text_in_the_inspector():
    """A chat ``specem serve`` recorded whose answer is a call: the chat app shows the call, not
    the envelope, and the inspector says which text the format forced (no candidate voted)."""
    call = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    served = fake_ensemble(fake_member("big", call, n_params=3000, n_ctx=2048), fake_member("small", call, n_ctx=2048))
    record = History().start_new_chat("serve", [Turn("user", "Weather in Paris?")])
    for event in served.stream("Weather in Paris?", tools=[weather], max_tokens=120):
        record.event(event)
    served.close()
    app = app_with(fake_member("big", "Fine.", n_params=3000), fake_member("small", "Fine."))
    async with app.run_test(size=(100, 30)) as pilot:
        await open_recorded(pilot, app, record.chat_id, 1)
        shown = app.export_screenshot()
        assert "Calls" in shown and "get_weather" in shown and "tool_calls" not in shown
        turn = app.screen.chat.turns[-1]
        forced = [i for i, e in enumerate(turn.rounds) if e.decision == "forced"]
        assert forced
        view = app.screen.query_one(AnswerView)
        view.focus()
        for _ in range(len(turn.rounds) - forced[0]):  # to the first forced segment, from the end
            await pilot.press("left")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
        await pilot.pause()
        assert "forced" in app.export_screenshot() and "format:" in app.export_screenshot()
