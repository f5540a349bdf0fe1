"""Answers a program can parse: one format for a whole answer (any JSON object, a JSON
Schema, a Lark or GBNF grammar, a regex), checked once where an answer's settings are, and
enforced with llguidance.

Each member drafts under a matcher of its own, over its own tokens (``member_matcher``), so a
draft can only be text the format allows however its tokenizer splits it. The committed
text has one byte-level matcher (``FormatMatcher``): it checks every candidate once (an invalid
one can never win), gives the bytes the format forces (keys, punctuation), which are
committed without a round of drafting, and says when the answer is complete. llguidance's
errors are states, never exceptions from inside the token loop; a format it cannot
enforce is refused here, up front, with what it could not do.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import llguidance

from specem_local.engine import schemas, tools
from specem_local.engine.format_compiler import MAX_FORCED, byte_tokenizer, compiler, first_line
from specem_local.engine.prompting import Message
from specem_local.engine.segments import incomplete_utf8_tail
from specem_local.engine.tools import Tool, ToolChoice
from specem_local.errors import SettingError, SpecemError

MAX_SOURCE = 1 << 20  # bytes of a schema, grammar or regex; the compile time bound is what matters
MAX_DEPTH = schemas.MAX_DEPTH
# Rules of a grammar: converting GBNF to Lark grows with their square (1,000 rules: 2 s), and
# llguidance compiles a chain of rules recursively (2,700 overflow an 8 MiB stack). Bisected in
# docs/structured-output.md.
MAX_RULES = 500
FIELDS = ("schema", "json", "grammar", "regex", "tools", "tool_choice")
FormatKind = Literal["json", "schema", "grammar", "regex", "tools"]


@dataclass(frozen=True)
class OutputFormat:
    """What an answer must be: ``kind`` is "json" (any JSON object), "schema", "grammar" (Lark
    or GBNF) or "regex"; ``source`` what was given, as text; ``grammar`` llguidance's grammar."""

    kind: FormatKind
    source: str
    grammar: str
    model: Any = None  # a pydantic model class the schema came from: parsed answers are instances
    tools: tuple[Tool, ...] = ()  # kind "tools": the functions offered
    choice: ToolChoice | None = None
    notes: tuple[str, ...] = ()  # what the format serves only approximately (llguidance's warnings)

    @functools.cached_property
    def schema(self) -> Any:
        """The JSON Schema, parsed once (None for another kind of format)."""
        return json.loads(self.source) if self.kind == "schema" else None

    @property
    def is_json(self) -> bool:
        return self.kind in ("json", "schema", "tools")

    def instruction(self) -> str:
        """Said to every member after the last user message: models write better JSON when told
        what is wanted."""
        if self.kind == "tools":
            return tools.instruction(self.tools, self.choice or tools.ToolChoice())
        if self.kind == "json":
            return "Answer with a JSON object only, on one line."
        if self.kind == "schema":
            said = schemas.told(json.loads(self.source))
            if said == self.source:
                return f"Answer with JSON only, on one line, matching this JSON Schema:\n{self.source}"
            return f"Answer with JSON only, on one line, of this shape (? marks an optional key):\n{said}"
        return f"Answer only with text in this format ({self.kind}):\n{self.source}"

    def parse(self, text: str) -> Any:
        """The answer as a program reads it: the JSON value (a model instance for a pydantic
        class), the text itself for a grammar or regex; None when it is not complete (cut by
        ``max_tokens``, stopped)."""
        if not self.is_json:
            return text
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if self.model is not None:
            try:
                return self.model.model_validate(value)
            except ValueError:
                return None
        return tools.reply_from(value) if self.kind == "tools" else value


def with_instruction(messages: list[Message], output_format: OutputFormat | None) -> list[Message]:
    """The conversation with the format's instruction after the last user message."""
    if output_format is None:
        return messages
    last = max((i for i, message in enumerate(messages) if message.role == "user"), default=None)
    if last is None:
        return [*messages, Message("user", output_format.instruction())]
    told = Message("user", f"{messages[last].content}\n\n{output_format.instruction()}")
    return [*messages[:last], told, *messages[last + 1 :]]


