"""``specem calibrate TASKS.jsonl``: set an ensemble's starting weights from labelled items
(``--task NAME``: its weights among options for that kind of task; ``--confidence``: how sure
its answers are).

Each member answers every item alone (greedy, the eval's prompt); a member's loss on an item
is 1 when its answer is wrong. The weights are then Hedge over the items from the prior, at
the learning rate with the best worst-case regret for that many items and members
(``feedback.calibration``). Why members alone: a weight says how far to trust a member's
judgement of the others' drafts, and its own answers are the only part of an ensemble answer
a label speaks to without guessing who caused what; a vote-level credit (which segments made a
right answer right) is not identifiable from a final answer. The weights become the anchor
that weights carried over later decay back to.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specem_local.commands.terminal import (
    add_settings_flags,
    config_from_args,
    print_table,
    settings_overrides,
    whole_number,
)
from specem_local.errors import SpecemError
from specem_local.labelled import load_tasks

if TYPE_CHECKING:
    from specem_local.models.config import Config


def cmd_calibrate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from specem_local.engine import Ensemble, calibrate
    from specem_local.engine.task_weights import DEFAULT_TASK
    from specem_local.settings import with_overrides

    tasks = load_tasks(Path(args.tasks))[: args.limit]
    overrides: dict[str, Any] = {"greedy": True, **settings_overrides(args)}
    config = config_from_args(args)
    with_overrides(config.ensemble, **overrides)  # a bad setting (a task's name) is said before any model loads
    if args.confidence:
        return calibrate_confidence(args, config, tasks, overrides)
    if "task" in overrides:  # "" is the default task, choices
        return calibrate_task(args, config, tasks, {**overrides, "task": overrides["task"] or DEFAULT_TASK})
    with Ensemble.from_config(config) as ensemble:
        verifiers = [m for m in ensemble.members if m.spec.verifies]
        if len(ensemble.members) < 2:
            raise SpecemError("calibrate needs an ensemble of at least two models")
        judges_only = [m.name for m in verifiers if not m.spec.drafts]
        if judges_only:
            raise SpecemError(
                f"{judges_only[0]} only verifies, so it cannot answer alone; "
                "calibrate weighs members by their own answers"
            )
        if ensemble.weight_store is None:
            raise SpecemError("this ensemble keeps no weights, so there is nothing to calibrate")
        settings = with_overrides(ensemble.settings, **overrides)
        before = ensemble.starting_weights(**overrides)
        wrong = dict.fromkeys((m.name for m in verifiers), 0)
        for task in tqdm(tasks, desc="calibrate", unit="item", file=sys.stderr):
            for member in verifiers:  # a tool-call item offers its tools, as the eval does
                final = ensemble.generate(task.prompt, models=[member.name], **overrides, **task.options)
                wrong[member.name] += not task.grade(final.text, final.finish_reason)[1]
        calibrate(ensemble.weight_store, ensemble.members, settings, wrong, len(tasks))
        after = ensemble.starting_weights(**overrides)
    print(f"calibrated on {len(tasks)} items of {args.tasks}")
    print_table(
        ("MODEL", "RIGHT ALONE", "WEIGHT BEFORE", "WEIGHT NOW"),
        [
            (name, f"{len(tasks) - wrong[name]}/{len(tasks)}", f"{before[name]:.3f}", f"{after[name]:.3f}")
            for name in wrong
        ],
    )
    return 0


def calibrate_confidence(args: argparse.Namespace, config: Config, tasks: list[Any], overrides: dict[str, Any]) -> int:
    """``--confidence``: the ensemble answers every item as it would answer the user, each answer
    is graded, and the calibrator of its confidence is fitted on them and kept (for these
    members and the ``confidence_check`` setting); said with how well it ranked these items."""
    from tqdm import tqdm

    from specem_local.engine import Ensemble, fit_calibrator, keep_calibrator, user_calibrators

    user_calibrators()  # a damaged file is said before the answers, not after
    with Ensemble.from_config(config) as ensemble:
        evidence, right = [], []
        for task in tqdm(tasks, desc="calibrate confidence", unit="item", file=sys.stderr):
            final = ensemble.generate(task.prompt, **overrides, **task.options)
            evidence.append(final.evidence)
            right.append(task.grade(final.text, final.finish_reason)[1])
        check = overrides.get("confidence_check", ensemble.settings.confidence_check)
        try:
            calibrator = fit_calibrator(evidence, right, f"{len(tasks)} of your items ({Path(args.tasks).name})")
        except ValueError:
            raise SpecemError(
                f"the ensemble got {sum(right)} of {len(right)} items right: fitting needs right and wrong answers; "
                f"give more items, or {'easier' if not any(right) else 'harder'} ones"
            ) from None
        kept = keep_calibrator(ensemble.members, check, calibrator)
    print(f"confidence calibrated on {len(tasks)} items of {args.tasks} ({sum(right)} right), check {check!r}: {kept}")
    return 0


def calibrate_task(args: argparse.Namespace, config: Config, tasks: list[Any], overrides: dict[str, Any]) -> int:
    """``--task NAME``: every member scores every option of each item both ways (as an answer
    among options is made), and the task's weights and label priors are fitted on the labelled
    answers and kept (``task_weights.fit_task``); said with each source's and the mix's accuracy
    on these items."""
    from tqdm import tqdm

    from specem_local.engine import Ensemble, fit_task, guessed_at_least, keep_task_weights, options
    from specem_local.events import FinalEvent, RoundEvent

    name = overrides["task"]
    if any(not task.choices for task in tasks):
        raise SpecemError(f"--task {name}: weights among options are fitted on items with choices and a letter answer")
    found = [options.options_in({"enum": list(task.choices)}) for task in tasks]
    offered = [each for each in found if each is not None]
    if len(offered) < len(found):
        item = tasks[found.index(None)]
        raise SpecemError(
            f"--task {name}: item {item.id}'s choices are not options every member can score (2 to "
            f"{options.MAX_OPTIONS} distinct texts, none empty, none the start of another)"
        )
    with Ensemble.from_config(config) as ensemble:
        scores, answers = [], []
        scoring = {**overrides, "score_options": True}  # the fit reads every source's scores, whatever the config says
        for task in tqdm(tasks, desc=f"calibrate {name}", unit="item", file=sys.stderr):
            events = list(ensemble.stream(task.question, schema={"enum": list(task.choices)}, **scoring))
            chosen = next((e for e in events if isinstance(e, RoundEvent)), None)
            final = events[-1]
            if chosen is None or chosen.lost or not isinstance(final, FinalEvent) or final.finish_reason != "eos":
                why = "; ".join(
                    f"{member} was lost ({said})" for member, said in (chosen.lost if chosen else {}).items()
                )
                raise SpecemError(
                    f"--task {name}: item {task.id} was not scored by every member "
                    f"({why or 'the answer was stopped'}); nothing was kept: run it again"
                )
            scores.append(
                {source: [c.scores[source] for c in chosen.candidates] for source in chosen.candidates[0].scores}
            )
            answers.append("ABCDEFGHIJ".index(task.answer))
        fitted = fit_task(
            name,
            scores,
            offered,
            answers,
            f"{len(tasks)} labelled items of {Path(args.tasks).name}",
        )
        kept = keep_task_weights(ensemble.members, fitted)
    print(f"task {name!r}: weights fitted on {len(tasks)} items of {args.tasks}, kept in {kept}")
    rows = []
    for source, weight in sorted(fitted.weights.items(), key=lambda item: -item[1]):
        right = sum(int(max(range(len(s[source])), key=s[source].__getitem__)) == a for s, a in zip(scores, answers))
        rows.append((source, f"{right}/{len(tasks)}", f"{weight:.3f}"))
    print_table(("SOURCE (WAY:MODEL)", "RIGHT ALONE", "WEIGHT"), rows)
    mixed = 0
    for item, offered_here, answer in zip(scores, offered, answers):
        beliefs = options.believed(item, fitted.priors_for(offered_here))
        mixed += int(options.mixed(beliefs, fitted.weights).argmax()) == answer
    print(f"the mix with these weights: {mixed}/{len(tasks)} right on these items (the items it was fitted on)")
    counts = [len(each.texts) for each in offered]
    chance = guessed_at_least(mixed, counts)
    if chance >= 0.05:
        guessed = sum(1 / count for count in counts)
        print(
            f"specem: warning: guessing gets {guessed:.1f} of these {len(tasks)} right on average, and {mixed} or "
            f"more {chance:.0%} of the time: no member is shown to know this task, so these weights are fitted "
            "to chance (give more items, or other models)",
            file=sys.stderr,
        )
    return 0


def add_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "calibrate", parents=[common], help="set the ensemble's starting weights from labelled items"
    )
    parser.add_argument("tasks", help="JSON lines: question + numeric answer, or question + choices + letter")
    parser.add_argument(
        "--limit",
        type=whole_number(1, 10**9),
        default=20,
        help="use the first N items (default 20; with --task, about 10 sufficed on the tasks in docs/choices.md)",
    )
    parser.add_argument(
        "--confidence",
        action="store_true",
        help="fit how sure an answer is, from the ensemble's answers to the items (not the starting weights)",
    )
    add_settings_flags(parser)
    parser.set_defaults(handler=cmd_calibrate)
