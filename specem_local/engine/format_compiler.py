"""An answer's format (a JSON Schema, a grammar, a regex) compiled where a crash or a stall costs
one refused request, never the process that answers: a child process of its own, as a member on
other machines has its worker.

llguidance compiles recursively, in native code: a schema or grammar deep enough overflows the
stack (a segfault no Python code can catch), and a large one can take seconds. The child
compiles each format once, on a thread with a quarter of the stack an answer's threads have, so
a format that compiles there has room to spare when the members build their matchers from it; a
compile that takes longer than ``COMPILE_SECONDS`` is ended with the child. Either way the
request gets a one-line ``SettingError`` and the next one a fresh child.

The child is ``python -c COMMAND FD PARENT`` (``child()``): it reads ``(kind,
source)`` from its end of a socket pair and answers ``("ok", grammar, notes)`` or
``("refused", message)``.

A ``fork()`` of this process (multiprocessing's fork start method, a test runner that forks)
copies every compiler with its child, its pipe and its lock, none of them the copy's own: the
copy forgets them (``_forget``) and starts a child of its own at its first compile.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import llguidance
import numpy as np

from specem_local.backend.children import end_with_parent, spawn
from specem_local.errors import SettingError

COMPILE_SECONDS = 10.0  # the longest a format may take to compile (a 5,000-property schema: 2.6 s)
CHILD_STACK = 2 << 20  # bytes of stack the child compiles with: a quarter of a thread's usual 8 MiB
# One line of JSON, a space after each separator: llguidance's flexible whitespace is unlimited,
# and a small model can fill max_tokens with spaces. ``lenient``: a keyword llguidance does not
# enforce is a note, not a refusal (docs/structured-output.md says which); ``coerce_one_of``:
# oneOf is served as anyOf.
JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": True,
    "coerce_one_of": True,
}
BYTE_EOS = 256  # the byte-level matcher's end token
MAX_FORCED = 64  # characters of forced text committed in one round
COMMAND = "from specem_local.engine.format_compiler import child; child()"  # python -c COMMAND FD PARENT


@dataclass(frozen=True)
class Compiled:
    """llguidance's grammar for a format, and what it serves only approximately (in words)."""

    grammar: str
    notes: tuple[str, ...] = ()


# -- the compiling itself (in the child) ------------------------------------------------------------
def compile_format(kind: str, source: str, field: str) -> Compiled:
    """The grammar for ``source`` (a schema's JSON text, a grammar, a regex), checked by
    llguidance to be enforceable and to allow some text; a ``SettingError`` naming ``field``
    otherwise."""
    if kind in ("json", "schema", "tools"):
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.loads(source), JSON_OPTIONS)  # type: ignore[arg-type]
    elif kind == "grammar":
        try:
            grammar = llguidance.grammar_from("grammar", source)
        except ValueError as error:  # GBNF that does not convert to Lark
            raise SettingError(f"{field}: {first_line(str(error))}", field) from None
    else:
        grammar = llguidance.LLMatcher.grammar_from_regex(source)
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, byte_tokenizer())
    if failed:
        raise SettingError(f"{field}: cannot be enforced: {first_line(messages[0])}", field)
    refused = _unserved(messages)
    if refused:
        raise SettingError(f"{field}: cannot be enforced: {refused} (docs/structured-output.md)", field)
    matcher = llguidance.LLMatcher(byte_tokenizer(), grammar, log_level=0)
    matcher.consume_tokens(list(matcher.compute_ff_bytes()[: MAX_FORCED * 4]))  # what a first round commits
    if matcher.is_error():
        raise SettingError(f"{field}: cannot be enforced: {first_line(matcher.get_error())}", field)
    if not matcher.is_accepting() and not allowed_tokens(matcher, BYTE_EOS).any():  # no byte may come
        raise SettingError(f"{field}: no text can match it", field)
    return Compiled(grammar, tuple(dict.fromkeys(first_line(m) for m in messages)))


# Keywords llguidance leaves out in lenient mode that an answer then often breaks (measured on
# JSONSchemaBench: a condition not followed is an invalid answer): refused, not approximated.
REFUSED_KEYWORDS = ("if", "then", "else", "not")


def _unserved(warnings: list[str]) -> str | None:
    """The keywords of ``REFUSED_KEYWORDS`` llguidance said it would leave out, in words."""
    for warning in warnings:
        if warning.startswith("Unimplemented keys:"):
            named = [k for k in json.loads(warning.split(":", 1)[1].split(" (")[0]) if k in REFUSED_KEYWORDS]
            if named:
                return f"the keyword{'s' if len(named) > 1 else ''} {', '.join(named)} cannot be followed"
    return None


def first_line(text: str) -> str:
    """llguidance's message on one line (its own runs over several, with a caret)."""
    text = text.split("\n<state>")[0]
    return " ".join(text.split())[:300] or "llguidance refused it"


