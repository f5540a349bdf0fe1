"""The user in the loop (issue 27) in specem-chat, with fake models: regenerate, edit, copy,
pick a candidate and go on, compare with each model alone, thumbs and best as labels, undo,
and every version kept in the history."""

from __future__ import annotations

from specem_local.storage.history import History
from specem_local.storage.weights import WeightStore
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.widgets.answer import AnswerView
from specem_tui.widgets.prompt import PromptInput
from specem_tui.widgets.weights import WeightsPanel
from tests.engine.conftest import fake_member
from tests.tui.pilot import answered, ask, data_dir, wait_until
from tests.tui.test_chat import ANSWER, app_with, pair

__all__ = ["data_dir"]  # the autouse fixture


async def answer_first(pilot, app) -> AnswerView:
    await ask(pilot, app, "What is six times seven?")
    await wait_until(pilot, lambda: answered(app))
    view = app.screen.query(AnswerView).last()
    view.focus()
    await pilot.pause()
    return view


def saved_chat():
    history = History()
    return history.load(history.chats()[0].id)


async def test_regenerate_keeps_the_first_answer_as_a_version_and_brackets_browse_them():
    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        view = await answer_first(pilot, app)
        first = app.screen.chat.turns[-1]
        await pilot.press("r")
        await wait_until(pilot, lambda: answered(app) and app.screen.chat.turns[-1] is not first)
        shown = app.screen.chat.turns[-1]
        assert shown.kind == "regenerated" and shown.content == ANSWER and shown.alternatives == [first]
        assert view.border_title == "Ensemble (regenerated) · 2/2"
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: app.screen.chat.turns[-1] is first)
        assert view.border_title == "Ensemble · 1/2"
    saved = saved_chat()
    assert [t.kind for t in saved.turns[1].versions()] == ["", "regenerated"] and saved.turns[1].kind == ""


async def test_edit_the_last_question_and_ask_again():
    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        await answer_first(pilot, app)
        await pilot.press("e")
        prompt = app.screen.query_one(PromptInput)
        await wait_until(pilot, lambda: prompt.text == "What is six times seven?")
        prompt.text = "What is seven times six?"
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: answered(app) and app.screen.chat.turns[0].content == "What is seven times six?"
        )
        assert len(app.screen.chat.turns) == 2 and len(app.screen.query(AnswerView)) == 1
    saved = saved_chat()
    assert [t.content for t in saved.turns] == ["What is seven times six?", ANSWER]
    assert [t.content for t in saved.turns[0].alternatives] == ["What is six times seven?", ANSWER]


async def test_copy_the_answer_and_its_code():
    code = "Run this:\n```python\nprint(6 * 7)\n```\n"
    app = app_with(fake_member("big", code, n_params=3000), fake_member("small", "No idea."))
    async with app.run_test(size=(80, 24)) as pilot:
        await answer_first(pilot, app)
        await pilot.press("c")
        assert app.clipboard == app.screen.chat.turns[-1].content
        await pilot.press("y")
        assert app.clipboard == "print(6 * 7)"


async def test_pick_a_losing_candidate_and_the_answer_goes_on_from_it(tmp_path):
    app = app_with(*pair(), weight_store=WeightStore(tmp_path / "weights.db"), segment_tokens=4)
    async with app.run_test(size=(80, 24)) as pilot:
        view = await answer_first(pilot, app)
        first = app.screen.chat.turns[-1]
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        winner = first.rounds[0]
        loser = next(c for c in winner.candidates if c.model != winner.author)
        await pilot.press("down", "g")
        await wait_until(pilot, lambda: answered(app) and app.screen.chat.turns[-1] is not first)
        shown = app.screen.chat.turns[-1]
        assert shown.kind == "continued" and shown.content.startswith(loser.text)
        assert shown.rounds[0].decision == "picked" and shown.rounds[0].author == loser.model
        assert view.turn is shown and first in shown.alternatives
        assert app.screen.query_one(WeightsPanel).border_subtitle == "from the prior and 1 of your choices"
        await pilot.press("ctrl+z")
        await wait_until(pilot, lambda: app.screen.query_one(WeightsPanel).border_subtitle == "from the prior")
    saved = saved_chat()
    assert saved.turns[1].kind == "continued" and saved.turns[1].content == shown.content


