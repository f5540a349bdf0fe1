"""Conditions llguidance cannot follow (``if``/``then``/``else``, ``not``, and ``oneOf``, which it
serves as ``anyOf``), rewritten into keywords it follows exactly, where the schema's own words
say every value the condition can meet: the discriminated unions of real schemas (``allOf`` of
``{"if": {"properties": {"type": {"const": "x"}}}, "then": ...}`` over a ``type`` with an enum),
``not`` of required keys or of listed values, and a ``oneOf`` of required keys ("exactly one of
these"). A condition these cannot say stays as written, and is refused downstream.

Pure functions over one node of a schema (a dict, changed in place), no recursion: the caller
walks the schema and then the branches written here.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

# Keywords that say something about a value without constraining it (schemas.py drops them too).
ANNOTATIONS = frozenset(
    {"$comment", "title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly",
     "markdownDescription"}
)  # fmt: skip
MAX_WRITTEN = 262_144  # characters the branches for one node may take (an ``else`` is copied per value)
NOT_OBJECTS = ["null", "boolean", "number", "string", "array"]
NOT_STRINGS = ["null", "boolean", "number", "object", "array"]
Resolve = Callable[[Any], Any]  # a schema, or the schema a local ``$ref`` in it points at
JSON_TYPES = {"string": str, "boolean": bool, "integer": int, "null": type(None)}


def rewrite_conditions(node: dict[str, Any], resolve: Resolve = lambda schema: schema) -> None:
    """``node``'s conditions, each replaced by its exact positive form where one exists
    (``resolve``: a key's schema, its local reference followed)."""
    _if_then_else(node, resolve)
    _negation(node, resolve)
    _one_of_keys(node)


def _plain(node: dict[str, Any], allowed: set[str]) -> bool:
    return all(key in allowed or key in ANNOTATIONS for key in node)


def _field(node: dict[str, Any], key: str, kind: type) -> Any:
    """``node[key]`` when it is a ``kind``, else an empty one."""
    value = node.get(key)
    return value if isinstance(value, kind) else kind()


def _add_part(node: dict[str, Any], part: dict[str, Any] | bool) -> None:
    """``part`` must hold as well: the node's ``anyOf`` when it has none, else one more ``allOf``."""
    if isinstance(part, dict) and set(part) == {"anyOf"} and "anyOf" not in node and "oneOf" not in node:
        node["anyOf"] = part["anyOf"]
    else:
        node.setdefault("allOf", []).append(part)


# -- if / then / else ---------------------------------------------------------------------------------
class Test(NamedTuple):
    """An ``if`` that tests one key's value against listed values. Where the key is absent,
    ``properties`` holds, so the test passes unless it is ``required``; on a value that is not an
    object it passes unless it says ``"type": "object"`` (``objects_only``)."""

    key: str
    values: list[Any]
    required: bool
    objects_only: bool

    def passes(self, value: Any) -> bool:
        return _key(value) in {_key(listed) for listed in self.values}


def _test(condition: Any) -> Test | None:
    if not isinstance(condition, dict):
        return None
    if "anyOf" in condition and _plain(condition, {"anyOf"}) and isinstance(condition["anyOf"], list):
        tests = [_test(part) for part in condition["anyOf"]]
        found = [test for test in tests if test is not None]
        if not tests or len(found) < len(tests) or len({t.key for t in found}) != 1 or any(t.required for t in found):
            return None
        values = [value for test in found for value in test.values]
        return Test(found[0].key, values, False, all(test.objects_only for test in found))
    if not _plain(condition, {"properties", "required", "type"}) or condition.get("type", "object") != "object":
        return None
    properties = condition.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    [(key, schema)] = properties.items()
    listed = _listed(schema)
    required = condition.get("required", [])
    if listed is None or required not in ([], [key]):
        return None
    return Test(key, listed, bool(required), "type" in condition)


def _listed(schema: Any) -> list[Any] | None:
    """The values a ``const`` or ``enum`` schema allows (a ``type`` beside them agreeing)."""
    if not isinstance(schema, dict) or not _plain(schema, {"const", "enum", "type"}):
        return None
    if "const" in schema:
        values = [schema["const"]]
    elif isinstance(schema.get("enum"), list):
        values = list(schema["enum"])
    else:
        return None
    kind = JSON_TYPES.get(schema.get("type", ""))
    if "type" in schema and (kind is None or not all(_is(value, kind) for value in values)):
        return None
    if any(isinstance(value, float) for value in values):  # 1 and 1.0 are one value: not ours to compare
        return None
    return values


def _is(value: Any, kind: type) -> bool:
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _if_then_else(node: dict[str, Any], resolve: Resolve) -> None:
    """``if``/``then``/``else`` on the node, and in its ``allOf``, all testing one key: one branch
    per value tested (the ``then`` of each test it passes, the ``else`` of the others), one for
    the key's other values, one for the key absent, one for a value that is not an object."""
    own = [{key: node[key] for key in ("if", "then", "else") if key in node}] if "if" in node else []
    parts: list[Any] = _field(node, "allOf", list)
    conditional = [p for p in parts if isinstance(p, dict) and "if" in p and _plain(p, {"if", "then", "else"})]
    written = own + conditional
    found = [_test(part["if"]) for part in written]
    tests = [test for test in found if test is not None]
    if not written or len(tests) < len(found) or len({test.key for test in tests}) != 1:
        return
    key = tests[0].key
    schema = resolve(_field(node, "properties", dict).get(key))
    allowed = _listed({k: v for k, v in schema.items() if k != "type"}) if isinstance(schema, dict) else None
    allowed_keys = None if allowed is None else {_key(value) for value in allowed}
    tested = {_key(value): value for test in tests for value in test.values}
    others = _others(schema, list(tested.values()))
    if others is None:
        return

    def holding(passes: list[bool]) -> list[Any]:
        chosen = [part.get("then" if passed else "else") for part, passed in zip(written, passes)]
        return [schema for schema in chosen if schema not in (None, True, {})]

    objects = {"type": "object"} if node.get("type") != "object" else {}
    branches = []
    for value in tested.values():
        if allowed_keys is None or _key(value) in allowed_keys:
            test = {**objects, "properties": {key: {"const": value}}, "required": [key]}
            branches.append(_branch(test, holding([t.passes(value) for t in tests])))
    if others is not False:
        other = {**objects, "properties": {key: others}, "required": [key]}
        branches.append(_branch(other, holding([False] * len(tests))))
    if key not in _field(node, "required", list):
        branches.append(_branch({**objects, "properties": {key: False}}, holding([not t.required for t in tests])))
    if objects:
        branches.append(_branch({"type": NOT_OBJECTS}, holding([not t.objects_only for t in tests])))
    branches = [branch for branch in branches if not _impossible(node, branch)]
    if len(json.dumps(branches)) > MAX_WRITTEN:
        return
    for name in ("if", "then", "else"):
        node.pop(name, None)
    if conditional:
        node["allOf"] = [part for part in parts if not any(part is c for c in conditional)]
        if not node["allOf"]:
            del node["allOf"]
    _add_part(node, {"anyOf": branches} if branches else False)


def _branch(test: dict[str, Any], holding: list[Any]) -> dict[str, Any]:
    return {**test, "allOf": holding} if holding else test


def _impossible(node: dict[str, Any], branch: dict[str, Any]) -> bool:
    """Whether a branch plainly contradicts itself or its node (llguidance refuses a whole schema
    with a branch it finds unsatisfiable): a part with ``"additionalProperties": false`` that does
    not name a key another part requires; a ``false`` part."""
    parts = [node, branch, *_field(branch, "allOf", list)]
    if any(part is False for part in parts):
        return True
    required = {key for part in parts if isinstance(part, dict) for key in _field(part, "required", list)}
    for part in parts:
        closed = isinstance(part, dict) and part.get("additionalProperties") is False
        if closed and "patternProperties" not in part and not required <= set(_field(part, "properties", dict)):
            return True
    return False


def _others(schema: Any, values: list[Any]) -> dict[str, Any] | bool | None:
    """A schema for the values ``schema`` allows that are not in ``values``: ``False`` when there
    are none; ``None`` when they cannot be said (a number not listed)."""
    listed = {_key(value) for value in values}
    if not isinstance(schema, dict) or not ({"const", "enum", "type"} & set(schema)):
        if values and all(isinstance(value, str) for value in values):  # any value: another type, or another string
            return {"anyOf": [{"type": NOT_STRINGS}, {"type": "string", "pattern": not_one_of(values)}]}
        return None
    if "const" in schema:
        return False if _key(schema["const"]) in listed else {"const": schema["const"]}
    if isinstance(schema.get("enum"), list):
        rest = [value for value in schema["enum"] if _key(value) not in listed]
        return {"enum": rest} if rest else False
    kind = schema.get("type")
    if kind == "boolean":
        rest = [value for value in (False, True) if _key(value) not in listed]
        return {"enum": rest} if rest else False
    if kind == "string" and all(isinstance(value, str) for value in values):
        return {"pattern": not_one_of(values)} if values else {}
    if kind == "integer" and all(_is(value, int) for value in values):
        return {"anyOf": integers_except(values)}
    return None


# -- not -------------------------------------------------------------------------------------------
def _negation(node: dict[str, Any], resolve: Resolve) -> None:
    """``not`` of required keys (one of them absent: a value not an object fails, ``required``
    holds there), of listed values (any other value the node allows), or of a test of one key
    (the opposite of each way the test passes)."""
    negated = node.get("not")
    if not isinstance(negated, dict) or not negated:
        return
    positive: Any = _keys_absent(negated)
    values, test = _listed(negated), _test(negated)
    if positive is None and values is not None:
        positive = _others(node, values)
    elif positive is None and test is not None:
        rest = _others(resolve(_field(node, "properties", dict).get(test.key)), test.values)
        if rest is None:
            return
        other = {"type": "object", "properties": {test.key: rest}, "required": [test.key]}
        failing = [other] if rest is not False else []
        failing += [{"type": "object", "properties": {test.key: False}}] if test.required else []
        failing += [{"type": NOT_OBJECTS}] if test.objects_only else []
        positive = {"anyOf": failing} if failing else False
    if positive is not None:
        del node["not"]
        _add_part(node, positive)


def _keys_absent(negated: dict[str, Any]) -> dict[str, Any] | None:
    """``not: {"required": [a, b]}`` (or an ``allOf`` of such): a or b absent."""
    if _plain(negated, {"required"}):
        keys = negated.get("required")
    elif _plain(negated, {"allOf"}) and isinstance(negated.get("allOf"), list):
        parts = negated["allOf"]
        if not all(isinstance(p, dict) and _plain(p, {"required"}) for p in parts):
            return None
        keys = [key for part in parts for key in part.get("required", [])]
    else:
        return None
    if not isinstance(keys, list) or not keys or not all(isinstance(key, str) for key in keys):
        return None
    keys = list(dict.fromkeys(keys))
    if len(keys) == 1:
        return {"type": "object", "properties": {keys[0]: False}}
    return {"type": "object", "anyOf": [{"properties": {key: False}} for key in keys]}


# -- oneOf of required keys ------------------------------------------------------------------------
def _one_of_keys(node: dict[str, Any]) -> None:
    """``oneOf: [{"required": [a]}, {"required": [b]}]``, exactly one of them: each branch with
    the keys that would satisfy another branch absent (llguidance serves ``oneOf`` as
    ``anyOf``, where an answer with both would pass)."""
    branches = node.get("oneOf")
    if not isinstance(branches, list) or len(branches) < 2 or "anyOf" in node:
        return
    keys = []
    for branch in branches:
        required = branch.get("required") if isinstance(branch, dict) and _plain(branch, {"required"}) else None
        if not isinstance(required, list) or not required or not all(isinstance(k, str) for k in required):
            return
        keys.append(set(required))
    exact = []
    for index, own in enumerate(keys):
        others = [other - own for position, other in enumerate(keys) if position != index]
        if any(not rest for rest in others):
            continue  # another branch holds whenever this one does: never exactly one
        absent = []
        for rest in others:  # some key of every other branch absent
            choices = [{"properties": {key: False}} for key in sorted(rest)]
            absent.append(choices[0] if len(choices) == 1 else {"anyOf": choices})
        exact.append({"type": "object", "required": sorted(own), "allOf": absent})
    del node["oneOf"]
    node["anyOf"] = exact if exact else [False]


# -- values not listed ------------------------------------------------------------------------------
def not_one_of(texts: list[str]) -> str:
    """A regular expression matching every string except those in ``texts`` (whole, anchored):
    at each prefix of a listed string, stop short, or leave the listed strings' paths."""
    trie: dict[str, Any] = {}
    for text in texts:
        place = trie
        for char in text:
            place = place.setdefault(char, {})
        place[""] = {}  # a listed string ends here
    return "^" + _except(trie) + "$"


def _except(place: dict[str, Any]) -> str:
    chars = sorted(char for char in place if char)
    options = [] if "" in place else [""]
    options.append(("[^" + "".join(_in_class(c) for c in chars) + "]" if chars else "[\\s\\S]") + "[\\s\\S]*")
    options += [re.escape(char) + _except(place[char]) for char in chars]
    return "(" + "|".join(options) + ")"


def _in_class(char: str) -> str:
    return "\\" + char if char in "\\]^-[" else char


def integers_except(values: list[int]) -> list[dict[str, Any]]:
    """Ranges covering every integer except ``values`` (as schemas for an integer)."""
    points = sorted(set(values))
    ranges: list[dict[str, Any]] = [{"maximum": points[0] - 1}]
    ranges += [{"minimum": low + 1, "maximum": high - 1} for low, high in itertools.pairwise(points) if high - low > 1]
    ranges.append({"minimum": points[-1] + 1})
    return [{"type": "integer", **limits} for limits in ranges]
