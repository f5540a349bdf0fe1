"""How sure an answer is, in the chat app (issue 55): u tints each segment by how sure it is,
an unsure answer says so under it, and the inspector says why a segment is unsure."""

from __future__ import annotations

from textual.style import Style

from specem_tui.screens.inspector import InspectorScreen
from specem_tui.widgets.answer import AnswerView, SegmentText, sureness_style
from tests.engine.conftest import fake_member
from tests.tui.pilot import answered, ask, chat_ready, data_dir, wait_until
from tests.tui.test_chat import app_with

__all__ = ["data_dir"]  # the autouse fixture

ANSWER = "Forty-two, since six sevens make forty-two."


def tinted(view: AnswerView) -> list[str]:
    """The background colour of each segment drawn (None where there is none)."""
    content = view.query_one(SegmentText).render()
    return [span.style.background for span in content.spans if isinstance(span.style, Style)]  # type: ignore[attr-defined]


async def test_u_tints_the_segments_by_how_sure_each_is_and_an_unsure_answer_says_so():
    # a weakly sure member: its tokens' probabilities are low, so its segments are unsure
    members = (fake_member("big", ANSWER, n_params=3000, strength=1.0), fake_member("small", "No idea.", strength=1.0))
    app = app_with(*members, abstain_below=0.99)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: chat_ready(app))
        await ask(pilot, app, "What is six times seven?")
        await wait_until(pilot, lambda: answered(app))
        view = app.screen.query(AnswerView).last()
        final = view.turn.final
        assert final is not None and final.unsure and final.confidence < 0.5
        assert "unsure: confidence" in str(view.border_subtitle)
        assert not any(tinted(view))
        view.focus()
        await pilot.press("u")
        await wait_until(pilot, lambda: view.tint_sureness and not view.show_markdown)
        assert any(str(colour) for colour in tinted(view) if colour is not None)
        sure = [e.sure for e in view.turn.rounds if e.sure is not None]
        assert sure and min(sure) < 0.5
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        why = str(app.screen.query_one("#why").render())
        assert "Sure: " in why and "least likely token had probability" in why


def test_the_tint_and_the_reason_in_words():
    assert sureness_style(None) == Style() and sureness_style(0.9) == Style()
    assert sureness_style(0.6) != sureness_style(0.3) != Style()
