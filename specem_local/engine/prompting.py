"""Turning a conversation into each model's prompt tokens.

Each model renders the whole conversation with its own chat template (from its GGUF, or an
override in models.toml), in a sandboxed Jinja environment. Models without a template (base
models such as Gemma-3-270M) get the plain format below. A conversation that ends with an
assistant message is an answer to continue: the prompt is the conversation before it, ready
for the answer, followed by that message's text (as llama.cpp's server and Anthropic's API
do with a trailing assistant message). Message text is always tokenized
as text, never parsed for special tokens: a user typing ``<|im_end|>`` cannot end a turn.

Earlier tool calls and their results (issue 47) are rendered in the family's own format where
its template has one (Qwen's ``<tool_call>`` and ``<tool_response>``), found by rendering a probe
conversation as llama.cpp's ``common/chat.cpp`` does; other templates and the plain format get
them as text (``tool_turns``). The strings inside a call's arguments, and the id a client gave
a call, are message text too.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol

from jinja2 import Template, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specem_local.errors import SettingError, SpecemError

ROLES = ("system", "user", "assistant", "tool")

# The plain-text format for models without a chat template. The answer follows the final
# "### Assistant:" line; a base model that goes on to write the next "### User:" turn has
# ended its answer, so that text is a per-model stop string.
PLAIN_TURN = {
    "system": "{content}\n\n",
    "user": "### User:\n{content}\n\n",
    "assistant": "### Assistant:\n{content}\n\n",
}
PLAIN_ANSWER_HEADER = "### Assistant:\n"
PLAIN_STOPS = ("### User:", "\n### ")

_SENTINEL = re.compile("\ue000(\\d+)\ue001")


@dataclass(frozen=True)
class ToolUse:
    """An earlier tool call as the conversation records it."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Message:
    """A turn: ``calls`` are an assistant's tool calls; a ``tool`` message is a result of the
    function ``name``."""

    role: str
    content: str
    calls: tuple[ToolUse, ...] = field(default=())
    name: str = ""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise SettingError(f"message role must be one of {', '.join(ROLES)}; got {self.role!r}", "messages")
        if not isinstance(self.content, str):
            raise SettingError(
                f"a {self.role} message's content must be text, got {type(self.content).__name__}", "messages"
            )
        texts = [("message", self.content), ("tool name", self.name)]
        for call in self.calls:  # a call's arguments and id are prompt text too
            arguments = json.dumps(call.arguments, ensure_ascii=False, default=str)
            texts += [("tool call's arguments", arguments), ("tool call id", call.id)]
        for what, text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise SettingError(
                    f"a {self.role} {what} is not valid Unicode text (a lone surrogate at character {error.start}); "
                    "decode its bytes with errors='replace'",
                    "messages",
                ) from None


class Tokenizer(Protocol):
    def tokenize(self, text: str, *, parse_special: bool = False, add_bos: bool = False) -> list[int]: ...


