"""Tool calls through the ensemble: one text-level envelope for every member, whatever its
family's native format (as llama.cpp's server does for templates it does not know).

The tools are described in the same words in every member's prompt, each in its own chat
template, and the answer is constrained (``formats.py``) to either calls,
``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` with each function's arguments
matching its parameter schema, or a message, ``{"response": "..."}``. Earlier calls and
their results are rendered in each family's own tool format where its chat template has one,
and as text otherwise (``prompting``); the answer after them is the same envelope for all.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from specem_local.engine.prompting import RESULTS_INTRO, Message, ToolUse
from specem_local.engine.schemas import told
from specem_local.errors import SettingError

MAX_TOOLS = 128  # OpenAI's limit
ToolChoiceMode = Literal["auto", "required", "none", "function"]
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_DESCRIPTION = 32_768  # characters: agents' own tools run long (Claude Code's Bash is about 8,000)
LISTING_LIMIT = 6000  # characters of tools listed as JSON; past it, one outlined line per tool


@dataclass(frozen=True)
class Tool:
    """A function the models may call: its name, what it does, its parameters' JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])


@dataclass(frozen=True)
class ToolReply:
    """A tool-using answer as a program reads it: the calls, or a message (``content``)."""

    calls: tuple[ToolCall, ...] = ()
    content: str | None = None


@dataclass(frozen=True)
class ToolChoice:
    """Which answers are allowed: "auto" (calls or a message), "required" (calls), "none" (a
    message, tools still described), or calls of one ``function`` only."""

    mode: ToolChoiceMode = "auto"
    function: str | None = None


def tools_from(tools: Any) -> tuple[Tool, ...]:
    """Tools as given: OpenAI's ``{"type": "function", "function": {...}}``, a bare
    ``{"name", "description", "parameters"}``, or a Python function (its signature and
    docstring give the schema, as the ``ollama`` client reads them). A ``SettingError`` names
    what is wrong (field ``tools``)."""
    if not isinstance(tools, (list, tuple)):
        raise SettingError("tools must be a list of functions", "tools")
    if len(tools) > MAX_TOOLS:
        raise SettingError(f"tools: {len(tools)} tools is too many (at most {MAX_TOOLS})", "tools")
    out = [_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)]
    names = [tool.name for tool in out]
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise SettingError(f"tools: two functions are named {repeated!r}", "tools")
    return tuple(out)


def _tool(value: Any, where: str) -> Tool:
    if callable(value) and not isinstance(value, dict):
        return _from_function(value, where)
    if not isinstance(value, dict):
        raise SettingError(f"{where} must be a function or an object", "tools")
    spec = value.get("function", value) if value.get("type", "function") == "function" else None
    if not isinstance(spec, dict):
        raise SettingError(f'{where}.type must be "function"', "tools")
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        shown = str(name)[:40]
        raise SettingError(f"{where}.function.name {shown!r} must be 1 to 64 letters, digits, _ or -", "tools")
    description = spec.get("description") or ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise SettingError(
            f"{where}.function.description must be text of at most {MAX_DESCRIPTION:,} characters", "tools"
        )
    parameters = spec.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise SettingError(f"{where}.function.parameters must be a JSON Schema of an object", "tools")
    return Tool(name, description, parameters)


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _from_function(function: Callable[..., Any], where: str) -> Tool:
    """A Python function as a tool: parameters from its type hints (``Optional``, ``list[str]``,
    ``Literal`` ...), descriptions from its docstring's ``Args:`` section. A call passes keyword
    arguments, so ``*args`` and positional-only parameters are refused; extra arguments are
    refused by the schema unless the function takes ``**kwargs``."""
    name = getattr(function, "__name__", "")
    if not NAME.fullmatch(name):
        raise SettingError(f"{where}: the function's name {name[:40]!r} cannot name a tool", "tools")
    doc = inspect.getdoc(function) or ""
    summary, _, rest = doc.partition("\n\n")
    described = dict(re.findall(r"^[ \t]*(\w+)(?:[ \t]*\([^)]*\))?:[ \t]*(\S.*)$", rest, re.MULTILINE))
    try:
        hints = typing.get_type_hints(function)
    except Exception as error:  # a name the annotations use is not defined: NameError, TypeError...
        raise SettingError(f"{where}: the type hints of {name} cannot be read ({error})"[:300], "tools") from None
    properties, required, extra = {}, [], False
    for parameter in inspect.signature(function).parameters.values():
        kind = parameter.kind
        if kind in (parameter.VAR_POSITIONAL, parameter.POSITIONAL_ONLY):
            said = f"*{parameter.name}" if kind is parameter.VAR_POSITIONAL else f"{parameter.name}, /"
            raise SettingError(f"{where}: {name}({said}) cannot be called: a call passes arguments by name", "tools")
        if kind is parameter.VAR_KEYWORD:
            extra = True
            continue
        about = {"description": described[parameter.name]} if parameter.name in described else {}
        properties[parameter.name] = {**_parameter_type(parameter, hints), **about}
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": extra}
    return Tool(name, " ".join(summary.split()), schema)


