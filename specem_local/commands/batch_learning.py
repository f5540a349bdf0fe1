"""A batch that learns (issue 56): a ``--batch`` line may carry its ``label``, the right option of
an answer among options. Once such a line is answered, its options' scores (each source's, from
the answer's round) and its label are kept, and the task's weights are fitted on every labelled
line so far, as ``specem calibrate --task`` fits them, and kept, so every answer that starts
after uses them: from the first labelled line on (chosen on train items among waiting for 1, 5,
10, 20 or 50 of them). A task whose own weights were fitted on more labelled items than the
batch has seen keeps them. OUT holds each labelled line's scores and options, so a rerun learns
again from the lines it skips, with IN's labels (docs/choices.md)."""

from __future__ import annotations

import json
import math
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specem_local.errors import SettingError
from specem_local.events import Event, FinalEvent, RoundEvent

if TYPE_CHECKING:
    from specem_local.engine import AnswerStream, Ask, Member
    from specem_local.engine.options import Options

EVERY_FIT = 50  # labelled lines up to which every one refits the task's weights


def label_index(ask: Ask, label: Any) -> int:
    """Which of the line's options ``label`` is; a line whose answer is not among a few options,
    or a label that is none of them, is a bad line."""
    offered = options_of(ask)
    if offered is None:
        raise SettingError(
            '"label" goes with an answer among a few options: give the line a "schema" whose "enum" (or "const"s) '
            "lists 2 to 20 values, none an object, a list or a number with a fraction, none whose text begins "
            'another\'s ("1" and "10")',
            "label",
        )
    text = json.dumps(label, ensure_ascii=False)
    if text not in offered.texts:
        raise SettingError(f'"label" {text[:80]} is not one of the options ({", ".join(offered.texts)[:200]})', "label")
    return offered.texts.index(text)


def options_of(ask: Ask) -> Options | None:
    from specem_local.engine.options import options_in

    return options_in(getattr(ask.output, "schema", None))


def _finite_scores(value: Any) -> dict[str, list[float]] | None:
    """A record's ``option_scores`` when each is a list of finite numbers (OUT is a file anyone
    may have edited), else None."""
    if not isinstance(value, dict):
        return None
    for values in value.values():
        if not isinstance(values, list) or not all(_finite(v) for v in values):
            return None
    return {str(name): [float(v) for v in values] for name, values in value.items()}


def _same(listed: Any, texts: tuple[str, ...], scores: dict[str, list[float]]) -> bool:
    """Whether a record's options are these, in some order, and each score list has one for each."""
    if (
        not isinstance(listed, list)
        or not all(isinstance(text, str) for text in listed)
        or sorted(listed) != sorted(texts)
    ):
        return False
    return all(len(values) == len(texts) for values in scores.values())


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Labelled:
    """One labelled line, answered: each source's summed log-probability of each option, the
    options, and which was right."""

    scores: dict[str, list[float]]
    options: Options
    answer: int


