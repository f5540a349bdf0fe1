"""Answers chosen from options (issue 56), as plain functions over numbers and strings.

When an answer's format allows only a few values (a JSON Schema ``enum``, a union of
``const``s, a boolean), drafting rounds are not needed: every member scores every option, two
ways. *Asked*: the conversation in the member's chat template, the options listed by the
format's instruction, each option's JSON text as the answer. *Scored*: the conversation as
plain text ending in ``Answer:``, each option's words as the continuation (as lm-eval-harness
scores choices). Each (member, way), a *source*, gives a distribution over the options (the
softmax of each option's summed token log-probabilities), corrected for its label bias (divided
by its prior over the options: how it leans when the question says nothing); the weighted mix
picks the answer, and its probability is the answer's confidence.

The weights are kept per task (``task_weights.py``); ``fitted_weights`` learns them from
labelled items by maximum likelihood of the mix (EM), pulled towards uniform.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specem_local.engine.conditions import ANNOTATIONS
from specem_local.engine.prompting import Message
from specem_local.engine.schemas import resolve

WAYS = ("asked", "scored")
MAX_OPTIONS = 20  # beyond this an answer is not a choice among options but a vocabulary
MAX_REFS = 32  # local references followed to reach one schema (a loop of them gives up)
ASIDE = ANNOTATIONS | {"$schema", "$id"}  # keys that allow nothing less
FLOOR = 1e-9  # no probability is taken as exactly 0 (a log of it, a division by it)
PLAIN_CUE = "Answer:"  # what the scored way's plain-text prompt ends with
LABELS = "labels"  # among a task's priors: how often each option is right (a source's name has a colon)


@dataclass(frozen=True)
class Options:
    """The values an answer may take: ``texts`` as the format writes each (the answer's text),
    ``words`` as plain words (what the scored way reads after ``Answer:``)."""

    values: tuple[Any, ...]
    texts: tuple[str, ...]
    words: tuple[str, ...]

    @property
    def key(self) -> str:
        """The options as one text: a prior over them is kept under it."""
        return json.dumps(list(self.texts), ensure_ascii=False)


def options_in(schema: Any) -> Options | None:
    """The options a JSON Schema allows when it allows only a few values (2 to ``MAX_OPTIONS``):
    an ``enum``, ``anyOf`` / ``oneOf`` of ``const``s, ``const``s of one ``type``, a boolean.
    None for any other schema (it is written in rounds as before), and for options one of which
    begins another's text (``1`` and ``12``: an option's score holds no end, so the shorter
    would always be the likelier)."""
    bare = isinstance(schema, dict) and not set(schema) - {"$ref", "$defs", "definitions", *ASIDE}
    values = _values(followed(schema, schema) if bare else schema)  # a root that only refers: what it refers to
    if values is None:
        return None
    texts = tuple(json.dumps(value, ensure_ascii=False) for value in values)
    if not 2 <= len(set(texts)) == len(texts) <= MAX_OPTIONS:
        return None
    if any(a != b and b.startswith(a) for a in texts for b in texts):
        return None
    words = tuple(value if isinstance(value, str) else text for value, text in zip(values, texts))
    if any(not word.strip() for word in words) or len({word.strip() for word in words}) < len(words):
        return None  # options that read the same as plain words cannot be told apart that way
    return Options(tuple(values), texts, words)


def followed(root: Any, node: Any) -> Any:
    """``node`` with its local ``$ref`` (``#/...``) followed, as often as it takes (a root that is
    a reference: pydantic's schema of an ``Enum`` or a ``RootModel``, its ``$defs`` beside it)."""
    for _ in range(MAX_REFS):
        if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
            return node
        node = resolve(root, node["$ref"])  # a node that refers came from root: root is an object
    return None


def _values(schema: Any) -> list[Any] | None:
    if not isinstance(schema, dict):
        return None
    listed = set(schema) - {"type", *ASIDE}
    if schema.get("type") == "boolean" and not listed:
        return [True, False]
    if listed == {"enum"} and isinstance(schema["enum"], list):
        values = list(schema["enum"])
    elif len(listed) == 1 and listed <= {"anyOf", "oneOf"}:
        branches = schema[next(iter(listed))]
        if not isinstance(branches, list) or not all(isinstance(b, dict) and "const" in b for b in branches):
            return None
        if any(set(b) - {"const", "title", "description", "type"} for b in branches):
            return None
        if any("type" in b and not _of_type(b["const"], b["type"]) for b in branches):
            return None  # a branch no value satisfies: the format says what is allowed, not the const
        values = [b["const"] for b in branches]
    else:
        return None
    if any(isinstance(value, (dict, list, float)) for value in values):  # 1 and 1.0: not ours to tell apart
        return None
    kind = schema.get("type")
    if kind is not None and not all(_of_type(value, kind) for value in values):
        return None
    return values


def _of_type(value: Any, kind: Any) -> bool:
    kinds = {"string": str, "integer": int, "number": int, "boolean": bool, "null": type(None)}  # floats: never here
    wanted = [kinds.get(k) for k in (kind if isinstance(kind, list) else [kind])]
    return any(w is not None and isinstance(value, w) and (w is bool or not isinstance(value, bool)) for w in wanted)


def source(member: str, way: str) -> str:
    """A (member, way) pair's name: ``asked:NAME`` or ``scored:NAME``."""
    return f"{way}:{member}"


def split_source(name: str) -> tuple[str, str]:
    """(member, way) of a source's name."""
    way, _, member = name.partition(":")
    return member, way


def plain_text(messages: Sequence[Message]) -> str:
    """A conversation as plain text for the scored way: each message's text in order (tool
    results left out), then ``Answer:``."""
    said = [m.content.strip() for m in messages if m.role in ("system", "user", "assistant")]
    return "\n\n".join(text for text in said if text) + f"\n{PLAIN_CUE}"


def distribution(log_probabilities: Sequence[float]) -> np.ndarray:
    """The softmax of each option's summed token log-probability: the source's belief."""
    values = np.asarray(log_probabilities, dtype=np.float64)
    shifted = np.exp(values - values.max())
    return shifted / shifted.sum()


def corrected(belief: np.ndarray, prior: np.ndarray | None, labels: np.ndarray | None = None) -> np.ndarray:
    """A belief with its label bias taken out: divided by the source's prior over the options
    (how it leans whatever the question), times how often each option is right in the task
    (``labels``: none, as often each), then normalised. No prior: the belief as it is."""
    if prior is None:
        return belief
    ratio = belief / np.maximum(prior, FLOOR)
    if labels is not None:
        ratio = ratio * labels
    return ratio / ratio.sum()


def believed(scores: Mapping[str, Sequence[float]], priors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each source's corrected belief from its summed log-probabilities of the options, with the
    priors a task keeps for them (``LABELS``: how often each option is right)."""
    labels = priors.get(LABELS)
    return {name: corrected(distribution(values), priors.get(name), labels) for name, values in scores.items()}


def mean_prior(beliefs: Sequence[np.ndarray]) -> np.ndarray:
    """A source's prior estimated from its beliefs over many questions of one task: their mean
    (how often it leans to each option, whatever the question)."""
    return np.mean(np.stack(beliefs), axis=0)


def mixed(beliefs: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """The weighted mix of the sources' beliefs (a linear pool); sources without a weight, or
    weights that sum to nothing, count equally."""
    names = list(beliefs)
    given = np.array([max(float(weights.get(name, 0.0)), 0.0) for name in names])
    if given.sum() <= 0:
        given = np.ones(len(names))
    stacked = np.stack([beliefs[name] for name in names])
    return (given[:, None] * stacked).sum(axis=0) / given.sum()


def fitted_weights(
    beliefs: Sequence[Mapping[str, np.ndarray]], answers: Sequence[int], smoothing: float = 1.0, rounds: int = 500
) -> dict[str, float]:
    """The weights that make the mix likeliest to give the right answers of labelled items
    (EM for a linear pool: a concave problem, one optimum), each source credited ``smoothing``
    items besides, so a few items pull the weights from uniform only as far as they show."""
    names = list(beliefs[0])
    right = np.array(
        [[max(float(item[name][answer]), FLOOR) for name in names] for item, answer in zip(beliefs, answers)]
    )
    weights = np.full(len(names), 1.0 / len(names))
    for _ in range(rounds):
        share = right * weights
        share /= share.sum(axis=1, keepdims=True)
        updated = (share.sum(axis=0) + smoothing) / (len(answers) + smoothing * len(names))
        if np.abs(updated - weights).max() < 1e-10:
            weights = updated
            break
        weights = updated
    return {name: float(w) for name, w in zip(names, weights)}
