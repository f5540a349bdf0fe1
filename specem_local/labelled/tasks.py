"""What ``specem eval`` and ``specem calibrate`` answer and how each answer is graded: a
numeric item (GSM8K), a multiple-choice item, or a tool-call item (BFCL, research/bfcl.py).
Every item is checked when its file is read: a line that cannot be scored is one error naming
the line."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specem_local.dirs import read_text
from specem_local.errors import SpecemError
from specem_local.labelled.grading import extract_choice, extract_number, normalise_number, numbers_equal

NUMERIC_INSTRUCTION = "Solve the problem step by step, then write the final answer as: The answer is N."
CHOICE_INSTRUCTION = "Answer with the letter of the correct choice, as: The answer is X."
LETTERS = "ABCDEFGHIJ"  # what extract_choice reads: at most ten choices
ENDED = ("eos", "stop")  # the finish reasons of a whole answer; "length", "context", "cancelled": cut


@dataclass(frozen=True)
class Task:
    id: str
    question: str
    answer: str
    choices: tuple[str, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()  # a tool-call item: the functions offered, as tools
    functions: tuple[dict[str, Any], ...] = ()  # and BFCL's own descriptions of them, for grading
    messages: tuple[dict[str, Any], ...] = ()
    calls: tuple[dict[str, Any], ...] = ()  # the possible answers, BFCL's ground truth

    @property
    def prompt(self) -> Any:
        if self.tools:
            return list(self.messages)
        if not self.choices:
            return f"{self.question}\n\n{NUMERIC_INSTRUCTION}"
        lettered = "\n".join(f"{LETTERS[i]}) {choice}" for i, choice in enumerate(self.choices))
        return f"{self.question}\n\n{lettered}\n\n{CHOICE_INSTRUCTION}"

    @property
    def options(self) -> dict[str, Any]:
        """What the ensemble is given beside the prompt: a tool-call item's tools."""
        return {"tools": list(self.tools)} if self.tools else {}

    def grade(self, text: str, finish_reason: str = "eos", structured: bool = False) -> tuple[str | None, bool]:
        """The extracted answer (as text) and whether it is correct; a tool-call item by BFCL's
        AST rule. A JSON answer (``structured``: ``eval --schema``) is graded by its ``answer``
        field, and only when it is whole: one that was cut (``finish_reason`` other than "eos" or
        "stop") or does not parse is wrong, whatever numbers its text holds."""
        if (self.tools or structured) and finish_reason not in ENDED:
            return None, False
        if self.tools:
            return grade_calls(text, self)
        if structured:
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                return None, False
            if isinstance(value, dict) and "answer" in value:
                text = str(value["answer"])
        else:
            text = _answer_field(text)
        if self.choices:
            letter = extract_choice(text, len(self.choices))
            return letter, letter == self.answer.strip().upper()
        number = extract_number(text)
        return (None if number is None else f"{number:g}"), numbers_equal(number, self.answer)


def grade_calls(text: str, task: Task) -> tuple[str | None, bool]:
    """An envelope's calls, and whether BFCL's rule takes them (a message, or text that is not
    an envelope, is wrong)."""
    from specem_local.labelled.calls import calls_correct

    try:
        calls = json.loads(text).get("tool_calls")
    except (ValueError, AttributeError, RecursionError):
        return None, False
    if not isinstance(calls, list):
        return None, False
    return json.dumps(calls, ensure_ascii=False), calls_correct(calls, list(task.functions), list(task.calls))


def _answer_field(text: str) -> str:
    """A structured answer's ``answer`` field as text, else the answer as it is."""
    if not text.startswith("{"):
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return str(value["answer"]) if isinstance(value, dict) and "answer" in value else text


def load_tasks(path: Path) -> list[Task]:
    """Read JSON lines: ``{"id", "question", "answer"}`` (a numeric answer) or with
    ``"choices"`` (a list of strings) and a letter answer (multiple choice). A line that cannot
    be read or an item that cannot be scored is a one-line error naming the line."""
    tasks = []
    lines = read_text(path, "tasks file", pipes=True).split("\n")  # not splitlines: U+2028 may be in a string
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                tasks.append(task_from_json(line, number))
            except ValueError as error:
                raise SpecemError(f"{path}:{number}: {error}") from None
    if not tasks:
        raise SpecemError(f"{path}: no tasks in the file")
    return tasks


def tool_task(data: dict[str, Any], number: int) -> Task:
    """A tool-call item (``research/bfcl.py`` writes them): ``messages``, ``tools``, BFCL's
    ``functions`` and its possible answers as ``answer``."""
    messages, tools, functions, calls = (data.get(key) for key in ("messages", "tools", "functions", "answer"))
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError('a tool-call item needs "messages", a non-empty list of messages')
    for key, value in (("tools", tools), ("functions", functions), ("answer", calls)):
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            raise ValueError(f'a tool-call item needs "{key}", a non-empty list of objects')
    assert isinstance(tools, list) and isinstance(functions, list) and isinstance(calls, list)  # checked above
    question = str(messages[-1].get("content", ""))
    item_id = str(data.get("id", number))
    return Task(item_id, question, "", (), tuple(tools), tuple(functions), tuple(messages), tuple(calls))


def task_from_json(line: str, number: int) -> Task:
    """One item, checked so that it can be scored; ``ValueError`` says what is wrong."""
    try:
        data = json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply to be a task") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f'expected an object {{"question": ..., "answer": ...}}, got {type(data).__name__}')
    if "tools" in data:
        return tool_task(data, number)
    question, answer, choices = data.get("question"), data.get("answer"), data.get("choices")
    if not isinstance(question, str) or not question.strip():
        raise ValueError('"question" must be a non-empty string')
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise ValueError('"answer" must be a number or a string (a letter with "choices")')
    if choices is None:
        value = normalise_number(str(answer))
        if value is None or not math.isfinite(value):
            raise ValueError(f'"answer" {str(answer)[:30]!r} is not a number; give "choices" for a letter answer')
        return Task(str(data.get("id", number)), question, str(answer))
    if (
        not isinstance(choices, list)
        or not 2 <= len(choices) <= len(LETTERS)
        or not all(isinstance(choice, str) for choice in choices)
    ):
        raise ValueError(f'"choices" must be a list of 2 to {len(LETTERS)} strings')
    letters = LETTERS[: len(choices)]
    if not isinstance(answer, str) or answer.strip().upper() not in letters:
        raise ValueError(f'"answer" {str(answer)[:30]!r} must be one of the letters {", ".join(letters)}')
    return Task(str(data.get("id", number)), question, answer.strip().upper(), tuple(choices))
