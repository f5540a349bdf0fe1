"""One answer as it was asked, the same value at every door.

Each front end (the OpenAI and Ollama routes, ``specem run`` and its batch lines, ``--functions``,
the chat app, the Python API) parses what it was given into an ``Ask``: the conversation, the
``[ensemble]`` settings for this answer, the output format in one spelling (``FormatAsk``),
whether to think first, which members take part. ``Ensemble.prepare`` turns an ``Ask`` into the
checked ``AnswerRequest`` everything after runs from (``request.py``). A misspelt field of the ask
or of its format is a ``TypeError`` the type checker sees; a misspelt setting is a
``SettingError`` from ``prepare``, naming it, before anything runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine.formats import OutputFormat, output_format_from
from specem_local.engine.request import Prompt
from specem_local.errors import SettingError
from specem_local.setting_fields import describe, unknown_key_error
from specem_local.settings import EnsembleSettings, LoadSettings


@dataclass(frozen=True)
class FormatAsk:
    """The answer's format as asked: at most one of a JSON Schema (a dict, its JSON text or a
    pydantic model class), any JSON object, a grammar (Lark or GBNF), a regex, or tools
    (``tool_choice`` and ``parallel_tool_calls`` as OpenAI's). Checked and compiled by
    ``compiled()`` (``formats.output_format_from``)."""

    schema: Any = None
    json: bool = False
    grammar: str | None = None
    regex: str | None = None
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True

    def compiled(self) -> OutputFormat | None:
        """The format, checked, its grammar compiled (None when none was asked for): a
        ``SettingError`` names the field at fault."""
        return output_format_from(
            self.schema, self.json, self.grammar, self.regex, self.tools, self.tool_choice, self.parallel_tool_calls
        )


FORMAT_KEYS = tuple(item.name for item in dataclasses.fields(FormatAsk))


@dataclass(frozen=True)
class Ask:
    """One answer as asked: ``prompt`` (text or a conversation), ``settings`` (``[ensemble]``
    settings for this answer), ``output`` (the format as asked, or already compiled), ``think``
    (thinking before a format: None for the setting, True / False, a level or a number of
    tokens: ``thinking.plan``), ``models`` (the members that take part; None: all), ``prediction``
    (what the answer is expected to repeat, OpenAI's predicted outputs)."""

    prompt: Prompt
    settings: Mapping[str, Any] = field(default_factory=dict)
    output: FormatAsk | OutputFormat | None = None
    think: Any = None
    models: tuple[str, ...] | None = None
    prediction: str = ""  # text the answer is expected to repeat: drafted faster, the same text (prediction.py)

    def compiled_format(self) -> OutputFormat | None:
        return self.output.compiled() if isinstance(self.output, FormatAsk) else self.output


ASK_KEYS = (*FORMAT_KEYS, "output_format", "think", "models", "prediction")  # an ask's keywords besides the settings
SETTING_NAMES = frozenset(item.name for item in describe(EnsembleSettings)) | frozenset(
    item.name
    for item in describe(LoadSettings)  # said by prepare: read when the models load
)


def ask_from(prompt: Prompt, options: Mapping[str, Any]) -> Ask:
    """The Python API's keywords (``ensemble.stream(prompt, schema=..., max_tokens=...)``) and a
    batch line's keys as an ``Ask``: the format's keys (or ``output_format``, one compiled
    already), ``think``, ``models``, ``prediction``; every other key is a setting (``prepare``
    checks it)."""
    formats = {key: value for key, value in options.items() if key in FORMAT_KEYS}
    compiled = options.get("output_format")
    if formats and compiled is not None:
        raise SettingError(
            "give output_format or the format's own keys (schema, tools, ...), not both", "output_format"
        )
    if compiled is not None and not isinstance(compiled, OutputFormat):
        raise SettingError(
            "output_format must be a format from output_format_from (or give schema=, ...)", "output_format"
        )
    output = compiled if compiled is not None else FormatAsk(**formats) if formats else None
    settings = {key: value for key, value in options.items() if key not in ASK_KEYS}
    for key in settings:
        if key not in SETTING_NAMES:
            known = sorted([*ASK_KEYS, *SETTING_NAMES])
            raise SettingError(str(unknown_key_error(key, known, "", "keyword")), key)
    prediction = options.get("prediction", "")
    return Ask(prompt, settings, output, options.get("think"), _models(options.get("models")), _prediction(prediction))


def _prediction(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise SettingError("prediction must be text: what the answer is expected to repeat", "prediction")


def _models(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value):
        return tuple(value)
    raise SettingError("models must be a list of the loaded models' names", "models")
