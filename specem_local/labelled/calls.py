"""Tool calls graded as BFCL grades them (its AST rule for ``simple`` and ``multiple`` items):
one call, of the expected function, with right arguments; strings compared without spaces,
punctuation or case."""

from __future__ import annotations

import re
from typing import Any

PYTHON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}


def tool_name(name: str) -> str:
    """BFCL's function names may hold dots (``math.factorial``); tool names may not (OpenAI's
    rule, ours): dots become underscores, as BFCL does for OpenAI's models."""
    return name.replace(".", "_")


def calls_correct(calls: list[dict[str, Any]], functions: list[dict[str, Any]], truth: list[dict[str, Any]]) -> bool:
    """BFCL's AST rule for ``simple`` and ``multiple`` items: one call, of the expected function
    (by its tool name), with right arguments. ``calls``: ``{"name", "arguments"}`` each."""
    if len(calls) != len(truth) or len(truth) != 1:
        return False
    [(expected, answers)] = truth[0].items()
    description = next((f for f in functions if f["name"] == expected), None)
    call = calls[0]
    if description is None or call.get("name") != tool_name(expected) or not isinstance(call.get("arguments"), dict):
        return False
    return arguments_correct(call["arguments"], description["parameters"], answers)


def arguments_correct(arguments: dict[str, Any], parameters: dict[str, Any], answers: dict[str, list]) -> bool:
    details = parameters.get("properties", {})
    if any(name not in arguments for name in parameters.get("required", [])):
        return False
    for name, value in arguments.items():
        if name not in details or name not in answers:
            return False  # an argument the function does not take, or the answer does not expect
        if not value_correct(value, details[name], answers[name]):
            return False
    return all(name in arguments or "" in possible for name, possible in answers.items())


def value_correct(value: Any, detail: dict[str, Any], possible: list) -> bool:
    kind = detail.get("type", "any")
    expected = PYTHON_TYPES.get(kind, str)
    if kind == "float" and type(value) is int:
        value = float(value)
    given = next((type(answer) for answer in possible if answer != ""), None)
    if type(value) is not expected:
        return given is not None and type(value) is given and value in possible  # a variable's name, say
    if expected is dict:
        return any(dict_correct(value, answer) for answer in possible if answer != "")
    if expected is list:
        inner = detail.get("items", {}).get("type")
        if inner == "dict":
            return any(
                isinstance(answer, list)
                and len(answer) == len(value)
                and all(dict_correct(v, a) for v, a in zip(value, answer))
                for answer in possible
            )
        return [_standard(v) for v in value] in [
            [_standard(a) for a in answer] for answer in possible if isinstance(answer, list)
        ]
    if expected is str:
        return _standard(value) in [_standard(answer) for answer in possible if isinstance(answer, str)]
    return value in possible


def dict_correct(value: Any, answer: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(answer, dict):
        return False
    for key, item_value in value.items():
        if key not in answer or _standard(item_value) not in [_standard(a) for a in answer[key]]:
            return False
    return all(key in value or "" in possible for key, possible in answer.items())


def _standard(value: Any) -> Any:
    """BFCL's string comparison: no spaces nor ``,./-_*^``, lower case, single quotes as double."""
    if not isinstance(value, str):
        return value
    return re.sub(r"[ ,./\-_*^]", "", value).lower().replace("'", '"')
