"""A batch that learns (issue 56): a ``--batch`` line may carry its ``label``, the right option of
an answer among options. Once such a line is answered, its options' scores (each source's, from
the answer's round) and its label are kept, and the task's weights are fitted on every labelled
line so far, as ``specem calibrate --task`` fits them, and kept, so every answer that starts
after uses them: from the first labelled line on (chosen on train items among waiting for 1, 5,
10, 20 or 50 of them). A task whose weights were fitted on more labelled items than the batch
has seen keeps them. OUT holds each labelled line's scores, so a rerun learns again from the
lines it skips (docs/choices.md)."""

from __future__ import annotations

import json
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


def label_index(ask: Ask, label: Any) -> int:
    """Which of the line's options ``label`` is; a line whose answer is not among a few options,
    or a label that is none of them, is a bad line."""
    offered = options_of(ask)
    if offered is None:
        raise SettingError(
            '"label" goes with an answer among a few options: give the line a "schema" that allows only '
            'those (an "enum")',
            "label",
        )
    text = json.dumps(label, ensure_ascii=False)
    if text not in offered.texts:
        raise SettingError(f'"label" {text[:80]} is not one of the options ({", ".join(offered.texts)[:200]})', "label")
    return offered.texts.index(text)


def options_of(ask: Ask) -> Options | None:
    from specem_local.engine.options import options_in

    return options_in(getattr(ask.output, "schema", None))


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

    def task_of(self, ask: Ask) -> str:
        from specem_local.engine.task_weights import DEFAULT_TASK

        return str(ask.settings.get("task") or self.default_task or DEFAULT_TASK)

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
        fields["option_scores"] = scores
        self.labelled[task].append(Labelled(scores, offered, label))
        self._fit(task)
        return fields

    def resumed(self, ask: Ask, record: dict[str, Any]) -> None:
        """A labelled line OUT already holds, learnt from again (no fit yet: ``fit_all``)."""
        offered, scores = options_of(ask), record.get("option_scores")
        if offered is None or not isinstance(scores, dict) or "label" not in record:
            return
        text = json.dumps(record["label"], ensure_ascii=False)
        valid = all(isinstance(v, list) and len(v) == len(offered.texts) for v in scores.values())
        if text in offered.texts and valid and scores:
            self.labelled[self.task_of(ask)].append(Labelled(scores, offered, offered.texts.index(text)))

    def fit_all(self) -> None:
        for task in list(self.labelled):
            self._fit(task)

    def _fit(self, task: str) -> None:
        """Fit and keep the task's weights on its labelled lines, when they are at least as many
        as the weights kept for the task were fitted on; only the lines scored by the same
        sources as the latest count."""
        from specem_local.engine.task_weights import fit_task, keep_task_weights, task_weights
        from specem_local.errors import SpecemError

        found = self.labelled[task]
        usable = [each for each in found if set(each.scores) == set(found[-1].scores)]
        try:
            kept = task_weights(self.members, task)
            own = kept.items if kept is not None and kept.task == task else 0
            if not usable or len(usable) < own:
                return
            fitted = fit_task(
                task,
                [each.scores for each in usable],
                [each.options for each in usable],
                [each.answer for each in usable],
                f"{len(usable)} labelled lines of {self.source.name} (a learning batch)",
            )
            self.kept[task] = (keep_task_weights(self.members, fitted), len(usable))
        except SpecemError as error:  # weights that cannot be read or kept: the answers go on, said at the end
            self.failure = self.failure or str(error)

    def said(self) -> None:
        """What the batch learned, on stderr: per task, how many labelled answers were right,
        and where the weights fitted on them were kept (or why none were)."""
        for task in sorted(self.asked.keys() | self.kept.keys()):
            if task in self.kept:
                path, items = self.kept[task]
                learned = f"its weights fitted on {items} labelled answers, kept in {path}"
            else:
                learned = ("its weights were not fitted: that needs labelled answers scored among the options, "
                           "as many as the task's own weights were fitted on")  # fmt: skip
            print(f"specem: task {task!r}: {self.right[task]} of {self.asked[task]} labelled answers right; {learned}",
                  file=sys.stderr)  # fmt: skip
        if self.failure is not None:
            print(f"specem: warning: the batch's labels taught nothing that lasts: {self.failure}", file=sys.stderr)
