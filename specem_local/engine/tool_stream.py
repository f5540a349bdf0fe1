"""A tool-call envelope (``tools.py``) read as it streams: the message's text so far, or each
call's name and arguments so far, without a JSON parser (the envelope's layout is fixed), so a
client sees a call's name once whole and its arguments as they come (``ReplyStream``), and an
answer cut short hands on only what is whole (``whole_part``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from specem_local.engine.tools import ToolCall, ToolReply

MESSAGE_START, CALLS_START = '{"response": "', '{"tool_calls": ['


@dataclass
class StreamedCall:
    name: str | None = None
    arguments: str = ""  # the JSON text of its arguments so far
    complete: bool = False


def partial_reply(text: str) -> tuple[str | None, list[StreamedCall]]:
    """What an envelope written up to here already says: the message's text so far (None when
    it is calls, or not yet known), and each call's name and arguments so far. The envelope's
    layout is fixed (``format_compiler.JSON_OPTIONS``), so a prefix is read without a JSON parser."""
    if text.startswith(MESSAGE_START):
        return _string_prefix(text, len(MESSAGE_START))[0], []
    if not text.startswith(CALLS_START):
        return None, []
    calls, position = [], len(CALLS_START)
    name_start, arguments_start = '{"name": "', '", "arguments": '
    while text.startswith(name_start, position):
        call = StreamedCall()
        calls.append(call)
        name, end = _string_prefix(text, position + len(name_start))
        if end is None or not text.startswith(arguments_start, end):
            return None, calls  # the name is not whole yet
        call.name = name
        call.arguments, end = _object_prefix(text, end + len(arguments_start))
        if end is None:
            return None, calls
        call.complete = text.startswith("}", end + 1)
        if not call.complete:
            return None, calls
        position = end + 2  # past the call's closing brace
        if not text.startswith(", ", position):
            break
        position += 2
    return None, calls


def whole_part(text: str) -> ToolReply:
    """What of an envelope cut short (``max_tokens``) can be handed on: the message's text so
    far, or the calls that are whole (a cut call is dropped, never sent unparseable)."""
    content, calls = partial_reply(text)
    if content is not None:
        return ToolReply(content=content)
    return ToolReply(tuple(ToolCall(c.name or "", json.loads(c.arguments)) for c in calls if c.complete))


def _string_prefix(text: str, start: int) -> tuple[str, int | None]:
    """A JSON string's value from ``start`` (after its opening quote): the decoded text so far
    and the index of its closing quote (None when it is not closed yet)."""
    index, escaped = start, False
    while index < len(text):
        if escaped:
            escaped = False
        elif text[index] == "\\":
            escaped = True
        elif text[index] == '"':
            return json.loads(text[start - 1 : index + 1]), index
        index += 1
    body = text[start:]
    body = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", body)  # an escape not whole yet
    body = re.sub(r"\\u[dD][89abAB][0-9a-fA-F]{2}$", "", body)  # half of a surrogate pair
    try:
        return json.loads(f'"{body}"'), None
    except ValueError:
        return "", None


def _object_prefix(text: str, start: int) -> tuple[str, int | None]:
    """A JSON object's text from ``start``: as far as it is written, and the index of its
    closing brace (None when it is not closed yet)."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return text[start : index + 1], index
    return text[start:], None


class ReplyStream:
    """An envelope as it streams, as the pieces a client shows: the message's new text, a
    call's name once whole, its arguments' new text, each call once it is complete."""

    def __init__(self) -> None:
        self.text = ""
        self._content = 0
        self._calls: list[StreamedCall] = []

    def feed(self, segment: str) -> tuple[str, list[tuple[int, StreamedCall, str, bool]]]:
        """Take a segment; return the message's new text and, per call that moved, (index, the
        call so far, its new arguments text, whether its name is new)."""
        self.text += segment
        content, calls = partial_reply(self.text)
        new_content = "" if content is None else content[self._content :]
        self._content += len(new_content)
        moved = []
        for index, call in enumerate(calls):
            before = self._calls[index] if index < len(self._calls) else StreamedCall()
            named = call.name is not None and before.name is None
            fragment = call.arguments[len(before.arguments) :] if call.name is not None else ""
            if named or fragment or call.complete != before.complete:
                moved.append((index, call, fragment, named))
        self._calls = calls
        return new_content, moved
