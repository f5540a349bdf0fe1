"""specem-chat's answer paths with fake models (no llama.cpp, seconds): a question taken back
when the answer cannot start, a partial answer kept when it fails later, a crash in the worker
that does not take the app down, Esc just after Enter, starting weights, upgraded chat files."""

from __future__ import annotations

import json
import threading

import pytest

from specem_local.models.config import Config, ModelSpec
from specem_local.settings import EnsembleSettings
from specem_local.storage.chat_files import chat_from_json, chat_to_json, chats_dir
from specem_local.storage.chats import Chat
from specem_local.storage.history import History
from specem_local.storage.weights import WeightStore
from specem_tui.app import SpecemChatApp, main
from specem_tui.screens.chat import ChatScreen
from specem_tui.widgets.answer import AnswerView, UserMessage
from specem_tui.widgets.prompt import PromptInput
from specem_tui.widgets.weights import WeightsPanel
from tests.conftest import poll_until
from tests.engine.conftest import fake_ensemble, fake_member
from tests.tui.pilot import answered, ask, chat_ready, data_dir, wait_until

__all__ = ["data_dir"]  # the autouse fixture

ANSWER = "Forty-two, since six sevens make forty-two."


def app_with(*members, weight_store=None, **settings) -> SpecemChatApp:
    """The chat app on fake members (loaded instantly in its worker)."""
    specs = tuple(ModelSpec(name=m.name, path=f"{m.name}.gguf") for m in members)
    config = Config(EnsembleSettings(greedy=True), specs, "<test>")
    return SpecemChatApp(
        config, load=lambda config, **_: fake_ensemble(*members, weight_store=weight_store, **settings)
    )


def pair(**options):
    return fake_member("big", ANSWER, n_params=3000, **options), fake_member("small", "No idea.", **options)


def views(app) -> tuple[int, int]:
    conversation = app.screen.query_one("#conversation")
    return len(conversation.query(UserMessage)), len(conversation.query(AnswerView))


async def test_weights_panel_starts_from_the_engines_starting_weights():
    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        panel = app.screen.query_one(WeightsPanel)
        assert panel.weights == app.ensemble.starting_weights() == {"big": 0.75, "small": 0.25}
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        assert app.screen.chat.turns[-1].content == ANSWER


