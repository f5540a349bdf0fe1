"""Weights for each kind of task (issue 56): which (member, way) to believe when the answer is
one of a few options, kept per ensemble and per task, not one vector for everything.

The best member, and the best way to ask it, change with the task (docs/choices.md): Qwen asked
in its chat template for sentiment, Gemma scoring the options for physical commonsense. A task is
a name the user gives (``task = "sentiment"``: a setting, so a request, ``--task`` or a
models.toml section); without one it is ``choices``. ``specem calibrate --task NAME items.jsonl``
fits a task's weights (``options.fitted_weights``) and each source's label prior from labelled
items and keeps them in the user's data dir; the built-in ensembles ship theirs
(``data/option_weights.json``). A task with none uses the ensemble's ``choices`` weights, and
with none of those every source counts equally.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.dirs import data_dir, file_lock, replace_file
from specem_local.engine import options as opt
from specem_local.engine.learned import key_of
from specem_local.engine.member import Member
from specem_local.errors import DamagedData, SpecemError

DEFAULT_TASK = "choices"
SMOOTHING = 1.0  # items each source is credited besides the labelled ones (chosen on train: docs/choices.md)
FILE = "option_weights.json"
LOCK_WAIT = 10.0  # seconds another specem keeping task weights is waited for


@dataclass(frozen=True)
class TaskWeights:
    """A task's weights by source, each source's prior over an option set (by ``Options.key``, or
    ``"#N"``: by position among N options, for tasks whose options change from item to item),
    and what they were fitted on."""

    task: str
    weights: dict[str, float]
    priors: dict[str, dict[str, list[float]]]
    items: int
    fitted_on: str

    def priors_for(self, options: opt.Options) -> dict[str, np.ndarray]:
        """Each source's prior over these options, where one was kept: for these options (in
        whatever order they come), else for as many by position."""
        kept = self.priors.get(options.key) or _reordered(self.priors, options.texts)
        kept = kept or self.priors.get(f"#{len(options.texts)}") or {}
        return {name: np.asarray(values, dtype=np.float64) for name, values in kept.items()}

    def to_json(self, key: str) -> dict[str, Any]:
        return {"key": key, "task": self.task, "weights": self.weights, "priors": self.priors,
                "items": self.items, "fitted_on": self.fitted_on}  # fmt: skip


def _reordered(priors: dict[str, dict[str, list[float]]], texts: tuple[str, ...]) -> dict[str, list[float]] | None:
    """The priors kept for the same options listed in another order, put in this one."""
    for key, kept in priors.items():
        listed = json.loads(key) if key.startswith("[") else None
        if isinstance(listed, list) and len(listed) == len(texts) and set(listed) == set(texts):
            order = [listed.index(text) for text in texts]
            return {name: [values[i] for i in order] for name, values in kept.items()}
    return None


def fit_task(
    task: str,
    scores: Sequence[Mapping[str, Sequence[float]]],
    options: Sequence[opt.Options],
    answers: Sequence[int],
    fitted_on: str,
    smoothing: float = SMOOTHING,
    priors: bool = True,
    labels: bool = False,
) -> TaskWeights:
    """A task's weights from labelled items: each source's prior over the options (its mean
    belief: by the options when every item has the same, else by position) and, with
    ``labels``, how often each option was right (add-one); then the weights that make the mix of
    the corrected beliefs likeliest to be right (``options.fitted_weights``). ``scores``: each
    item's summed log-probabilities of its options, by source."""
    keys = {o.key for o in options}
    seen: dict[str, dict[str, list[np.ndarray]]] = {}
    for item, offered, answer in zip(scores, options, answers):
        key = offered.key if len(keys) == 1 else f"#{len(offered.texts)}"
        found = seen.setdefault(key, {})
        for name, values in item.items():
            found.setdefault(name, []).append(opt.distribution(values))
        found.setdefault(opt.LABELS, []).append(np.eye(len(offered.texts))[answer])
    kept = {
        key: {name: (opt.mean_prior(b) if name != opt.LABELS else _add_one(b)).tolist() for name, b in found.items()
              if labels or name != opt.LABELS}
        for key, found in seen.items()
    }  # fmt: skip
    fitted = TaskWeights(task, {}, kept if priors else {}, len(answers), fitted_on)
    beliefs = [opt.believed(item, fitted.priors_for(offered)) for item, offered in zip(scores, options)]
    return dataclasses.replace(fitted, weights=opt.fitted_weights(beliefs, answers, smoothing))


def _add_one(hits: list[np.ndarray]) -> np.ndarray:
    """How often each option was right, each counted once more (none is ever impossible)."""
    counts = np.sum(hits, axis=0) + 1.0
    return counts / counts.sum()