def _parameter_type(parameter: inspect.Parameter, hints: dict[str, Any]) -> dict[str, Any]:
    """A parameter's JSON Schema: from its hint; untyped, the type of its default (``n=5`` is an
    integer), or any value when it has none to go by."""
    if parameter.name in hints:
        return json_type(hints[parameter.name])
    default_type = type(parameter.default)
    return {"type": _JSON_TYPES[default_type]} if default_type in _JSON_TYPES else {}


def json_type(hint: Any, depth: int = 0) -> dict[str, Any]:
    """A type hint as JSON Schema: ``int | None`` may be null, ``list[str]`` is an array of
    strings, ``dict[str, int]`` an object of integers, ``Literal`` an enum; what has no JSON
    form (a class of its own) is a string, as the ``ollama`` client makes it."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if depth > 8:
        return {}
    if origin is typing.Literal:
        return {"enum": list(arguments)}
    if origin in (typing.Union, types.UnionType):
        options = [json_type(a, depth + 1) for a in arguments if a is not type(None)]
        nullable = [{"type": "null"}] if type(None) in arguments else []
        return options[0] if len(options) == 1 and not nullable else {"anyOf": options + nullable}
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set, frozenset):
        items = [a for a in arguments if a is not Ellipsis]
        return {"type": "array", **({"items": json_type(items[0], depth + 1)} if len(items) == 1 else {})}
    if origin is dict or hint is dict:
        values = {"additionalProperties": json_type(arguments[1], depth + 1)} if len(arguments) == 2 else {}
        return {"type": "object", **values}
    if hint is type(None):
        return {"type": "null"}
    if hint is typing.Any:
        return {}
    return {"type": _JSON_TYPES.get(hint, "string")}


def choice_from(value: Any, tools: tuple[Tool, ...]) -> ToolChoice:
    """``tool_choice``: "auto", "required", "none", a function's name, or OpenAI's
    ``{"type": "function", "function": {"name": ...}}``."""
    if value is None or value == "auto":
        return ToolChoice()
    if value in ("required", "none"):
        return ToolChoice(value)
    name = value
    if isinstance(value, dict):  # OpenAI's {"type": "function", "function": {"name": ...}}
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise SettingError('tool_choice must be "auto", "required", "none" or a function', "tool_choice")
    if name not in {tool.name for tool in tools}:
        raise SettingError(f"tool_choice names {name[:40]!r}, which is not one of the tools", "tool_choice")
    return ToolChoice("function", name)


def envelope_schema(tools: tuple[Tool, ...], choice: ToolChoice, parallel: bool = True) -> dict[str, Any]:
    """The JSON Schema every answer must match: calls (each function's arguments by its own
    schema; one call without ``parallel``), or a message, as ``choice`` allows."""
    offered = [tool for tool in tools if choice.function in (None, tool.name)]
    definitions: dict[str, Any] = {}
    arguments = [_arguments(tool, definitions) for tool in offered]
    call = {"anyOf": [_object({"name": {"const": t.name}, "arguments": a}) for t, a in zip(offered, arguments)]}
    calls = {"type": "array", "items": call, "minItems": 1, **({} if parallel else {"maxItems": 1})}
    shapes = {
        "calls": _object({"tool_calls": calls}),
        "message": _object({"response": {"type": "string"}}),
    }
    allowed = {"auto": ("calls", "message"), "none": ("message",)}.get(choice.mode, ("calls",))
    chosen = [shapes[name] for name in allowed if name == "message" or offered]
    envelope = chosen[0] if len(chosen) == 1 else {"anyOf": chosen}
    return {**envelope, "$defs": definitions} if definitions else envelope


def _arguments(tool: Tool, definitions: dict[str, Any]) -> dict[str, Any]:
    """A function's parameters as the envelope holds them: as given, or, where they refer to a
    part of themselves (``$ref: "#/$defs/Point"``, as pydantic and FastMCP write nested models;
    ``"#/properties/a"``, as zod does), kept whole in the envelope's ``$defs`` with each such
    reference pointed there: in the envelope, ``#`` is the envelope."""
    if '"$ref"' not in json.dumps(tool.parameters):
        return tool.parameters
    key = f"function_{tool.name}"  # a name is letters, digits, _ and -: nothing to escape in a pointer
    definitions[key] = _repointed(tool.parameters, f"#/$defs/{key}")
    return {"$ref": f"#/$defs/{key}"}