async def test_the_panel_says_where_the_weights_came_from_and_ctrl_r_resets_them(tmp_path):
    big = fake_member("big", ANSWER, n_params=3000)
    mid = fake_member("mid", ANSWER, n_params=1500, words=[" sevens", " make"])
    store = WeightStore(tmp_path / "specem.db")
    app = app_with(big, mid, fake_member("small", "No idea."), weight_store=store, carry_weights=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        panel = app.screen.query_one(WeightsPanel)
        prior = dict(panel.weights)
        assert panel.border_subtitle == "from the prior" and prior == pytest.approx(
            {"big": 6 / 11, "mid": 3 / 11, "small": 2 / 11}
        )
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        await ask(pilot, app, "And seven times six?")
        await wait_until(pilot, lambda: panel.border_subtitle == "from carried over from 1 answer")
        await wait_until(pilot, lambda: answered(app))
        assert panel.weights != pytest.approx(prior)
        await pilot.press("ctrl+r", "ctrl+r")  # the first press asks
        await wait_until(pilot, lambda: panel.border_subtitle == "from the prior")
        assert panel.weights == pytest.approx(prior)
        assert app.ensemble.weights_origin() == "the prior"


async def test_an_answer_that_cannot_start_gives_the_question_back_once():
    app = app_with(*pair(n_ctx=40))  # the plain prompt format alone is 32 tokens
    async with app.run_test(size=(80, 24)) as pilot:
        question = "Tell me about the sea."
        await wait_until(pilot, lambda: chat_ready(app))
        screen, prompt = app.screen, app.screen.query_one(PromptInput)
        await pilot.press(*question)

        def refused(times: int) -> bool:
            said = [str(n.message) for n in app._notifications if "leaves no room to answer" in str(n.message)]
            return len(said) == times

        for times in (1, 2):  # sent again, it fails again: the question stays where it was typed
            await pilot.press("enter")
            await wait_until(pilot, lambda times=times: refused(times), 10)
            assert prompt.text == question.strip() and views(app) == (0, 0)
            assert screen.chat.turns == [] and screen.inflight is None
    assert History().chats() == []


async def test_a_failure_after_streaming_began_keeps_the_partial_answer():
    def fail_later(model, rows):
        if model.decodes == 12:
            raise RuntimeError("the GPU fell off the bus")

    app = app_with(fake_member("big", ANSWER, n_params=3000, on_decode=fail_later), pair()[1], segment_tokens=4)
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        turn = app.screen.chat.turns[-1]
        assert turn.rounds and turn.content and turn.error == "unexpected RuntimeError: the GPU fell off the bus"
        assert ANSWER.startswith(turn.content) and turn.final is None
        assert views(app) == (1, 1)
        await pilot.press("n", "e", "x", "t", "enter")  # the app lives on; the next answer starts
        await wait_until(pilot, lambda: len(app.screen.chat.turns) == 4)
    saved = History().load(History().chats()[0].id)
    assert saved.turns[1].error and saved.turns[1].content == turn.content


async def test_escape_pressed_before_the_answer_starts_is_not_lost(monkeypatch):
    """Esc is handled before the worker has taken the answer's first step; the answer must
    still end as stopped (its cancel token exists from the moment Enter is pressed)."""
    from specem_local.engine import AnswerStream

    gate, first_step = threading.Event(), AnswerStream.__next__

    def after_the_gate(stream):
        gate.wait(10)
        return first_step(stream)

    monkeypatch.setattr(AnswerStream, "__next__", after_the_gate)
    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press(*"Hello", "enter", "escape")
        gate.set()
        await wait_until(pilot, lambda: answered(app))
        turn = app.screen.chat.turns[-1]
        assert turn.stopped and turn.final.rounds == 0


async def test_quitting_during_a_decode_waits_for_it_before_freeing_the_models():
    inside = threading.Event()

    def decode_until_quitting(model, rows):
        if model.decodes == 3:  # the answer is under way: hold this decode until the app quits
            inside.set()
            poll_until(lambda: app.closing, 30, "the app never began to quit", every=0.005)

    app = app_with(*pair(on_decode=decode_until_quitting))
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, inside.is_set, 10)
        ensemble = app.ensemble
    # on_unmount closed the models while that decode ran; close() waited for it to return
    assert all(member.model.closed and member.model.violations == [] for member in ensemble.members)


def test_a_version_1_chat_file_is_imported_into_the_history_and_kept():
    chats_dir().mkdir(parents=True)
    round_1 = {
        "index": 1,
        "text": "Forty-two",
        "author": "big",
        "decision": "only-candidate",
        "candidates": [
            {"model": "big", "text": "Forty-two", "ended": True, "scores": {}, "shares": {}, "combined": None}
        ],
        "weights": {"big": 1.0},
        "drafters": ["big"],
        "draft_seconds": {"big": 0.1},
        "draft_tokens": {"big": 3},
        "verify_seconds": {},
        "seconds": 0.1,
        "answer_tokens": 3,
        "type": "round",
    }
    final = {
        "text": "Forty-two",
        "finish_reason": "eos",
        "rounds": 1,
        "tokens": 3,
        "seconds": 0.1,
        "first_segment_seconds": 0.1,
        "wins": {"big": 1},
        "models_per_round": 1.0,
        "weights": {"big": 1.0},
        "plain_generation": True,
        "type": "final",
        "tokens_per_second": 30.0,
    }
    turns = [
        {"role": "user", "content": "6 x 7?", "rounds": [], "final": None, "pinned": True},  # an unknown key
        {"role": "assistant", "content": "Forty-two", "rounds": [round_1], "final": final},
    ]
    old = {"version": 1, "id": "old", "title": "6 x 7", "created": 1.0, "updated": 2.0, "turns": turns}
    (chats_dir() / "old.json").write_text(json.dumps(old))
    chat = History().load("old")
    assert chat.turns[1].final.drafters_per_round == 1.0 and chat.turns[1].rounds[0].author == "big"
    assert chat.origin == "import" and (chats_dir() / "old.json").exists()
    assert [c.id for c in History().chats()] == ["old"]  # imported once


def test_chat_files_that_are_not_chats_are_skipped_and_a_wrong_id_is_one_line(capsys):
    chats_dir().mkdir(parents=True)
    for name, text in (("null", "null"), ("list", "[1, 2]"), ("bad-turn", '{"id": "x", "turns": [{"role": 1}]}')):
        (chats_dir() / f"{name}.json").write_text(text)
        assert main(["--chat", name]) == 1
        error = capsys.readouterr().err
        assert error.startswith(f"specem-chat: error: no chat {name!r} in the history") and error.count("\n") == 1
    assert History().chats() == []  # the import skipped them
    assert isinstance(chat_from_json(chat_to_json(Chat())), Chat)