def guessed_at_least(right: int, option_counts: Sequence[int]) -> float:
    """The probability that picking an option at random on each item (``option_counts``: how
    many it has) gets at least ``right`` of them right: how likely a fit's accuracy is by chance
    alone. A task the members cannot do (the demo trio on ARC-Challenge or MMLU) gives weights
    fitted to noise, which no one should mistake for knowledge (docs/choices.md)."""
    ways = np.array([1.0])  # ways[j]: the probability of j right among the items so far
    for count in option_counts:
        hit = 1.0 / count
        ways = np.concatenate([ways * (1 - hit), [0.0]]) + np.concatenate([[0.0], ways * hit])
    return float(min(ways[max(right, 0) :].sum(), 1.0))


def user_weights_path() -> Path:
    return data_dir() / FILE


def task_weights(members: list[Member], task: str) -> TaskWeights | None:
    """The weights for ``task`` of these members: the user's, else the shipped; the ``choices``
    task's when the task has none; None when there are none at all."""
    key = key_of(members)
    for wanted in dict.fromkeys((task, DEFAULT_TASK)):
        for kept in (_read(user_weights_path()), _shipped()):
            if (key, wanted) in kept:
                return kept[(key, wanted)]
    return None


def own_weights(members: list[Member], task: str) -> TaskWeights | None:
    """The weights kept for exactly ``task``: the user's, else the shipped, but not the shipped
    ``choices`` (fitted on other tasks' items: what a task of its own should replace at once)."""
    key = key_of(members)
    found = _read(user_weights_path()).get((key, task))
    return found if found is not None or task == DEFAULT_TASK else _shipped().get((key, task))


def keep_task_weights(members: list[Member], weights: TaskWeights) -> Path:
    """Keep a task's weights for these members in the user's data dir (replacing earlier ones),
    checked as they are when read, while no other specem changes the file (a lock beside it)."""
    path, key = user_weights_path(), key_of(members)
    try:
        _entry(weights.to_json(key))
    except ValueError as error:
        raise SpecemError(f"the task {weights.task!r}'s weights were not kept: {error}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecemError(f"cannot keep the task weights in {path.parent}: {error.strerror or error}") from None
    with file_lock(path.with_name(f".{FILE}.lock"), str(path), LOCK_WAIT):
        kept = _read(path)
        kept[(key, weights.task)] = weights
        text = json.dumps([w.to_json(key) for (key, _), w in kept.items()], indent=1)  # checked: no NaN
        replace_file(path, text + "\n")
    return path


def _read(path: Path) -> dict[tuple[str, str], TaskWeights]:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # none kept (a data dir under a file: said when one is kept)
        return {}
    except OSError as error:
        raise DamagedData(f"cannot read the task weights in {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise DamagedData(f"the task weights in {path} are damaged (not UTF-8); delete it to start afresh") from None
    return _parsed(text, str(path))


@functools.cache
def _shipped() -> dict[tuple[str, str], TaskWeights]:
    return _parsed(resources.files("specem_local.data").joinpath(FILE).read_text(encoding="utf-8"), FILE)


def _parsed(text: str, where: str) -> dict[tuple[str, str], TaskWeights]:
    try:
        entries = json.loads(text)
        return {(entry["key"], entry["task"]): _entry(entry) for entry in entries}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as error:
        said = " ".join(str(error).split())[:200]
        raise DamagedData(f"the task weights in {where} are damaged ({said}); delete it to start afresh") from None


def _entry(entry: dict[str, Any]) -> TaskWeights:
    """One kept task, checked: weights and priors are finite numbers, 0 or more, whose sums are
    finite (the mix divides by them), each prior has one for every option of its key and a sum
    above 0 (a wrong one would change answers, or give no number at all, not fail)."""
    weights = {str(name): _amount(value) for name, value in entry["weights"].items()}
    if not math.isfinite(sum(weights.values())):
        raise ValueError("the weights add up to more than a number can hold")
    priors = {}
    for key, kept in entry.get("priors", {}).items():
        count = _option_count(key)
        priors[str(key)] = {str(name): [_amount(v) for v in values] for name, values in kept.items()}
        if any(not isinstance(values, list) or len(values) != count for values in kept.values()):
            raise ValueError(f"a prior of {key} has not one number for each of its {count} options")
        if any(not 0 < sum(values) < math.inf for values in priors[str(key)].values()):
            raise ValueError(f"a prior of {key} adds up to 0 or to more than a number can hold")
    return TaskWeights(str(entry["task"]), weights, priors, int(entry["items"]), str(entry["fitted_on"]))


def _option_count(key: str) -> int:
    """How many options a prior's key names: a JSON list of their distinct texts, or ``#N``."""
    if not key.startswith("["):
        return int(key.removeprefix("#"))
    listed = json.loads(key)
    texts = listed if isinstance(listed, list) and all(isinstance(text, str) for text in listed) else None
    if texts is None or len(set(texts)) < len(texts):
        raise ValueError(f"a prior's key {key[:60]} is not a list of distinct option texts")
    return len(texts)


def _amount(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"{str(value)[:40]} is not a weight (a finite number, 0 or more)")
    return float(value)