@dataclass(frozen=True)
class PromptFormat:
    """How one model is prompted: a Jinja chat template, or the plain format when None."""

    template: str | None
    bos_text: str = ""
    eos_text: str = ""

    @property
    def is_plain(self) -> bool:
        return self.template is None

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Text that, appearing in this model's draft, means the model ended its answer."""
        return PLAIN_STOPS if self.is_plain else ()

    @cached_property
    def native_tools(self) -> bool:
        """Whether the template renders an assistant's tool call and a tool's result itself
        (found by rendering a probe conversation, as llama.cpp's ``common/chat.cpp`` does)."""
        if self.template is None:
            return False
        probe = [
            Message("user", "Hi"),
            Message("assistant", "", (ToolUse("probe_function", {"probe": "argument"}, "call_probe"),)),
            Message("tool", "probe result", name="probe_function"),
        ]
        try:
            rendered = "".join(text for text, _ in _render_template(self.template, probe, self.bos_text, self.eos_text))
        except SpecemError:
            return False
        return all(said in rendered for said in ("probe_function", "argument", "probe result"))

    def render(self, messages: list[Message], native_tools: bool = True) -> list[tuple[str, bool]]:
        """The prompt as pieces ``(text, is_message_text)``, ready for the assistant's answer
        (or, after a trailing assistant message, for the rest of it). Tool calls and results
        are in the template's own format if it has one and ``native_tools``, text turns if not."""
        asked, partial = split_partial_answer(messages)
        if not (native_tools and self.native_tools) and any(m.calls or m.role == "tool" for m in asked):
            asked = tool_turns(asked)
        asked = merged_turns(asked)
        if self.is_plain:
            pieces = _render_plain(asked)
        else:
            pieces = _render_template(self.template or "", asked, self.bos_text, self.eos_text)
        return [*pieces, (partial, True)] if partial else pieces

    def tokens(
        self, messages: list[Message], tokenizer: Tokenizer, *, bos_token: int | None, native_tools: bool = True
    ) -> list[int]:
        """Prompt tokens: scaffolding parsed for special tokens, message text as plain text."""
        tokens: list[int] = []
        for text, is_message_text in self.render(messages, native_tools):
            if text:
                tokens += tokenizer.tokenize(text, parse_special=not is_message_text)
        if bos_token is not None and bos_token >= 0 and (not tokens or tokens[0] != bos_token):
            tokens.insert(0, bos_token)
        return tokens


def _render_plain(messages: list[Message]) -> list[tuple[str, bool]]:
    pieces: list[tuple[str, bool]] = []
    for message in messages:
        before, after = PLAIN_TURN[message.role].split("{content}")
        pieces += [(before, False), (message.content, True), (after, False)]
    pieces.append((PLAIN_ANSWER_HEADER, False))
    return pieces


def _render_template(template: str, messages: list[Message], bos_text: str, eos_text: str) -> list[tuple[str, bool]]:
    """Render with each message's content (and each string in a tool call's arguments, and each
    call's id) replaced by a sentinel, then split the output at the sentinels so that message
    text and template scaffolding are tokenized differently."""
    texts: list[str] = []

    def stand_in(text: str) -> str:
        texts.append(text)
        return f"\ue000{len(texts) - 1}\ue001"

    def masked(value: Any) -> Any:  # a string inside JSON stands for its escaped text
        if isinstance(value, str):
            return stand_in(json.dumps(value, ensure_ascii=False)[1:-1])
        if isinstance(value, dict):
            return {masked(str(key)): masked(item) for key, item in value.items()}
        return [masked(item) for item in value] if isinstance(value, list) else value

    stand_ins = []
    for message in messages:
        entry: dict[str, Any] = {"role": message.role, "content": stand_in(message.content)}
        if message.calls:
            entry["content"] = stand_in(message.content) if message.content else ""
            entry["tool_calls"] = [
                {
                    "id": stand_in(c.id) if c.id else "",  # the client's id: text, as the message's own
                    "type": "function",
                    "function": {"name": c.name, "arguments": masked(c.arguments)},
                }
                for c in message.calls
            ]
        if message.role == "tool":
            entry["name"] = message.name
        stand_ins.append(entry)
    try:
        rendered = _compiled(template).render(
            messages=stand_ins, add_generation_prompt=True, bos_token=bos_text, eos_token=eos_text
        )
    except TemplateError as error:
        raise SpecemError(f"chat template failed to render: {error}") from None
    pieces: list[tuple[str, bool]] = []
    position = 0
    for match in _SENTINEL.finditer(rendered):
        pieces.append((rendered[position : match.start()], False))
        pieces.append((texts[int(match.group(1))], True))
        position = match.end()
    pieces.append((rendered[position:], False))
    return pieces


