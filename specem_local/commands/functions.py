"""``specem run --functions FILE.py``: Python functions the models may call, run here, so one
command goes through a whole agent loop (calls, results, the answer), as the ``llm`` CLI's
``--functions`` does. The file is the user's own code, run with their rights; a function that
raises gives the models its error as the result, as a tool server would."""

from __future__ import annotations

import inspect
import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specem_local.errors import SettingError

if TYPE_CHECKING:
    from specem_local.engine.tools import ToolCall

MAX_RESULT = 20_000  # characters of a result the models read; past it, cut and said so


def load_functions(path: str) -> list[Callable[..., Any]]:
    """The public functions a Python file defines (not the ones it imports), in its order."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise SettingError(f"--functions {path}: no such file; give a Python file that defines functions", "tools")
    try:
        namespace = runpy.run_path(str(file), run_name="specem_functions")
    except Exception as error:  # the user's file failed to run: SyntaxError, ImportError, ...
        said = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        raise SettingError(f"--functions {path}: the file failed to run ({said})", "tools") from None
    defined: list[Callable[..., Any]] = [
        value
        for name, value in namespace.items()
        if inspect.isfunction(value) and not name.startswith("_") and value.__code__.co_filename == str(file)
    ]
    if not defined:
        raise SettingError(f"--functions {path}: the file defines no public function", "tools")
    return defined


def call_function(functions: list[Callable[..., Any]], call: ToolCall) -> str:
    """Run one call; its result as the models read it: text as it is, anything else as JSON, an
    exception as ``error: TYPE: message``."""
    function = next(f for f in functions if f.__name__ == call.name)  # the grammar allows no other name
    try:
        result = function(**call.arguments)
    except Exception as error:
        return f"error: {type(error).__name__}: {error}"[:MAX_RESULT]
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_RESULT else f"{text[:MAX_RESULT]} [cut at {MAX_RESULT:,} characters]"