async def test_compare_runs_each_model_alone_and_b_marks_the_best(tmp_path):
    app = app_with(*pair(), weight_store=WeightStore(tmp_path / "weights.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        view = await answer_first(pilot, app)
        ensemble_answer = app.screen.chat.turns[-1]
        await pilot.press("k")
        await wait_until(pilot, lambda: answered(app) and len(ensemble_answer.alternatives) == 2, 30)
        kinds = [t.kind for t in ensemble_answer.versions()]
        assert kinds == ["", "alone: big", "alone: small"] and app.screen.chat.turns[-1] is ensemble_answer
        assert all(t.final is not None for t in ensemble_answer.alternatives)
        await pilot.press("right_square_bracket")  # to big alone (now the answer shown)
        await wait_until(pilot, lambda: view.turn.kind == "alone: big")
        await pilot.press("b")
        panel = app.screen.query_one(WeightsPanel)
        await wait_until(pilot, lambda: panel.border_subtitle == "from the prior and 1 of your choices")
        store = app.ensemble.weight_store
        assert [(c.kind, c.rewards) for c in store.choices()] == [("best", {"big": 1.0, "small": 0.0})]
        await pilot.press("plus")  # one model wrote all of big's answer: nothing to learn
        said = lambda: any("nothing for the weights to learn" in str(n.message) for n in app._notifications)  # noqa: E731
        await wait_until(pilot, said, 5)
        assert len(store.choices()) == 1
    saved = saved_chat()
    assert sorted(t.kind for t in saved.turns[1].versions()) == ["", "alone: big", "alone: small"]
    assert saved.turns[1].kind == "alone: big"  # the version on screen was the one shown


async def test_thumbs_on_an_ensemble_answer_are_labels(tmp_path):
    app = app_with(*pair(), weight_store=WeightStore(tmp_path / "weights.db"), segment_tokens=4, model_exit=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await answer_first(pilot, app)
        await pilot.press("minus")
        store = app.ensemble.weight_store
        await wait_until(pilot, lambda: len(store.choices()) == 1)
        [choice] = store.choices()
        wins = app.screen.chat.turns[-1].final.wins
        assert choice.kind == "thumbs-down" and choice.rewards == {
            n: 1 - c / sum(wins.values()) for n, c in wins.items()
        }
        assert choice.message_id == app.screen.chat.turns[-1].message_id


async def test_a_version_that_cannot_start_leaves_the_answer_as_it_was(monkeypatch):
    app = app_with(*pair())
    async with app.run_test(size=(80, 24)) as pilot:
        view = await answer_first(pilot, app)
        first = app.screen.chat.turns[-1]
        from specem_local.engine import AnswerStream

        tried = []

        def broken(stream):
            tried.append(stream)
            raise RuntimeError("out of memory")

        monkeypatch.setattr(AnswerStream, "__next__", broken)
        await pilot.press("r")
        toasts = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        await wait_until(pilot, lambda: tried and any("out of memory" in t for t in toasts()))  # r did try
        await wait_until(pilot, lambda: answered(app) and view.turn is first)
        assert first.alternatives == [] and app.screen.chat.turns[-1] is first
    assert [t.kind for t in saved_chat().turns[1].versions()] == [""]


async def test_f1_shows_the_keys_and_the_personal_leaderboard(tmp_path):
    from textual.widgets import Markdown

    from specem_tui.screens.help import HelpScreen

    app = app_with(*pair(), weight_store=WeightStore(tmp_path / "weights.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await answer_first(pilot, app)
        await pilot.press("minus", "f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = app.screen.query_one(Markdown).source
        assert "| g (in the inspector, last answer) |" in text and "## Your leaderboard" in text
        assert "| big | " in text and "+0.0 -" in text
