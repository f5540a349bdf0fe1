"""JSON Schemas as people have them, made ready for llguidance: checked where a value can break
the compiler (its depth with references followed, numbers past 64 bits, text no model can
write, NaN), rewritten where the schema's own draft says what it means (a ``$ref``'s sibling
keys), and outlined in a few lines when the whole schema would
crowd the members' context. Pure functions over the schema's value, no recursion (a schema is
the client's: its depth is not ours to trust).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from specem_local.engine.conditions import ANNOTATIONS, rewrite_conditions
from specem_local.errors import SettingError

MAX_DEPTH = 64  # nesting of a JSON Schema as written
# Nesting with every local $ref followed (a cycle stops where it repeats). llguidance compiles a
# schema recursively: a chain of references overflows an 8 MiB stack (a segfault) at 2,745
# levels, a 2 MiB one (the format compiler's) at 672 (research/format_limits.py).
MAX_DEPTH_FOLLOWED = 320
MAX_REFERENCES = 10_000  # $refs in one schema
MAX_INTEGER = 1 << 64  # llguidance reads integers as 64-bit: from -2^63 up to 2^64 - 1
MIN_INTEGER = -(1 << 63)
KEPT = frozenset({"$id", "id", "$anchor", "definitions", "$defs"})  # a reference is resolved by them
INLINE_LIMIT = 16_384  # characters of a definition an allOf may take in place of its reference
INLINE_TOTAL = 1 << 20  # characters inlined in one schema (a definition can inline itself again)
OLD_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")  # a $ref's siblings are ignored there


def check(schema: Any, field: str = "schema", where: str | None = None) -> None:
    """A ``SettingError`` (naming ``field``, and where in the schema from ``where``) for a value
    no compiler should be given: nested past ``MAX_DEPTH`` as written or ``MAX_DEPTH_FOLLOWED``
    with its references followed, an integer outside 64 bits, NaN or an infinity, a lone
    surrogate."""
    for path, value in _walk(schema, where or field, field):
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and not MIN_INTEGER <= value < MAX_INTEGER:
            bits = value.bit_length()
            raise SettingError(f"{path}: an integer of {bits} bits is out of range (64-bit integers only)", field)
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingError(f"{path}: {value} is not a JSON number", field)
        if isinstance(value, str) and not _encodes(value):
            raise SettingError(f"{path}: not valid Unicode (a lone surrogate, such as half an emoji)", field)
    if depth_followed(schema, field) > MAX_DEPTH_FOLLOWED:
        deep = f"nested more than {MAX_DEPTH_FOLLOWED} levels deep with its references followed"
        raise SettingError(f"{where or field}: {deep}", field)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk(value: Any, root: str, field: str) -> Iterator[tuple[str, Any]]:
    """Every value in a JSON value (keys too) with its path, without recursion; deeper than
    ``MAX_DEPTH`` is a ``SettingError``."""
    stack: list[tuple[str, Any, int]] = [(root, value, 1)]
    while stack:
        path, item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SettingError(f"{root}: nested more than {MAX_DEPTH} levels deep", field)
        yield path, item
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str) or not _encodes(key):
                    raise SettingError(f"{path}: a key is not valid Unicode (a lone surrogate)", field)
                stack.append((f"{path}.{key}"[:200], child, depth + isinstance(child, (dict, list))))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                stack.append((f"{path}[{index}]"[:200], child, depth + isinstance(child, (dict, list))))


def resolve(schema: dict[str, Any], reference: str) -> Any:
    """The value a local reference (``#``, ``#/a/b``) points at in ``schema``; None when it is
    not local or points at nothing."""
    if not reference.startswith("#"):
        return None
    node: Any = schema
    for part in reference[1:].split("/")[1:] if reference != "#" else ():
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def depth_followed(schema: Any, field: str = "schema") -> int:
    """How deeply the schema nests with every local ``$ref`` followed: a chain of references
    counts each link's nesting. A reference back to a value on the path (recursion) counts once:
    llguidance compiles it as a rule that refers to itself. Memoised, so shared definitions cost
    one visit: linear in the schema."""
    if not isinstance(schema, (dict, list)):
        return 0
    memo: dict[int, int] = {}
    on_path: set[int] = set()
    references = 0
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            memo[key] = 1 + max((memo.get(id(child), 0) for child in _children(schema, node)), default=0)
            continue
        if key in memo or key in on_path:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(schema, node):
            if id(child) not in memo and id(child) not in on_path:
                stack.append((child, False))
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            references += 1
            if references > MAX_REFERENCES:
                raise SettingError(f"{field}: more than {MAX_REFERENCES:,} references ($ref)", field)
    return memo[id(schema)]


def _children(schema: Any, node: Any) -> list[Any]:
    """A value's containers, and what its local ``$ref`` points at."""
    items = node.values() if isinstance(node, dict) else node
    children = [child for child in items if isinstance(child, (dict, list))]
    if isinstance(node, dict) and isinstance(node.get("$ref"), str):
        target = resolve(schema, node["$ref"])
        if isinstance(target, (dict, list)):
            children.append(target)
    return children


def rewritten(schema: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The schema as llguidance can serve it, and notes of what it then serves only
    approximately. Exact rewrites: a ``$ref``'s annotation siblings (``description``, ``title``)
    dropped, and in drafts 3 to 7, where the standard says a ``$ref``'s siblings are ignored,
    its other siblings too; an ``allOf``'s bare reference replaced by its target; a ``type``
    every ``anyOf`` branch already says dropped; ``{"not": {}}`` as ``false``. Each spares
    llguidance an intersection with a reference that recurses, which it refuses. Approximate:
    a match-all ``patternProperties`` applied to the keys not named only (a note)."""
    old = any(draft in str(schema.get("$schema", "")) for draft in OLD_DRAFTS)
    copy = json.loads(json.dumps(schema))  # ours to change (the value is plain JSON: checked)
    inlined = [0]  # characters inlined so far
    follow = functools.partial(_followed, copy)
    notes: list[str] = []
    stack: list[Any] = [copy]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            rewrite_conditions(node, follow)
            if isinstance(node.get("$ref"), str) and len(node) > 1:
                drop = ANNOTATIONS | ({"$schema"} if node is not copy else set())  # a draft named inside says nothing
                for key in [k for k in node if k not in KEPT and k != "$ref" and (k in drop or old)]:
                    del node[key]
            if isinstance(node.get("allOf"), list):
                node["allOf"] = [_inlined(copy, part, inlined) for part in node["allOf"]]
            if "type" in node and _branches_say_type(copy, node):
                del node["type"]  # said by every branch already: llguidance would intersect it with each
            _pattern_as_additional(node, notes)
            for key, value in list(node.items()):
                if key not in ("not", "const", "enum", "default", "examples") and value == {"not": {}}:
                    node[key] = False  # never valid: the same schema, which llguidance serves
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return copy, tuple(dict.fromkeys(notes))


def _followed(root: dict[str, Any], schema: Any) -> Any:
    """``schema``, or what its local ``$ref`` points at when that is all it says."""
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and set(schema) - ANNOTATIONS == {"$ref"}:
        return resolve(root, schema["$ref"])
    return schema


def _branches_say_type(root: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether every branch of the node's ``anyOf`` / ``oneOf`` is a reference to a schema of
    the node's own ``type`` (WashingtonPost's ``{"anyOf": [{"$ref": author}, ...], "type":
    "object"}``): the sibling says nothing more, and llguidance cannot intersect it with a
    reference that recurses."""
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and branches:
            targets = [resolve(root, b["$ref"]) if isinstance(b, dict) and isinstance(b.get("$ref"), str) else None
                       for b in branches]  # fmt: skip
            return all(isinstance(t, dict) and t.get("type") == node["type"] for t in targets)
    return False


PROBES = ("", "a", "Z_9", "-.~ x/é")  # keys a pattern matching every key matches


def matches_every_key(pattern: str) -> bool:
    """Whether ``pattern`` matches any key at all (``.*``, or ``^[a-z]*`` not anchored at its
    end), judged on probe keys; a pattern Python cannot read is not."""
    try:
        found = re.compile(pattern)
    except re.error:
        return False
    return all(found.search(key) for key in PROBES)


def _pattern_as_additional(node: dict[str, Any], notes: list[str]) -> None:
    """``patternProperties: {".*": X}`` is every key's value an X: ``additionalProperties: X``
    for the keys not named. A named key must be an X too, which llguidance does by intersecting
    its schema with X, and cannot when X refers to itself (WashingtonPost's promo items and
    related content). Where the named keys' schemas are X itself nothing changes; where they
    differ, they keep their own schema only, and a note says so."""
    patterns, named = node.get("patternProperties"), node.get("properties", {})
    if not isinstance(patterns, dict) or len(patterns) != 1 or node.get("additionalProperties", True) is not True:
        return
    [(pattern, schema)] = patterns.items()
    if not matches_every_key(pattern) or not isinstance(named, dict):
        return
    del node["patternProperties"]
    node["additionalProperties"] = schema
    if any(value != schema for value in named.values()):
        notes.append(f'patternProperties "{pattern}" is applied to the keys not named in properties only')


def _inlined(root: dict[str, Any], part: Any, inlined: list[int]) -> Any:
    """A part of an ``allOf`` that is only a local ``$ref``, replaced by what it points at (the
    same schema): llguidance cannot intersect a reference that recurses (WashingtonPost's
    ``allOf: [{"$ref": reference}, {narrowing}]``), but can intersect its content, whose own
    references stay references. Larger targets stay references (a copy per use would grow), as do
    all once ``INLINE_TOTAL`` characters are inlined (a definition may inline itself again)."""
    if not (isinstance(part, dict) and set(part) == {"$ref"} and isinstance(part["$ref"], str)):
        return part
    target = resolve(root, part["$ref"])
    text = json.dumps(target)
    if not isinstance(target, dict) or len(text) > INLINE_LIMIT or inlined[0] + len(text) > INLINE_TOTAL:
        return part
    inlined[0] += len(text)
    return json.loads(text)


OUTLINE_AFTER = 2000  # characters of schema past which members are told an outline instead
OUTLINE_DEPTH = 4  # nesting an outline shows
OUTLINE_KEYS = 24  # properties an outline shows per object
OUTLINE_BUDGET = 3000  # characters an outline may take before its deeper parts are left out


def told(schema: dict[str, Any], *, compact: bool = False) -> str:
    """What the members are told of a schema: the whole JSON when it is short; else an outline
    (keys, types, required or optional, enums) within ``OUTLINE_BUDGET`` characters, the
    matcher enforcing the rest. A Kubernetes object's schema runs to 37,000 tokens; the members'
    contexts hold 2,048 to 8,192. ``compact``: always the outline, in a tenth of the budget
    (one tool's parameters among many)."""
    whole = json.dumps(schema, ensure_ascii=False)
    if len(whole) <= OUTLINE_AFTER and not compact:
        return whole
    budget = OUTLINE_BUDGET // 10 if compact else OUTLINE_BUDGET
    for depth in range(OUTLINE_DEPTH, 0, -1):
        text = _outline(schema, schema, depth, frozenset())
        if len(text) <= budget:
            return text
    return text[:budget] + " …"


def _outline(root: dict[str, Any], node: Any, depth: int, seen: frozenset[str]) -> str:
    """One schema as TypeScript-like text: ``{"a": string, "b"?: [integer]}``."""
    if not isinstance(node, dict):
        return "any" if node is not False else "never"
    reference = node.get("$ref")
    if isinstance(reference, str):
        target = resolve(root, reference)
        name = reference.rsplit("/", 1)[-1] or "root"
        if target is None or reference in seen:
            return name
        return _outline(root, target, depth, seen | {reference})
    if "const" in node:
        return json.dumps(node["const"], ensure_ascii=False)[:80]
    if isinstance(node.get("enum"), list):
        values = [json.dumps(v, ensure_ascii=False)[:40] for v in node["enum"][:8]]
        return " | ".join(values) + (" | …" if len(node["enum"]) > 8 else "")
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or (kind is None and isinstance(node.get("properties"), dict)):
        return _object_outline(root, node, depth, seen)
    for key in ("anyOf", "oneOf"):
        if kind is None and isinstance(node.get(key), list) and node[key]:
            options = [_outline(root, option, depth, seen) for option in node[key][:4]]
            return "(" + " | ".join(options) + (" | …" if len(node[key]) > 4 else "") + ")"
    if kind is None and isinstance(node.get("allOf"), list) and node["allOf"]:
        return " & ".join(_outline(root, part, depth, seen) for part in node["allOf"][:4])
    if kind == "array":
        items = node.get("items")
        inner = _outline(root, items, depth - 1, seen) if depth > 1 and isinstance(items, dict) else "…"
        return f"[{inner}]"
    if isinstance(kind, str):
        return kind + (f" ({node['format']})" if isinstance(node.get("format"), str) else "")
    return "any"


def _object_outline(root: dict[str, Any], node: dict[str, Any], depth: int, seen: frozenset[str]) -> str:
    properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    if not properties:
        return "object"
    if depth <= 1:
        return "{…}"
    required = set(node.get("required") or []) if isinstance(node.get("required"), list) else set()
    parts = []
    for key, value in list(properties.items())[:OUTLINE_KEYS]:
        mark = "" if key in required else "?"
        parts.append(f"{json.dumps(key, ensure_ascii=False)}{mark}: {_outline(root, value, depth - 1, seen)}")
    more = len(properties) - OUTLINE_KEYS
    return "{" + ", ".join(parts) + (f", … ({more} more)" if more > 0 else "") + "}"