async def test_the_settings_form_has_every_setting_and_checks_it():
    from specem_local.setting_fields import describe
    from specem_tui.screens.settings import SettingsScreen

    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        form = app.screen
        for item in describe(EnsembleSettings):
            assert form.query_one(f"#setting-{item.name}")
        form.query_one("#setting-segment_tokens").value = "0"
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SettingsScreen)  # refused: segment_tokens must be at least 1
        form.query_one("#setting-segment_tokens").value = "4"
        form.query_one("#setting-stop").value = '["seven", "a\\r\\n\\"quoted\\"\\u0007"]'
        form.query_one("#setting-system_prompt").text = "Be brief.\nUse digits."
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        applied = app.screen.settings.ensemble
        assert applied.segment_tokens == 4 and applied.stop == ("seven", 'a\r\n"quoted"\a')
        assert applied.system_prompt == "Be brief.\nUse digits."
        await pilot.press("f2")  # the form shows what was applied, and applying it again changes nothing
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert app.screen.settings.ensemble == applied
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        final = app.screen.chat.turns[-1].final
        assert final.finish_reason == "stop" and final.text == ANSWER[: ANSWER.index("seven")]


async def test_ctrl_l_switches_to_another_built_in_ensemble_and_the_chat_goes_on():
    from specem_local.models.config import load_config
    from specem_tui.screens.ensembles import EnsembleScreen

    def load(config, **_):
        return fake_ensemble(
            *(fake_member(spec.name, ANSWER, n_params=1000 + i) for i, spec in enumerate(config.models))
        )

    app = SpecemChatApp(load_config(ensemble="demo"), load=load)
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        chat, first = app.screen.chat, app.ensemble
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: isinstance(app.screen, EnsembleScreen))
        await pilot.press("down", "enter")  # demo-1.5b
        await wait_until(pilot, lambda: app.ensemble is not first and chat_ready(app))
        assert app.ensemble.model_names == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma-3-270m"]
        assert app.screen.chat is chat and len(chat.turns) == 2 and app.colours["qwen2.5-coder-1.5b"] == "yellow"
        assert all(member.model.closed for member in first.members)  # the old models are freed
        await ask(pilot, app, "And now?")
        await wait_until(pilot, lambda: answered(app))
        assert set(chat.turns[-1].final.wins) == set(app.ensemble.model_names)


async def test_a_model_found_on_this_disk_is_added_to_models_toml_and_the_ensemble_reloads(tmp_path, monkeypatch):
    from specem_local.models.config import load_config
    from specem_local.models.gguf import read_header
    from specem_local.models.scan import FoundModel
    from specem_tui.screens import found as found_screen
    from specem_tui.screens.settings import SettingsScreen
    from tests.conftest import write_gguf

    blob = write_gguf(tmp_path / "blob", {"general.architecture": "llama"}, [("w", (4,), 0)])
    model = FoundModel("ollama", {"ollama": "llama3.2:1b"}, blob, read_header(blob), None, 32, 1_240_000_000)
    monkeypatch.setattr(found_screen, "scan", lambda: [model])
    config = tmp_path / "models.toml"
    mine = '# mine\n[[models]]\nname = "big"\npath = "big.gguf"\n[[models]]\nname = "small"\npath = "small.gguf"\n'
    config.write_text(mine)

    def load(config, **_):
        return fake_ensemble(
            *(fake_member(spec.name, ANSWER, n_params=1000 + i) for i, spec in enumerate(config.models))
        )

    app = SpecemChatApp(load_config(config), load=load)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        first = app.ensemble
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        app.screen.query_one("#add-model").press()
        await wait_until(pilot, lambda: isinstance(app.screen, found_screen.FoundModelsScreen) and app.screen.found)
        shown = str(app.screen.query_one("#found-list").get_option_at_index(0).prompt)
        assert shown == "llama3.2-1b  (ollama, llama 1.24B F32, no chat template)"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.ensemble is not first and chat_ready(app))
        assert app.ensemble.model_names == ["big", "small", "llama3.2-1b"]
        assert config.read_text().startswith(mine) and 'ollama = "llama3.2:1b"' in config.read_text()