def _repointed(node: Any, root: str) -> Any:
    """``node`` with every ``$ref`` to a place in its document (``#`` or ``#/...``) made to point
    under ``root``; values that are data (``const``, ``enum``, ``default``, ``examples``) as they are."""
    if isinstance(node, list):
        return [_repointed(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    moved = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            moved[key] = root + value[1:]
        elif key in ("const", "enum", "default", "examples"):
            moved[key] = value
        else:
            moved[key] = _repointed(value, root)
    return moved


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def instruction(tools: tuple[Tool, ...], choice: ToolChoice) -> str:
    """The tools in words, the same for every member: said as a system message."""
    listed = json.dumps(
        [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools], ensure_ascii=False
    )
    if len(listed) > LISTING_LIMIT:  # many or large tools: each in one line, its parameters outlined
        listed = "\n".join(f"- {t.name}{told(t.parameters, compact=True)}: {t.description[:200]}" for t in tools)
    how = {
        "none": 'Do not call a function now: answer with {"response": "your answer"}.',
        "required": 'Answer by calling functions: {"tool_calls": [{"name": "...", "arguments": {...}}]}.',
        "function": f'Answer by calling {choice.function}: {{"tool_calls": [{{"name": "{choice.function}", '
        '"arguments": {...}}]}.',
    }.get(
        choice.mode,
        'To call functions, answer {"tool_calls": [{"name": "...", "arguments": {...}}]}; to answer the user '
        'directly, answer {"response": "your answer"}.',
    )
    return f"You can call these functions:\n{listed}\n{how} Answer with that JSON only, on one line."


def reply_from(value: Any) -> ToolReply | None:
    """The parsed envelope as calls or a message; None when it is neither."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("response"), str):
        return ToolReply(content=value["response"])
    calls = value.get("tool_calls")
    if isinstance(calls, list) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        return ToolReply(tuple(ToolCall(c["name"], c.get("arguments") or {}) for c in calls))
    return None


def reply_from_text(text: str) -> ToolReply | None:
    """A recorded answer's text as a tool reply, if it is one (the chat app shows it so)."""
    if not text.startswith(('{"tool_calls": ', '{"response": ')):
        return None
    try:
        return reply_from(json.loads(text))
    except ValueError:
        return None


def render_messages(messages: list[dict[str, Any]], envelope: bool = True) -> list[Message]:
    """A conversation with earlier calls and their results, checked: as structured turns each
    member renders in its own tool format (``prompting``), or, without tools offered
    (``envelope`` false, the answer is plain text), told in words: a model shown its calls
    writes them back. A ``SettingError`` names the message that is wrong (field ``messages``)."""
    out: list[Message] = []
    called: dict[str, str] = {}  # call id -> function name
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message.get("role")
        if role == "tool":
            name, content = _answered(message, called, where), _text(message.get("content"), where)
            if envelope:
                out.append(Message("tool", content, name=name))
            elif index and messages[index - 1].get("role") == "tool":  # consecutive results: one turn
                out[-1] = Message("user", f"{out[-1].content}\n{name} returned: {content}")
            else:
                out.append(Message("user", f"{RESULTS_INTRO}\n{name} returned: {content}"))
            continue
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            made = []
            for number, call in enumerate(calls if isinstance(calls, list) else [None]):
                name, arguments, call_id = _call(call, f"{where}.tool_calls[{number}]")
                called[call_id or f"{index}.{number}"] = name
                made.append(ToolUse(name, arguments, call_id or ""))
            said = _text(message.get("content"), where)
            if envelope:
                out.append(Message("assistant", said, tuple(made)))
            else:
                listed = "; ".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in made)
                out.append(Message("assistant", f"{said}\n(I called {listed}.)".lstrip()))
            continue
        if role not in ("system", "user", "assistant"):
            raise SettingError(f"{where}.role must be system, user, assistant or tool", "messages")
        out.append(Message(str(role), _text(message.get("content"), where)))
    return out


def recorded_turns(prompt: str | list[Any]) -> list[tuple[str, str]]:
    """A conversation as the history keeps it: (role, text) for each message (``as_recorded``)."""
    if isinstance(prompt, str):
        return [("user", prompt)]
    return [(m.role, m.content) if isinstance(m, Message) else (str(m["role"]), as_recorded(m)) for m in prompt]


def as_recorded(message: dict[str, Any]) -> str:
    """A message's text as the history keeps it: an assistant's calls as the envelope the
    ensemble answers in (so a loop reads back as calls, results and the answer)."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return _text(message.get("content"), "message")
    made = [dict(zip(("name", "arguments"), _call(call, "tool_calls")[:2])) for call in calls]
    return json.dumps({"tool_calls": made}, ensure_ascii=False)


def _answered(message: dict[str, Any], called: dict[str, str], where: str) -> str:
    """The function a tool message answers: by ``tool_call_id`` (OpenAI), by ``tool_name`` or
    ``name`` (Ollama), or the only function called so far."""
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str):
        if call_id not in called:
            raise SettingError(f"{where}.tool_call_id {call_id[:40]!r} answers no earlier tool call", "messages")
        return called[call_id]
    named = message.get("tool_name", message.get("name"))
    if isinstance(named, str) and named in called.values():
        return named
    if len(set(called.values())) == 1:
        return next(iter(called.values()))
    raise SettingError(f"{where} is a tool result that answers no earlier tool call", "messages")


def _call(call: Any, where: str) -> tuple[str, dict[str, Any], str | None]:
    """An earlier call as (name, arguments, id): OpenAI's (arguments as a JSON string) or
    Ollama's (arguments as an object)."""
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise SettingError(f"{where}.function.name is missing", "messages")
    if not NAME.fullmatch(name):
        raise SettingError(f"{where}.function.name {name[:40]!r} must be 1 to 64 letters, digits, _ or -", "messages")
    assert isinstance(function, dict)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise SettingError(f"{where}.function.arguments is not JSON", "messages") from None
    if not isinstance(arguments, dict):
        raise SettingError(f"{where}.function.arguments must be a JSON object", "messages")
    call_id = call.get("id")
    return name, arguments, call_id if isinstance(call_id, str) else None


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI's parts: the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return json.dumps(content, ensure_ascii=False)