def output_format_from(
    schema: Any = None,
    json_object: bool = False,
    grammar: str | None = None,
    regex: str | None = None,
    offered: Any = None,
    tool_choice: Any = None,
    parallel_tool_calls: bool = True,
) -> OutputFormat | None:
    """The format an answer was asked for, checked: at most one of a JSON Schema (a dict,
    its JSON text, or a pydantic model class), any JSON object, a grammar (Lark or GBNF), a
    regex, or tools (``tools.py``: calls or a message). A ``SettingError`` names the field and
    what is wrong; None when none was given (or an empty list of tools: no tools). The grammar
    is compiled in the format compiler's child process (``format_compiler.py``)."""
    offered = None if offered in (None, [], ()) else offered
    values = (schema, json_object, grammar, regex, offered)
    given = [name for name, value in zip(FIELDS, values) if value is not None and value is not False]  # 0 is given
    if len(given) > 1:
        raise SettingError(f"give one of schema, json, grammar, regex or tools, not {' and '.join(given)}", given[1])
    if tool_choice is not None and offered is None and tool_choice not in ("none", "auto"):
        raise SettingError("tool_choice needs tools to choose from", "tool_choice")
    if not isinstance(parallel_tool_calls, bool):
        raise SettingError("parallel_tool_calls must be true or false", "parallel_tool_calls")
    if not given:
        return None
    if offered is not None:
        functions = tools.tools_from(offered)
        choice = tools.choice_from(tool_choice, functions)
        for index, function in enumerate(functions):
            schemas.check(function.parameters, "tools", f"tools[{index}].function.parameters")
        envelope = tools.envelope_schema(functions, choice, parallel_tool_calls)
        text = json.dumps(envelope, ensure_ascii=False)
        _size("tools", len(text.encode("utf-8")))
        return dataclasses.replace(_compiled("tools", text, text), tools=functions, choice=choice)
    if schema is not None:
        model = schema if hasattr(schema, "model_json_schema") else None
        value = _schema_value(schema.model_json_schema() if model is not None else schema)
        text = json.dumps(value, ensure_ascii=False)
        served, notes = schemas.rewritten(value)
        compiled = _compiled("schema", text, json.dumps(served, ensure_ascii=False))
        return dataclasses.replace(compiled, model=model, notes=notes + compiled.notes)
    if json_object:
        return _compiled("json", "", json.dumps({"type": "object"}))
    if grammar is not None:
        text = _text("grammar", grammar)
        rules = len(re.findall(r"^\s*[?!]?[A-Za-z_][\w.-]*\s*(?:::=|:)", text, re.MULTILINE))
        if rules > MAX_RULES:
            raise SettingError(f"grammar: {rules:,} rules is too many (at most {MAX_RULES:,})", "grammar")
        return _compiled("grammar", text, text)
    text = _text("regex", regex)
    return _compiled("regex", text, text)


def _schema_value(schema: Any) -> dict[str, Any]:
    if isinstance(schema, (str, bytes)):
        _size("schema", len(schema))
        try:
            schema = json.loads(schema)
        except RecursionError:
            raise SettingError(f"schema: nested more than {MAX_DEPTH} levels deep", "schema") from None
        except ValueError as error:
            raise SettingError(f"schema: not JSON ({first_line(str(error))})", "schema") from None
    if not isinstance(schema, dict):
        raise SettingError(f"schema: a JSON Schema is an object, not {type(schema).__name__}", "schema")
    schemas.check(schema)
    _size("schema", len(json.dumps(schema).encode("utf-8")))
    return schema


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingError(f"{field}: give the {field} as non-empty text", field)
    try:
        _size(field, len(value.encode("utf-8")))
    except UnicodeEncodeError:
        raise SettingError(f"{field}: not valid Unicode (a lone surrogate, such as half an emoji)", field) from None
    return value


def _size(field: str, size: int) -> None:
    if size > MAX_SOURCE:
        raise SettingError(f"{field}: {size:,} bytes is too large (at most {MAX_SOURCE:,})", field)


def _compiled(kind: FormatKind, source: str, served: str) -> OutputFormat:
    """The format once the compiler has built and checked its grammar (``served``: what it
    is given, the schema as rewritten); what it cannot enforce is said here, not mid-answer."""
    field = "json" if kind == "json" else kind
    compiled = compiler().compile(kind, served, field)
    return OutputFormat(kind, source, compiled.grammar, notes=compiled.notes)


class FormatMatcher:
    """The committed text's matcher: checks candidates, gives forced bytes, says when done."""

    def __init__(self, output_format: OutputFormat) -> None:
        self._matcher = llguidance.LLMatcher(byte_tokenizer(), output_format.grammar, log_level=0)

    def forced(self) -> str:
        """The text the format allows next and nothing else (whole characters, at most
        ``MAX_FORCED`` of them a round: ``a{5000000}`` forces five million)."""
        data = self._matcher.compute_ff_bytes()[: MAX_FORCED * 4]
        return data[: len(data) - incomplete_utf8_tail(data)].decode("utf-8")[:MAX_FORCED]

    def accepts(self, text: str, ended: bool) -> bool:
        """Whether ``text`` may follow what is committed (and, if ``ended``, end the answer)."""
        data = list(text.encode("utf-8"))
        if self._matcher.validate_tokens(data) != len(data):
            return False
        if not ended:
            return True
        self._matcher.consume_tokens(data)
        accepting = self._matcher.is_accepting()
        self._matcher.rollback(len(data))
        return accepting

    def commit(self, text: str) -> None:
        self._matcher.consume_tokens(list(text.encode("utf-8")))

    @property
    def complete(self) -> bool:
        """Nothing more may be written: the answer is whole. A matcher that failed (a grammar
        past llguidance's limits mid-answer) ends the answer with that error, in one line."""
        if self._matcher.is_error():
            raise SpecemError(f"the answer's format could not be followed: {first_line(self._matcher.get_error())}")
        return self._matcher.is_stopped()


def member_matcher(tokenizer: llguidance.LLTokenizer, output_format: OutputFormat) -> llguidance.LLMatcher:
    """A matcher over one member's own tokens (the tokenizer is built once per loaded model)."""
    return llguidance.LLMatcher(tokenizer, output_format.grammar, log_level=0)
