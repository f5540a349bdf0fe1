"""Chats as files: the JSON that version 0.1 saved one file per chat (read once, into the
history database) and that ``specem history export`` writes, and Markdown for reading.

Files written by older versions are upgraded when read, one step per format version. A file
that cannot be read is a ``ValueError`` with a reason.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specem_local.dirs import data_dir, open_descriptor, replace_file
from specem_local.events import FinalEvent, RoundEvent, event_from_dict, member_news
from specem_local.storage.chats import EVENT_FORMAT, GIVEN, Chat, Turn
from specem_local.text import printable

FORMAT_VERSION = EVENT_FORMAT  # a chat file's version is that of its event records


def chats_dir() -> Path:
    """Where version 0.1 kept chats: ``$SPECEM_DATA_DIR/chats`` or the user data dir's."""
    return data_dir() / "chats"


def turn_to_json(turn: Turn) -> dict[str, Any]:
    """A turn in the file format; how it came (``kind``) and its other versions only when it has them."""
    data: dict[str, Any] = {
        "role": turn.role,
        "content": turn.content,
        "rounds": [event.to_dict() for event in turn.rounds],
        "final": turn.final.to_dict() if turn.final else None,
        "error": turn.error,
    }
    if turn.kind:
        data["kind"] = turn.kind
    if turn.alternatives:
        data["alternatives"] = [turn_to_json(other) for other in turn.alternatives]
    return data


def chat_to_json(chat: Chat) -> dict[str, Any]:
    """A chat in the file format (what ``specem history export --format json`` writes)."""
    return {
        "version": FORMAT_VERSION,
        "id": chat.id,
        "title": chat.title,
        "created": chat.created,
        "updated": chat.updated,
        "turns": [turn_to_json(turn) for turn in chat.turns],
    }


def turn_from_json(data: Any) -> Turn:
    if not isinstance(data, dict) or data.get("role") not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"not a turn: {str(data)[:60]}")
    if not isinstance(data.get("content"), str) or not isinstance(data.get("rounds", []), list):
        raise ValueError("a turn needs text content and a list of rounds")
    events = [event_from_dict(item) for item in data.get("rounds", [])]
    final = event_from_dict(data["final"]) if data.get("final") is not None else None
    rounds = [event for event in events if isinstance(event, RoundEvent)]
    if len(rounds) != len(events) or not isinstance(final, (FinalEvent, type(None))):
        raise ValueError("a turn's rounds and final record are of the wrong type")
    error, kind, others = data.get("error"), data.get("kind", ""), data.get("alternatives", [])
    if not isinstance(kind, str) or not isinstance(others, list):
        raise ValueError("a turn's kind must be text and its alternatives a list")
    alternatives = [turn_from_json(other) for other in others]
    return Turn(
        data["role"], data["content"], rounds, final, error if isinstance(error, str) else None, kind, alternatives
    )


MAX_CHAT_FILE = 256 << 20  # bytes of one chat file
CHAT_ID = re.compile(r"[^\x00-\x1f\x7f/\\]{1,200}")  # an id becomes part of an exported file's name
LAST_MOMENT = 253_402_300_799  # 9999-12-31 23:59:59 UTC: later times cannot be shown as dates


def chat_from_json(data: Any) -> Chat:
    """A chat from a file's JSON (upgraded from older versions); ``ValueError`` says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"not a chat file (a JSON {type(data).__name__}, not an object)")
    data = upgrade(data)
    if not isinstance(data.get("id"), str) or not isinstance(data.get("turns", []), list):
        raise ValueError("not a chat file (no id, or turns that are not a list)")
    if not CHAT_ID.fullmatch(data["id"]):
        raise ValueError("a chat's id is 1 to 200 characters, none of them a control character, / or \\")
    created, updated = data.get("created", 0.0), data.get("updated", 0.0)
    if not all(
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= LAST_MOMENT
        for value in (created, updated)
    ):
        raise ValueError("a chat's created and updated times must be seconds since 1970, before the year 10000")
    turns = [turn_from_json(turn) for turn in data.get("turns", [])]
    return Chat(data["id"], str(data.get("title", "Chat")), created, updated, turns, "import")


def read_chat_file(path: Path) -> Chat:
    """A chat file; ``OSError`` when it cannot be read, ``ValueError`` when it is not a chat (a
    pipe or a device is not read at all: it could block, or never end)."""
    facts = path.stat()
    if not stat.S_ISREG(facts.st_mode) or facts.st_size > MAX_CHAT_FILE:
        raise ValueError(f"not a chat file (not a regular file of at most {MAX_CHAT_FILE >> 20} MiB)")
    try:
        data = json.loads(path.read_text("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text ({error.reason})") from None
    except RecursionError:
        raise ValueError("nested too deeply to be a chat file") from None
    return chat_from_json(data)


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 called the final record's ``drafters_per_round`` ``models_per_round``, and its
    rounds did not say why the winner won: read that back from their candidates."""
    turns = data.get("turns")
    for turn in turns if isinstance(turns, list) else []:  # anything else is refused after the upgrade
        if not isinstance(turn, dict):
            continue
        final = turn.get("final")
        if isinstance(final, dict) and "models_per_round" in final:
            final["drafters_per_round"] = final.pop("models_per_round")
        rounds = turn.get("rounds")
        for event in rounds if isinstance(rounds, list) else []:
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
        if runner_up is None:
            return {"runner_up": None, "ranked_first_by": firsts, "discounted": None}
        lost = runner_up["combined"] > best["combined"] and runner_up.get("copied")
        return {
            "runner_up": runner_up["model"],
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


def speaker(turn: Turn) -> str:
    """Who a message is from, as a heading says it."""
    if turn.role == "tool":
        return "Tool result"
    if turn.kind == GIVEN:
        return f"{turn.role.capitalize()} (sent with the request)"
    return "Ensemble" if turn.role == "assistant" else turn.role.capitalize()


def chat_markdown(chat: Chat) -> str:
    """The chat as Markdown, with who wrote how much of each answer."""
    lines = [f"# {chat.title}", ""]
    for turn in chat.turns:
        if turn.role == "user":
            lines += ["## You", "", turn.content, ""]
            continue
        note = f" *({turn.ending})*" if turn.ending else ""
        lines += [f"## {speaker(turn)}", ""]
        if turn.reasoning:  # thought before the format: folded, as the chat app shows it
            lines += ["<details><summary>Reasoning</summary>", "", turn.reasoning, "", "</details>", ""]
        lines += [turn.content + note, ""]
        if turn.final:
            wins = ", ".join(f"{name}: {count}" for name, count in turn.wins.items())
            lines += [f"*Segments won — {wins}*", ""]
            lines += [f"*{line}*\n" for line in member_news(turn.final, set())]  # a machine that failed
        if turn.alternatives:
            kinds = ", ".join(other.kind or "asked" for other in turn.alternatives)
            lines += [f"*{len(turn.alternatives)} other version(s) kept ({kinds}): the JSON export has them.*", ""]
    return "\n".join(lines)


def export_chat(chat: Chat, target: Path, format_name: str = "markdown") -> Path:
    """Write the chat as Markdown or JSON, readable by the user only (as the history is)."""
    if format_name == "markdown":
        text = chat_markdown(chat)
    else:
        text = json.dumps(chat_to_json(chat), ensure_ascii=False, indent=1)
    descriptor = open_descriptor(target)
    if descriptor is not None and os.isatty(descriptor):  # a title's escape codes never reach a terminal
        text = printable(text)
    replace_file(target, text, mode=0o600)  # whole or not at all, user-only even over an old export
    return target
