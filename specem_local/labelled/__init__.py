"""Labelled items: questions with their right answers (GSM8K numbers, choices and a letter, JSON
answers, tool calls), read from JSON lines, and how an answer is graded against one.
``specem calibrate`` weighs the members by them; ``specem eval`` and the research harness
measure by them. Pure: no model, no engine.

May import: ``errors``, ``dirs``.
"""

from specem_local.labelled.calls import calls_correct, tool_name
from specem_local.labelled.grading import extract_choice, extract_number, normalise_number, numbers_equal
from specem_local.labelled.tasks import ENDED, Task, load_tasks

__all__ = [
    "ENDED",
    "Task",
    "calls_correct",
    "extract_choice",
    "extract_number",
    "load_tasks",
    "normalise_number",
    "numbers_equal",
    "tool_name",
]
