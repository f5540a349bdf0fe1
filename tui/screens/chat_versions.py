"""The user in the loop (issue 27), for the chat screen: other versions of the last answer
(regenerate, go on from a picked candidate, each member alone to compare), an edited last
question, and the user's choices (a pick, thumbs, the best of a comparison) as labels that
move the kept weights, with undo.

Every version is kept in the history and browsable with [ and ]; on the last answer the
version on screen is the one the conversation goes on from. A new version is saved as an
alternative while it streams and becomes the one shown when it ends, so one that fails before
its first segment is taken back without touching the others.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from textual.containers import VerticalScroll

from specem_local.engine import (
    ENSEMBLE,
    AnswerStream,
    Ensemble,
    best_rewards,
    leaderboard,
    learned,
    pick_rewards,
    thumbs_rewards,
)
from specem_local.errors import SpecemError
from specem_local.events import Candidate
from specem_local.storage.chats import GIVEN, Chat, Turn, picked_start, with_version_shown
from specem_local.storage.history import AnswerRecord, History
from specem_local.storage.weights import RESET
from specem_tui.screens.inflight import InFlight
from specem_tui.screens.settings import ChatSettings
from specem_tui.widgets.answer import AnswerView, UserMessage
from specem_tui.widgets.prompt import PromptInput
from specem_tui.widgets.weights import WeightsPanel


class AnswerVersions:
    """Mixed into ``ChatScreen``, whose state and answer plumbing (``open_answer``, ``begin``,
    ``busy``, ``forget_question``) it uses."""

    chat: Chat
    history: History
    ensemble: Ensemble
    settings: ChatSettings
    colours: dict[str, str]
    inflight: InFlight | None
    editing: Turn | None
    open_answer: Callable[..., AnswerStream | None]
    begin: Callable[..., None]
    busy: Callable[[], bool]
    forget_question: Callable[[list[int]], None]
    notify: Callable[..., None]
    query_one: Callable[..., Any]

    # -- requests from an answer ----------------------------------------------------------------------
    def on_answer_view_requested(self, message: AnswerView.Requested) -> None:
        view, action = message.view, message.action
        if action in ("best", "thumbs-up", "thumbs-down"):
            self.label(view, action)
            return
        if self.busy():
            return
        if action == "version":
            self.step_version(view, message.step)
        elif not self.is_last(view):
            self.notify("Only the last answer can be regenerated, edited or compared.", severity="warning")
        elif action == "regenerate":
            self.regenerate(view)
        elif action == "edit":
            self.edit_question()
        elif action == "compare":
            self.compare(view, [name for name in self.settings.models])

    def is_last(self, view: AnswerView) -> bool:
        return bool(self.chat.turns) and view.shown is self.chat.turns[-1]

    # -- versions of the last answer ------------------------------------------------------------------
    def start_version(
        self, view: AnswerView, version: Turn, messages: list[dict[str, str]], models: list[str] | None
    ) -> bool:
        """Stream ``version`` of the last answer into ``view``; False if it cannot start."""
        answer = self.open_answer(messages, models, seed=random.randrange(2**31))
        if answer is None:
            return False
        shown = view.shown
        shown.alternatives.append(version)
        record = self.record_version(version, shown)
        view.display_version(version)
        alone = version.kind.startswith("alone: ")
        after = None if alone else lambda turn: self.make_shown(view, turn)
        self.begin(InFlight(answer, view, record=record, after=after))
        return True

    def record_version(self, version: Turn, shown: Turn) -> AnswerRecord | None:
        try:
            return self.history.start_version(self.chat, version, shown)
        except SpecemError as error:
            self.notify(f"This answer is not being saved: {error}", severity="error", timeout=10)
            return None

    def make_shown(self, view: AnswerView, version: Turn) -> None:
        """``version`` becomes the answer the conversation goes on from."""
        shown = view.shown
        if version is shown:
            return
        if shown.message_id is not None and version.message_id is not None:
            try:
                self.history.show_version(shown, version)
            except SpecemError as error:
                self.notify(f"Not saved: {error}", severity="error")
        index = next(i for i, turn in enumerate(self.chat.turns) if turn is shown)
        self.chat.turns[index] = with_version_shown(shown, version)
        view.display_version(version, self.chat.turns[index])

    def drop_version(self, view: AnswerView, record: AnswerRecord | None) -> None:
        """A version that failed before its first segment: gone, and the answer shown is back."""
        version = view.turn
        if version in view.shown.alternatives:
            view.shown.alternatives.remove(version)
        if record is not None:
            self.forget_question([record.message_id])
        view.display_version(view.shown)

    def step_version(self, view: AnswerView, step: int) -> None:
        versions = view.shown.versions()
        if len(versions) < 2:
            self.notify("This answer has one version: r regenerates it, k compares each model alone.")
            return
        version = versions[(versions.index(view.turn) + step) % len(versions)]
        if self.is_last(view):
            self.make_shown(view, version)  # the next question follows what is on screen
        else:
            view.display_version(version)

    def regenerate(self, view: AnswerView) -> None:
        self.start_version(view, Turn("assistant", "", kind="regenerated"), self.chat.messages(-1), None)

    def compare(self, view: AnswerView, queue: list[str]) -> None:
        """Each model alone on the same conversation, one after another, kept beside the answer."""
        if len(self.settings.models) < 2:
            self.notify("One model is answering: there is nothing to compare it with.")
            return
        if not queue:
            view.display_version(view.shown)
            self.refresh_weights()  # the panel showed the last model alone
            self.notify("Compared. [ and ] show each answer; b marks the best one.")
            return
        name, rest = queue[0], queue[1:]
        if self.start_version(view, Turn("assistant", "", kind=f"alone: {name}"), self.chat.messages(-1), [name]):
            assert self.inflight is not None
            self.inflight.after = lambda turn: self.refresh_weights() if turn.stopped else self.compare(view, rest)

    def go_on_from(self, view: AnswerView, round_index: int, candidate: Candidate) -> None:
        """The answer cut at that round, the picked candidate in the winner's place, and the
        ensemble going on from it; the pick is a label (this model over the winner's)."""
        winner = view.turn.rounds[round_index].author
        version = picked_start(view.turn, round_index, candidate.text, candidate.model)
        messages = [*self.chat.messages(-1), {"role": "assistant", "content": version.prefix}]
        if self.start_version(view, version, messages, None):
            self.choose("pick", pick_rewards(candidate.model, winner), version.message_id)

    def edit_question(self) -> None:
        self.editing = self.chat.turns[-2]
        prompt = self.query_one(PromptInput)
        prompt.text = self.editing.content
        prompt.focus()
        self.notify("Edit the question; Enter asks it again (the old question and its answers are kept).")

    def keep_edit(self, question: Turn, old: Turn) -> None:
        try:
            self.history.mark_edited(question, old)
        except SpecemError as error:
            self.notify(f"Not saved: {error}", severity="error")

    def put_back(self, replaced: list[Turn]) -> None:
        """An edited question whose answer could not start: the question and answer it replaced
        come back (the edit stays in the input box)."""
        self.chat.turns += replaced
        for turn in replaced:
            turn.alternatives = [t for t in turn.alternatives if t not in replaced]
        conversation = self.query_one("#conversation", VerticalScroll)
        conversation.mount(UserMessage(replaced[0]), AnswerView(replaced[1], self.colours))
        self.editing = replaced[0]

    # -- choices ------------------------------------------------------------------------------------
    def label(self, view: AnswerView, action: str) -> None:
        """A thumb on the version on screen, or that version marked the best of a comparison."""
        turn = view.turn
        if not turn.done:
            self.notify("Wait for the answer to finish.", severity="warning")
            return
        if turn.final is None:  # failed, or a message a client sent with its request
            why = "was sent with a request, not written here" if turn.kind == GIVEN else "did not finish"
            self.notify(f"This message {why}: there is nothing for the weights to learn from it.")
            return
        if action == "best":
            alone = [t.kind.removeprefix("alone: ") for t in view.shown.versions() if t.kind.startswith("alone: ")]
            if not alone:
                self.notify("Compare first (k): b marks the best of the answers compared.")
                return
            best = turn.kind.removeprefix("alone: ") if turn.kind.startswith("alone: ") else ENSEMBLE
            kind = "best" if best != ENSEMBLE else "best-ensemble"
            self.choose(kind, best_rewards(best, alone, turn.wins), turn.message_id)
            return
        rewards = thumbs_rewards(turn.wins, up=action == "thumbs-up")
        if not rewards:
            self.notify("One model wrote all of it: nothing for the weights to learn (b in a comparison can).")
            return
        self.choose(action, rewards, turn.message_id)

    def choose(self, kind: str, rewards: dict[str, float], message_id: int | None) -> None:
        """Keep a choice and move the weights by it; say what changed."""
        store = self.ensemble.weight_store
        if store is None:
            self.notify("This ensemble keeps no weights: the choice was not kept.", severity="warning")
            return
        members = [m for m in self.ensemble.members if m.name in self.settings.models]
        try:
            learned.choose(store, members, self.ensemble.settings, kind, rewards, message_id)
        except SpecemError as error:
            self.notify(f"The choice was not kept: {error}", severity="error")
            return
        moved = ", ".join(f"{name} {'+' if reward > 0.5 else '-'}" for name, reward in rewards.items() if reward != 0.5)
        self.notify(f"Kept your {kind.replace('-', ' ')}" + (f" ({moved}); Ctrl+Z undoes it." if moved else "."))
        self.refresh_weights()

    def action_undo_choice(self) -> None:
        """Ctrl+Z: take back the latest choice (or reset); in the input box holding text it
        undoes the typing, as a text box does."""
        prompt = self.query_one(PromptInput)
        if prompt.has_focus and prompt.text:
            prompt.action_undo()
            return
        store = self.ensemble.weight_store
        members = [m for m in self.ensemble.members if m.name in self.settings.models]
        try:
            undone = learned.undo_choice(store, members) if store is not None else None
        except SpecemError as error:
            self.notify(str(error), severity="error")
            return
        if undone is None:
            self.notify("No choice to undo.")
        elif undone.kind == RESET:
            self.notify("Brought back the weights the reset forgot.")
        else:
            self.notify(f"Undid your {undone.kind.replace('-', ' ')}.")
        self.refresh_weights()

    def leaderboard(self) -> dict[str, dict[str, float]] | None:
        """The personal leaderboard for the help screen; None when the history cannot be read."""
        store = self.ensemble.weight_store
        try:
            made = [(c.kind, c.rewards) for c in store.choices() if not c.undone] if store is not None else []
            return leaderboard(self.history.segments_won(), made)
        except SpecemError:
            return None

    def refresh_weights(self) -> None:
        models = list(self.settings.models)
        weights, origin = self.ensemble.starting_weights(models), self.ensemble.weights_origin(models)
        self.query_one(WeightsPanel).reset(weights, models, origin)
