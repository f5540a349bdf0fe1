"""Chats saved as JSON files in the user data dir, one file per chat.

Writes are atomic (temporary file, fsync, rename), so a crash mid-save leaves the previous
version intact. A file that cannot be read is skipped in the history list, never fatal.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from specem_local.config import APP_NAME

DATA_ENV = "SPECEM_DATA_DIR"
FORMAT_VERSION = 1


def chats_dir() -> Path:
    """``$SPECEM_DATA_DIR/chats`` or the platform's user data dir (tests point it elsewhere)."""
    base = os.environ.get(DATA_ENV) or platformdirs.user_data_dir(APP_NAME)
    return Path(base) / "chats"


@dataclass
class Turn:
    role: str  # "user" or "assistant"
    content: str
    rounds: list[dict[str, Any]] = field(default_factory=list)  # RoundEvent.to_dict() per round
    final: dict[str, Any] | None = None  # FinalEvent.to_dict()

    @property
    def stopped(self) -> bool:
        return bool(self.final) and self.final.get("finish_reason") == "cancelled"


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
        return {"version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Chat:
        version = data.get("version", 0)
        if version > FORMAT_VERSION:
            raise ValueError(f"chat file format {version} is newer than this app ({FORMAT_VERSION})")
        turns = [Turn(**turn) for turn in data.get("turns", [])]
        return cls(data["id"], data.get("title", "Chat"), data["created"], data["updated"], turns)


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
    path = (directory or chats_dir()) / f"{chat_id}.json"
    return Chat.from_json(json.loads(path.read_text("utf-8")))


def list_chats(directory: Path | None = None) -> list[Chat]:
    """Every readable chat, newest first."""
    directory = directory or chats_dir()
    chats = []
    for path in directory.glob("*.json") if directory.exists() else []:
        try:
            chats.append(Chat.from_json(json.loads(path.read_text("utf-8"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(chats, key=lambda chat: chat.updated, reverse=True)


def chat_markdown(chat: Chat) -> str:
    """The chat as Markdown, with who wrote how much of each answer."""
    lines = [f"# {chat.title}", ""]
    for turn in chat.turns:
        if turn.role == "user":
            lines += ["## You", "", turn.content, ""]
            continue
        lines += ["## Ensemble", "", turn.content + (" *(stopped)*" if turn.stopped else ""), ""]
        if turn.final:
            wins = ", ".join(f"{name}: {count}" for name, count in turn.final.get("wins", {}).items())
            lines += [f"*Segments won — {wins}*", ""]
    return "\n".join(lines)


def export_markdown(chat: Chat, directory: Path) -> Path:
    target = directory / f"specem-chat-{chat.id}.md"
    target.write_text(chat_markdown(chat), encoding="utf-8")
    return target