@functools.cache
def byte_tokenizer() -> llguidance.LLTokenizer:
    """A tokenizer whose tokens are the 256 bytes (and an end token): the committed text's."""
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


class _Bytes:
    eos_token_id = BYTE_EOS
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"\xff<end>"]
    special_token_ids = [BYTE_EOS]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))


def allowed_tokens(matcher: llguidance.LLMatcher, size: int) -> np.ndarray:
    """The tokens ``matcher`` allows next, as a boolean mask over a logits row of ``size``."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    mask = np.zeros(size, dtype=bool)
    shared = min(size, len(bits))
    mask[:shared] = bits[:shared].astype(bool)
    return mask


def _answer(kind: str, source: str, field: str) -> tuple[str, ...]:
    try:
        compiled = compile_format(kind, source, field)
    except SettingError as error:
        return ("refused", str(error))
    return ("ok", compiled.grammar, *compiled.notes)


def _serve(connection: Connection) -> None:
    """The child's life: compile each request on a thread with ``CHILD_STACK`` of stack."""
    threading.stack_size(CHILD_STACK)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:  # its thread has that stack
        while True:
            try:
                kind, source, field = connection.recv()
            except EOFError:
                return
            connection.send(thread.submit(_answer, kind, source, field).result())


# -- the parent's side --------------------------------------------------------------------------------
class FormatCompiler:
    """The child process that compiles formats, started when first needed and again after a
    crash or a stall ended it. One compile at a time (a lock); ``compile`` is thread-safe."""

    def __init__(self, seconds: float = COMPILE_SECONDS, command: list[str] | None = None) -> None:
        self.seconds = seconds
        self._command = command or [sys.executable, "-c", COMMAND]
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._pipe: Connection | None = None
        _COMPILERS.add(self)

    def compile(self, kind: str, source: str, field: str) -> Compiled:
        """``source`` compiled, or a ``SettingError`` naming ``field``: llguidance refused it, the
        compiler crashed on it, or it took longer than ``seconds``."""
        with self._lock:
            pipe = self._started()
            try:
                pipe.send((kind, source, field))
                answer = self._wait(pipe)
            except (OSError, EOFError):  # the child died: its end of the pipe closed
                answer = None
            if not isinstance(answer, tuple):
                why = self._ended(timed_out=answer == "slow")
                raise SettingError(f"{field}: {why}; simplify it (docs/structured-output.md, limits)", field)
        if answer[0] == "refused":
            raise SettingError(answer[1], field)
        return Compiled(answer[1], tuple(answer[2:]))

    def _wait(self, pipe: Connection) -> tuple[str, ...] | str | None:
        """The child's answer; None if it died, "slow" if it took longer than ``seconds``."""
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            if pipe.poll(0.02):
                return pipe.recv()
            if self._process is not None and self._process.poll() is not None:
                return None
        return "slow"

    def _started(self) -> Connection:
        if self._pipe is not None and self._process is not None and self._process.poll() is None:
            return self._pipe
        mine, theirs = socket.socketpair()
        self._process = spawn(
            [*self._command, str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # the terminal's Ctrl-C is for the parent to handle
        )
        theirs.close()
        self._pipe = Connection(mine.detach())
        return self._pipe

    def _ended(self, timed_out: bool) -> str:
        """End the child (it took too long) or reap it (it died), and say which."""
        process, self._process = self._process, None
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if process is None:
            return "the format compiler could not start"
        if timed_out:
            process.kill()
            process.wait()
            return f"took longer than {self.seconds:g} s to compile"
        try:
            code = process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # its pipe closed, yet it lives on: end it
            process.kill()
            code = process.wait()
        name = signal.Signals(-code).name if -code in set(signal.Signals) else f"exit code {code}"
        return f"the format compiler crashed on it ({name}): too large or deeply nested to enforce"

    def _forget(self) -> None:
        """In a forked copy of this process: the child and the pipe are the parent's (this copy of
        the pipe is closed, the parent's goes on), and the lock may be held by a thread the fork did
        not copy. The next compile starts a child of this process's own."""
        self._lock = threading.Lock()
        self._process = None
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
            if self._pipe is not None:
                self._pipe.close()  # the child sees the end of its pipe and exits
                self._pipe = None
            if process is not None:
                try:
                    process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


_COMPILERS: weakref.WeakSet[FormatCompiler] = weakref.WeakSet()  # every compiler, for a fork to reset


def _forget_children() -> None:
    for each in list(_COMPILERS):
        each._forget()


os.register_at_fork(after_in_child=_forget_children)


@functools.cache
def compiler() -> FormatCompiler:
    """This process's format compiler (its child ends with it)."""
    shared = FormatCompiler()
    atexit.register(shared.close)
    return shared


def child() -> None:
    """The compiler process: ``sys.argv`` holds its end of the pipe and its parent's id."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent(int(sys.argv[2]))
    _serve(Connection(int(sys.argv[1])))
