"""Chats saved as JSON files in the user data dir, one file per chat.

Writes are atomic (temporary file, fsync, rename), so a crash mid-save leaves the previous
version intact. In memory a chat holds the engine's own event records; they become JSON only
here. Files written by older versions are upgraded when read, one step per format version. A
file that cannot be read is a ``ValueError`` with a reason (skipped in the history list).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specem_local.dirs import data_dir
from specem_local.events import FinalEvent, RoundEvent, event_from_dict

FORMAT_VERSION = 2


def chats_dir() -> Path:
    """``$SPECEM_DATA_DIR/chats`` or the platform's user data dir (tests point it elsewhere)."""
    return data_dir() / "chats"


@dataclass
class Turn:
    role: str  # "user" or "assistant"
    content: str
    rounds: list[RoundEvent] = field(default_factory=list)
    final: FinalEvent | None = None
    error: str | None = None  # the answer failed after it began; the partial answer is kept

    @property
    def stopped(self) -> bool:
        return self.final is not None and self.final.finish_reason == "cancelled"

    @property
    def done(self) -> bool:
        """Finished, stopped or failed: nothing more will stream into it."""
        return self.final is not None or self.error is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "content": self.content,
            "rounds": [event.to_dict() for event in self.rounds],
            "final": self.final.to_dict() if self.final else None,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Any) -> Turn:
        if not isinstance(data, dict) or data.get("role") not in ("user", "assistant"):
            raise ValueError(f"not a turn: {str(data)[:60]}")
        if not isinstance(data.get("content"), str) or not isinstance(data.get("rounds", []), list):
            raise ValueError("a turn needs text content and a list of rounds")
        rounds = [event_from_dict(item) for item in data.get("rounds", [])]
        final = event_from_dict(data["final"]) if data.get("final") is not None else None
        if not all(isinstance(event, RoundEvent) for event in rounds) or not isinstance(
            final, (FinalEvent, type(None))
        ):
            raise ValueError("a turn's rounds and final record are of the wrong type")
        error = data.get("error")
        return cls(data["role"], data["content"], rounds, final, error if isinstance(error, str) else None)


@dataclass
class Chat:
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    turns: list[Turn] = field(default_factory=list)

    def messages(self) -> list[dict[str, str]]:
        """The conversation as the engine takes it (stopped answers included as they stand)."""
        return [{"role": t.role, "content": t.content} for t in self.turns if t.content or t.role == "user"]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "id": self.id,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
            "turns": [turn.to_json() for turn in self.turns],
        }

    @classmethod
    def from_json(cls, data: Any) -> Chat:
        if not isinstance(data, dict):
            raise ValueError(f"not a chat file (a JSON {type(data).__name__}, not an object)")
        data = upgrade(data)
        if not isinstance(data.get("id"), str) or not isinstance(data.get("turns", []), list):
            raise ValueError("not a chat file (no id, or turns that are not a list)")
        created, updated = data.get("created", 0.0), data.get("updated", 0.0)
        if not all(isinstance(value, (int, float)) for value in (created, updated)):
            raise ValueError("a chat's created and updated times must be numbers")
        turns = [Turn.from_json(turn) for turn in data.get("turns", [])]
        return cls(data["id"], str(data.get("title", "Chat")), created, updated, turns)


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 called the final record's ``drafters_per_round`` ``models_per_round``, and its
    rounds did not say why the winner won: read that back from their candidates."""
    for turn in data.get("turns", []):
        if not isinstance(turn, dict):
            continue
        final = turn.get("final")
        if isinstance(final, dict) and "models_per_round" in final:
            final["drafters_per_round"] = final.pop("models_per_round")
        for event in turn.get("rounds", []):
            if isinstance(event, dict) and isinstance(event.get("candidates"), list):
                event.update(_reasons(event.get("author"), event["candidates"]))
    return data


def _reasons(author: Any, candidates: list[Any]) -> dict[str, Any]:
    """What a version-2 round says about why ``author`` won, from its recorded candidates."""
    try:
        voted = {c["model"]: c for c in candidates if c.get("combined") is not None and not c.get("same_as")}
        if author not in voted:
            return {}
        best = voted[author]
        others = [c for name, c in voted.items() if name != author]
        runner_up = max(others, key=lambda c: c["combined"]) if others else None
        firsts = [v for v, share in best["shares"].items() if all(share >= c["shares"].get(v, 0) for c in others)]
        lost = runner_up is not None and runner_up["combined"] > best["combined"] and runner_up.get("copied")
        return {
            "runner_up": runner_up["model"] if runner_up else None,
            "ranked_first_by": firsts,
            "discounted": runner_up["model"] if lost else None,
        }
    except (AttributeError, KeyError, TypeError):
        return {}  # not a round this app wrote; event_from_dict says what is wrong with it


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_version_1}  # version -> next one


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A chat file's data in the current format, upgraded one version at a time."""
    version = data.get("version", 1)
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"chat file format {version!r} is not one this app wrote")
    if version > FORMAT_VERSION:
        raise ValueError(f"chat file format {version} is newer than this app ({FORMAT_VERSION}); update specem-local")
    while version < FORMAT_VERSION:
        data = UPGRADES[version](data)
        version += 1
    return {**data, "version": version}


def save_chat(chat: Chat, directory: Path | None = None) -> Path:
    directory = directory or chats_dir()
    directory.mkdir(parents=True, exist_ok=True)
    chat.updated = time.time()
    target = directory / f"{chat.id}.json"
    fd, temp_name = tempfile.mkstemp(dir=directory, prefix=f".{chat.id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(chat.to_json(), handle, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, target)
    finally:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
    return target


def load_chat(chat_id: str, directory: Path | None = None) -> Chat:
    """A saved chat; ``OSError`` when it cannot be read, ``ValueError`` when it is not a chat."""
    path = (directory or chats_dir()) / f"{chat_id}.json"
    return Chat.from_json(json.loads(path.read_text("utf-8")))


def list_chats(directory: Path | None = None) -> list[Chat]:
    """Every readable chat, newest first."""
    directory = directory or chats_dir()
    chats = []
    for path in directory.glob("*.json") if directory.exists() else []:
        try:
            chats.append(Chat.from_json(json.loads(path.read_text("utf-8"))))
        except (OSError, ValueError):
            continue
    return sorted(chats, key=lambda chat: chat.updated, reverse=True)


def chat_markdown(chat: Chat) -> str:
    """The chat as Markdown, with who wrote how much of each answer."""
    lines = [f"# {chat.title}", ""]
    for turn in chat.turns:
        if turn.role == "user":
            lines += ["## You", "", turn.content, ""]
            continue
        note = " *(stopped)*" if turn.stopped else f" *(failed: {turn.error})*" if turn.error else ""
        lines += ["## Ensemble", "", turn.content + note, ""]
        if turn.final:
            wins = ", ".join(f"{name}: {count}" for name, count in turn.final.wins.items())
            lines += [f"*Segments won — {wins}*", ""]
    return "\n".join(lines)


def export_markdown(chat: Chat, directory: Path) -> Path:
    target = directory / f"specem-chat-{chat.id}.md"
    target.write_text(chat_markdown(chat), encoding="utf-8")
    return target