class BatchLearning:
    """The labelled lines of one batch, by task, and the weights fitted on them."""

    def __init__(self, members: list[Member], default_task: str, source: Path) -> None:
        self.members, self.default_task, self.source = members, default_task, source
        self.labelled: dict[str, list[Labelled]] = defaultdict(list)
        self.asked: dict[str, int] = defaultdict(int)  # task -> labelled lines answered in this run
        self.right: dict[str, int] = defaultdict(int)  # task -> of those, answered right
        self.kept: dict[str, tuple[Path, int]] = {}  # task -> where its weights were kept, fitted on how many
        self._fields: dict[int, dict[str, Any]] = {}  # an answer's index -> what its result gains
        self._lock = threading.Lock()  # answers run at once end in threads of their own
        self.failure: str | None = None  # why weights could not be kept, once
        self.unscored = 0  # labelled lines OUT holds whose scores teach nothing (``resumed``)

    def task_of(self, ask: Ask) -> str:
        from specem_local.engine.task_weights import DEFAULT_TASK

        return str(ask.settings.get("task", self.default_task)) or DEFAULT_TASK  # a line's, even empty, wins

    def watch(self, index: int, ask: Ask, label: int | None, stream: AnswerStream) -> None:
        """Learn from the labelled answer ``index`` as it ends, in its own thread, before that
        thread starts the next answer (so with ``parallel = 1`` every answer after it uses what
        it taught)."""
        from specem_local.engine.options import split_source

        if label is None:
            return
        scores: dict[str, list[float]] = {}

        def seen(event: Event) -> None:
            if isinstance(event, RoundEvent) and event.decision == "options" and not event.lost:
                found = {name: [c.scores[name] for c in event.candidates] for name in event.candidates[0].scores}
                if any(split_source(name)[1] == "scored" for name in found):  # both ways: not a choice point
                    scores.update(found)
            elif isinstance(event, FinalEvent):
                with self._lock:
                    self._fields[index] = self._learned(ask, label, scores or None, event)

        stream.watch(seen)

    def answered(self, index: int) -> dict[str, Any]:
        """The fields the result of the answer ``index`` gains (its label, whether it was right,
        the scores learnt from); none for a line without a label, or one that did not end."""
        with self._lock:
            return self._fields.pop(index, {})

    def _learned(
        self, ask: Ask, label: int, scores: dict[str, list[float]] | None, final: FinalEvent
    ) -> dict[str, Any]:
        """What a labelled answer that ended teaches (``_fit``) and adds to its result."""
        offered = options_of(ask)
        assert offered is not None, "a labelled line's answer is among options (label_index)"
        if final.finish_reason == "cancelled":  # not written to OUT: a rerun answers it
            return {}
        value = offered.values[label]
        right = final.finish_reason == "eos" and json.dumps(final.parsed) == json.dumps(value)
        fields: dict[str, Any] = {"label": value, "right": right}
        task = self.task_of(ask)
        self.asked[task] += 1
        self.right[task] += right
        if scores is None or final.finish_reason != "eos":  # drafted (score_options off, thinking): nothing to learn
            return fields
        fields["option_scores"], fields["options"] = scores, list(offered.texts)
        self.labelled[task].append(Labelled(scores, offered, label))
        self._fit(task)
        return fields

    def resumed(self, ask: Ask, label: int, record: dict[str, Any]) -> None:
        """A labelled line OUT already holds, learnt from again with IN's label (no fit yet:
        ``fit_all``): its scores put in the order of IN's options; none when they are not these
        members' scores of these options (the ensemble or the options changed since, or the line
        was answered before it had a label), counted in ``unscored``."""
        from specem_local.engine.options import WAYS, source

        if "label" in record and "option_scores" not in record:  # drafted: it taught nothing the first time
            return
        offered, scores = options_of(ask), _finite_scores(record.get("option_scores"))
        assert offered is not None, "a labelled line's answer is among options (label_index)"
        sources = {source(m.name, way) for m in self.members for way in WAYS}
        listed = record.get("options", list(offered.texts))  # records before stop 70 hold none: IN's order
        if not scores or not set(scores) <= sources or not _same(listed, offered.texts, scores):
            self.unscored += 1
            return
        order = [listed.index(text) for text in offered.texts]
        ordered = {name: [values[i] for i in order] for name, values in scores.items()}
        self.labelled[self.task_of(ask)].append(Labelled(ordered, offered, label))

    def fit_all(self) -> None:
        for task in list(self.labelled):
            self._fit(task)

    def _fit(self, task: str, last: bool = False) -> None:
        """Fit and keep the task's weights on its labelled lines, when they are at least as many
        as the weights kept for exactly this task were fitted on; only the lines scored by the
        same sources as the latest count. Past ``EVERY_FIT`` lines, a fit waits until they are a
        tenth more than at the last one (each fit reads them all), and the batch's end
        (``last``) fits on any it skipped."""
        from specem_local.engine.task_weights import fit_task, keep_task_weights, own_weights
        from specem_local.errors import SpecemError

        found = self.labelled[task]
        usable = [each for each in found if set(each.scores) == set(found[-1].scores)]
        fitted_on = self.kept[task][1] if task in self.kept else 0
        due = len(usable) <= EVERY_FIT or len(usable) >= fitted_on * 1.1 or (last and len(usable) > fitted_on)
        try:
            kept = own_weights(self.members, task)
            if not usable or len(usable) < (kept.items if kept is not None else 0) or not due:
                return
            fitted = fit_task(
                task,
                [each.scores for each in usable],
                [each.options for each in usable],
                [each.answer for each in usable],
                f"{len(usable)} labelled lines of {self.source.name} (a learning batch)",
            )
            self.kept[task] = (keep_task_weights(self.members, fitted), len(usable))
        except SpecemError as error:  # weights not read or kept (keep_task_weights says why): the answers go on
            self.failure = self.failure or str(error)

    def said(self) -> None:
        """What the batch learned, on stderr: per task, how many labelled answers were right,
        and where the weights fitted on them were kept (or why none were), after a last fit on
        any labelled lines the fits skipped."""
        from specem_local.engine.task_weights import DEFAULT_TASK

        with self._lock:
            for task in list(self.labelled):
                self._fit(task, last=True)
        for task in sorted(self.asked.keys() | self.kept.keys()):
            if task in self.kept:
                path, items = self.kept[task]
                learned = f"its weights fitted on {items} labelled answers, kept in {path}"
            else:
                learned = ("its weights were not fitted: that needs labelled answers scored among the options, "
                           "as many as the task's own weights were fitted on")  # fmt: skip
            print(f"specem: task {task!r}: {self.right[task]} of {self.asked[task]} labelled answers right; {learned}",
                  file=sys.stderr)  # fmt: skip
        if DEFAULT_TASK in self.kept:
            print(f"specem: note: the labelled lines named no task, so they taught {DEFAULT_TASK!r}, the weights of "
                  "every task without its own: name it (--task NAME, or \"task\" on the lines) to keep it apart",
                  file=sys.stderr)  # fmt: skip
        if self.unscored:
            print(f"specem: note: {self.unscored} labelled lines OUT already holds teach nothing: answered before "
                  "they had a label, by other members or among other options; take their results out of OUT to "
                  "answer them again", file=sys.stderr)  # fmt: skip
        if self.failure is not None:
            print(f"specem: warning: the batch's labels taught nothing that lasts: {self.failure}", file=sys.stderr)
