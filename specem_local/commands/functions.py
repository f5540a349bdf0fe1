"""``specem run --functions FILE.py``: Python functions the models may call, run here, so one
command goes through a whole agent loop (calls, results, the answer), as the ``llm`` CLI's
``--functions`` does. The file is the user's own code, run with their rights; a function that
raises gives the models its error as the result, as a tool server would. ``call_runner`` runs
a call by whichever source offers it: these functions, or ``--mcp``'s servers' tools."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specem_local.commands.terminal import printable
from specem_local.errors import SettingError

if TYPE_CHECKING:
    from specem_local.engine import ToolCall
    from specem_local.mcp import McpTools

MAX_RESULT = 20_000  # characters of a result the models read; past it, cut and said so
TERMINAL = "/dev/tty"  # where --approve asks


def load_functions(path: str) -> list[Callable[..., Any]]:
    """The public functions a Python file defines (not the ones it imports), in its order."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise SettingError(f"--functions {path}: no such file; give a Python file that defines functions", "tools")
    try:
        namespace = runpy.run_path(str(file), run_name="specem_functions")
    except (Exception, SystemExit) as error:  # the file failed to run: SyntaxError, ImportError, sys.exit()
        said = " ".join(f"{type(error).__name__}: {_said(error)}".split())[:300]
        raise SettingError(f"--functions {path}: the file failed to run ({said})", "tools") from None
    defined: list[Callable[..., Any]] = [
        value
        for name, value in namespace.items()
        if inspect.isfunction(value) and not name.startswith("_") and value.__code__.co_filename == str(file)
    ]
    if not defined:
        raise SettingError(f"--functions {path}: the file defines no public function", "tools")
    return defined


def terminal_asker() -> Callable[[str], bool]:
    """``--approve``: a question answered y or n on the terminal, ``/dev/tty`` (stdin may carry
    the prompt), where it is also asked (stderr may be a file). Without a terminal a
    ``SettingError``, said before any model loads rather than at the first call."""
    try:
        os.close(os.open(TERMINAL, os.O_RDWR | os.O_NOCTTY))
    except OSError:
        raise SettingError("--approve asks before each call on a terminal, and there is none here", "tools") from None

    def ask(question: str) -> bool:
        terminal = os.open(TERMINAL, os.O_RDWR | os.O_NOCTTY)  # not seekable: no text file over it
        try:
            os.write(terminal, f"{printable(question)} [y/N] ".encode())
            answer = os.read(terminal, 1024)  # a terminal hands over one line
        finally:
            os.close(terminal)
        return answer.decode("utf-8", "replace").strip().lower() in ("y", "yes")

    return ask


def call_function(
    functions: list[Callable[..., Any]], call: ToolCall, approve: Callable[[str], bool] | None = None
) -> str:
    """Run one call (once ``approve`` says yes to it, when given); its result as the models read
    it: text as it is, anything else as JSON. What goes wrong is the models' to read, as
    ``error: ...``, and the loop goes on: arguments the function cannot take, an exception, a
    ``sys.exit()``, a result with no JSON form. Ctrl-C still stops the command."""
    function = next(f for f in functions if f.__name__ == call.name)  # the grammar allows no other name
    if approve is not None and not approve(question(call)):
        return declined(call)
    try:
        inspect.signature(function).bind(**call.arguments)
        result = function(**call.arguments)
        if inspect.iscoroutine(result):  # an async def
            result = asyncio.run(result)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        text.encode("utf-8")  # a lone surrogate is not text a prompt can hold
    except (Exception, SystemExit) as error:
        text = f"error: {type(error).__name__}: {_said(error)}"
    return text if len(text) <= MAX_RESULT else f"{text[:MAX_RESULT]} [cut at {MAX_RESULT:,} characters]"


def call_runner(
    functions: list[Callable[..., Any]], mcp: McpTools | None = None, approve: Callable[[str], bool] | None = None
) -> Callable[[ToolCall], str]:
    """What runs the agent loop's calls: each by the source that offers its name (a function
    of ``--functions``, a tool of ``--mcp``'s servers), once ``approve`` says yes to it."""

    def run(call: ToolCall) -> str:
        if approve is not None and not approve(question(call)):
            return declined(call)
        if mcp is not None and call.name in mcp.names:
            return mcp.call(call.name, call.arguments)
        return call_function(functions, call)

    return run


def question(call: ToolCall) -> str:
    """What ``--approve`` asks before a call."""
    return f"Run {call.name}({json.dumps(call.arguments, ensure_ascii=False)})?"


def declined(call: ToolCall) -> str:
    """The result the models read for a call the user declined."""
    return f"error: the user declined to run {call.name}; it was not run"


def _said(error: BaseException) -> str:
    """An exception's message as text a prompt can hold, even where its ``str()`` raises or
    holds a lone surrogate."""
    try:
        message = str(error)
    except Exception:
        return "(its message cannot be shown)"
    return message.encode("utf-8", "backslashreplace").decode("utf-8")
