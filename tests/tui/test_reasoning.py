"""Think first, then the format, in the chat app (issue 46): an answer recorded with its
reasoning (``specem serve`` or ``specem run`` with a schema) shows the JSON, its reasoning folded
above it (dim when unfolded), and the inspector opens on a round of either phase."""

from __future__ import annotations

import asyncio
import time

from textual.widgets import Collapsible, Markdown

from specem_local.events import FinalEvent
from specem_local.storage.chats import Turn
from specem_local.storage.history import History
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.widgets.answer import AnswerView
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_thinking import REPLY, SCHEMA, WORKING, thinker
from tests.tui.pilot import chat_ready, data_dir, open_recorded, wait_until
from tests.tui.test_chat import app_with

__all__ = ["data_dir"]  # the autouse fixture


def screen_text(app) -> str:
    return app.export_screenshot().replace("&#160;", " ")


async def inspect_round(app, pilot, view: AnswerView, index: int) -> str:
    """Select round ``index`` of the answer and open the inspector on it; its text."""
    view.focus()
    view.show_markdown = False
    view.selected = index
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5)
    await pilot.pause()
    shown = screen_text(app)
    await pilot.press("escape")
    await wait_until(pilot, lambda: not isinstance(app.screen, InspectorScreen), 5)
    return shown


async def test_a_recorded_answer_shows_its_reasoning_folded_and_the_inspector_works_in_both_phases():
    served = fake_ensemble(thinker("a", n_params=3000), thinker("b"), reasoning_budget=256)
    record = History().start_new_chat("serve", [Turn("user", "What is six times seven?")])
    for event in served.stream(QUESTION, schema=SCHEMA, max_tokens=300):
        record.event(event)
    served.close()
    app = app_with(fake_member("big", "Fine.", n_params=3000), fake_member("small", "Fine."))
    async with app.run_test(size=(100, 40)) as pilot:
        await open_recorded(pilot, app, record.chat_id, 1)
        view = app.screen.query_one(AnswerView)
        folded = view.query_one(Collapsible)
        assert folded.display and folded.collapsed and "Reasoning" in screen_text(app)
        assert REPLY.replace('"', "") in screen_text(app).replace("&quot;", "").replace('"', "")
        folded.collapsed = False
        await pilot.pause()
        assert WORKING.split(":")[0] in screen_text(app)  # "Six times seven", unfolded
        rounds = view.turn.rounds
        reasoning = next(i for i, e in enumerate(rounds) if e.phase == "reasoning")
        answering = next(i for i, e in enumerate(rounds) if e.phase == "answer" and e.decision != "forced")
        for index in (reasoning, answering):
            shown = await inspect_round(app, pilot, view, index)
            written = rounds[index].text.strip()[:8]
            assert written and written in shown.replace("&quot;", '"'), (index, written)


async def test_an_answer_that_ends_before_its_reasoning_fold_has_mounted_is_drawn_whole():
    """A Collapsible mounts its contents a frame after itself: an answer that ends in that frame
    (fast members on a loaded machine; CI once failed here) still shows its JSON and reasoning."""
    served = fake_ensemble(thinker("a", n_params=3000), thinker("b"), reasoning_budget=256)
    events = list(served.stream(QUESTION, schema=SCHEMA, max_tokens=300))
    served.close()
    app = app_with(fake_member("big", "Fine.", n_params=3000), fake_member("small", "Fine."))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        view = AnswerView(Turn("assistant", ""), {})
        app.screen.query_one("#conversation").mount(view)
        deadline = time.monotonic() + 10
        while not view.query(Markdown):  # the view's own children are there, the fold's are not
            assert time.monotonic() < deadline, "the answer's view never mounted its Markdown"
            await asyncio.sleep(0)  # one turn of the loop at a time: the fold mounts a frame later
        assert not view.query(".reasoning-text")
        for event in events:
            view.turn.add(event)
        assert isinstance(events[-1], FinalEvent) and view.turn.done
        view.finish()
        await wait_until(pilot, lambda: bool(view.query(".reasoning-text")))
        view.query_one(Collapsible).collapsed = False
        await pilot.pause()
        assert WORKING.split(":")[0] in screen_text(app)
        assert REPLY.replace('"', "") in screen_text(app).replace("&quot;", "").replace('"', "")