@functools.lru_cache(maxsize=32)
def _compiled(template: str) -> Template:
    """A chat template compiled once (a Jinja compile costs 20-40 ms, every answer, per member;
    one that fails to compile is not kept, and fails again when asked for)."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.policies["json.dumps_kwargs"] = {"sort_keys": False, "ensure_ascii": False}

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return environment.from_string(template)


RESULTS_INTRO = "The functions returned:"
RESULTS_ADVICE = "Answer my question with these results, or call another function if they are not enough."


def tool_turns(messages: list[Message]) -> list[Message]:
    """Tool calls and results as plain turns, for a template without its own tool format: an
    assistant's calls as the envelope it answers in, consecutive results as one user turn that
    says what each function returned and what to do with it."""
    out: list[Message] = []
    results: list[Message] = []
    for message in [*messages, Message("user", "")]:
        if message.role == "tool":
            results.append(message)
            continue
        if results:
            said = "\n".join(f"{r.name} returned: {r.content}" for r in results)
            turn = f"{RESULTS_INTRO}\n{said}\n{RESULTS_ADVICE}"
            results = []
            if message.role == "user" and message.content:  # the user's words after the results: the same turn
                out.append(Message("user", f"{turn}\n\n{message.content}"))
                continue
            out.append(Message("user", turn))
        if message.calls:
            calls = [{"name": c.name, "arguments": c.arguments} for c in message.calls]
            out.append(Message("assistant", json.dumps({"tool_calls": calls}, ensure_ascii=False)))
        else:
            out.append(message)
    return out[:-1]


def merged_turns(messages: list[Message]) -> list[Message]:
    """Consecutive messages of one role (neither a tool call nor a result) as one, their texts a
    blank line apart, as OpenAI's and Anthropic's APIs take them: many chat templates refuse
    two user turns in a row ("roles must alternate")."""
    out: list[Message] = []
    for message in messages:
        last = out[-1] if out else None
        if last is not None and last.role == message.role != "tool" and not (last.calls or message.calls):
            out[-1] = Message(last.role, "\n\n".join(text for text in (last.content, message.content) if text))
        else:
            out.append(message)
    return out


def split_partial_answer(messages: list[Message]) -> tuple[list[Message], str]:
    """The conversation up to the answer, and the start of the answer to continue ("" when
    the conversation ends with the user's message)."""
    if messages and messages[-1].role == "assistant":
        return messages[:-1], messages[-1].content
    return messages, ""


def as_messages(prompt: str | list[Message] | list[dict[str, str]], system_prompt: str = "") -> list[Message]:
    """Accept a prompt string, Message objects or ``{"role", "content"}`` dicts. The last
    message is the user's, or an assistant message to continue that follows the user's."""
    if isinstance(prompt, str):
        messages = [Message("user", prompt)]
    elif isinstance(prompt, (list, tuple)) and prompt:
        messages = [_message(m, f"messages[{index}]") for index, m in enumerate(prompt)]
    else:
        raise SettingError(f"the prompt must be text or a non-empty list of messages, not {_kind(prompt)}", "messages")
    asked, _ = split_partial_answer(messages)
    if not asked or asked[-1].role not in ("user", "tool"):
        raise SettingError(
            "a conversation must end with a user message or a tool's result (or with the start of an answer "
            "to continue after one)",
            "messages",
        )
    if system_prompt and messages[0].role != "system":
        messages.insert(0, Message("system", system_prompt))
    return messages


def _message(value: Any, where: str) -> Message:
    """One message of a conversation given as data: a ``Message``, or ``{"role", "content"}``."""
    if isinstance(value, Message):
        return value
    if not isinstance(value, dict):
        raise SettingError(f'{where} must be an object with a "role" and a "content", not {_kind(value)}', "messages")
    role, content = value.get("role"), value.get("content")
    if role not in ROLES:
        raise SettingError(f"{where}.role must be one of {', '.join(ROLES)}; got {str(role)[:40]!r}", "messages")
    if not isinstance(content, str):
        raise SettingError(f"{where}.content must be text, not {_kind(content)}", "messages")
    return Message(role, content)


def _kind(value: Any) -> str:
    """What a value is, in a word, for an error message."""
    return "nothing" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"
