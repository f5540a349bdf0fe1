"""Choice points inside a larger answer (issue 56): where a JSON answer being written reaches a
value its schema allows only a few of (an ``enum`` field among others, an item of an array of
labels), that value is not drafted: every member scores every option in context and the task's
weights pick it (``option_answers.option_vote``), and the rest is written in rounds as before.

Pure functions over strings and schemas: where the committed JSON text stands (``value_path``),
what the schema says of the value there (``schema_at``), and so the options there, if any
(``choice_point``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specem_local.engine import options as opt
from specem_local.engine.request import AnswerRequest

Path = tuple[str | int, ...]  # object keys and array indices, from the root to a value


@dataclass(frozen=True)
class Place:
    """Where a value of the answer stands: its ``path`` from the root, and what of it is written
    already (``begun``: the format may force its first characters, the quote of a string)."""

    path: Path
    begun: str = ""


def value_path(text: str) -> Place | None:
    """Where the value that ``text`` (a JSON text cut anywhere) ends in stands: one that begins
    there, or a string or other scalar under way; None after a whole value, inside a key, or in
    what is not JSON."""
    frames: list[list[Any]] = []  # ["object", key] or ["array", index]
    state = "value"  # what may come next: "value", "key", "colon", "scalar" (one under way), "after" (a value)
    chars: list[str] | None = None  # the string being read
    escaped, began = False, 0
    for at, char in enumerate(text):
        if chars is not None:
            chars.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                read = _decoded(chars)
                if read is None:
                    return None
                if state == "key":
                    frames[-1][1], state = read, "colon"
                else:
                    state = "after"
                chars = None
            continue
        if char in " \t\r\n":
            if state == "scalar":
                state = "after"
            continue
        if char == '"' and state in ("key", "value"):
            chars, began = [char], at
        elif char == "{" and state == "value":
            frames.append(["object", None])
            state = "key"
        elif char == "[" and state == "value":
            frames.append(["array", 0])
            state = "value"
        elif char == ":" and state == "colon":
            state = "value"
        elif char == "," and frames and state in ("after", "scalar"):
            frame = frames[-1]
            if frame[0] == "array":
                frame[1] += 1
            state = "key" if frame[0] == "object" else "value"
        elif char in "}]" and frames and state in ("after", "scalar", "key", "value"):
            frames.pop()
            state = "after"
        elif state == "value" and char not in '{}[]:,"':
            state, began = "scalar", at  # a number, true, false or null, under way
        elif state != "scalar" or char in '{}[]:,"':
            return None  # not JSON: nothing is known of where it stands
    path = tuple(frame[1] for frame in frames)
    if chars is not None:
        return Place(path, text[began:]) if state == "value" else None
    if state == "scalar":
        return Place(path, text[began:])
    return Place(path) if state == "value" else None


def _decoded(chars: list[str]) -> str | None:
    try:
        return json.loads("".join(chars))
    except ValueError:
        return None


def schema_at(root: Any, path: Path) -> Any:
    """The schema of the value at ``path`` in an answer to ``root``: through ``properties``
    (``additionalProperties`` for a key not listed), ``prefixItems`` and ``items``, each local
    ``$ref`` followed; None where the schema does not say one thing (a union, a key it does not
    name)."""
    node = opt.followed(root, root)
    for step in path:
        if not isinstance(node, dict):
            return None
        if isinstance(step, str):
            listed = node.get("properties")
            node = listed.get(step) if isinstance(listed, dict) and step in listed else node.get("additionalProperties")
        else:
            first = node.get("prefixItems")
            node = first[step] if isinstance(first, list) and step < len(first) else node.get("items")
        node = opt.followed(root, node)
    return node if isinstance(node, dict) else None


@dataclass(frozen=True)
class ChoicePoint:
    """A value the answer reaches that is one of a few ``options`` (each option's text begins
    with ``begun``, what is written of it already)."""

    options: opt.Options
    begun: str = ""

    @property
    def rests(self) -> tuple[str, ...]:
        """What each option adds to the answer."""
        return tuple(text[len(self.begun) :] for text in self.options.texts)


def choice_point(schema: Any, text: str) -> ChoicePoint | None:
    """The options of the value the end of ``text`` (an answer to ``schema`` written so far)
    begins or is writing, when that value is one of a few (``options.options_in``) and no
    option's text begins another's (a chosen ``1`` could not be told from the start of ``12``);
    only those that begin with what is written of it."""
    place = value_path(text)
    if place is None:
        return None
    options = opt.options_in(schema_at(schema, place.path))
    if options is None:
        return None
    kept = allowed_options(options, lambda option: option.startswith(place.begun))
    return ChoicePoint(kept, place.begun) if kept is not None else None


def allowed_options(options: opt.Options, allows: Any) -> opt.Options | None:
    """The options the format's matcher allows here (``allows(text)``), when two or more are."""
    kept = [i for i, text in enumerate(options.texts) if allows(text)]
    if len(kept) < 2:
        return None
    return opt.Options(*(tuple(column[i] for i in kept) for column in (options.values, options.texts, options.words)))


def has_choices(schema: Any) -> bool:
    """Whether any part of ``schema`` allows only a few values (``options.options_in``): an answer
    to it may meet a choice point, so every verifier must keep up with it."""
    if isinstance(schema, dict):
        return opt.options_in(schema) is not None or any(has_choices(value) for value in schema.values())
    if isinstance(schema, list):
        return any(has_choices(value) for value in schema)
    return False


def choices_ahead(request: AnswerRequest) -> bool:
    """Whether an answer asked this way may meet a choice point: ``choice_points`` is on, with
    options scored at all (``score_options``), and its format is a JSON Schema with a part that
    allows only a few values."""
    settings, chosen = request.settings, request.output_format
    return settings.score_options and settings.choice_points and chosen is not None and has_choices(chosen.schema)
