"""How sure an answer is (issue 55): fit the confidence calibrator on development answers and
measure it on confirm answers nothing was chosen on.

Reads ``specem eval`` runs (their ``items.jsonl``: each system's answer, its ``correct``, its
``confidence`` and ``evidence``). ``fit`` fits the logistic calibrator (``engine/evidence.py``)
on one system's answers and writes it; ``report`` scores a system's answers on a confirm run:

- AUROC (how well the score ranks right answers above wrong ones) with a bootstrap 95% interval,
  AURC (the area under the risk-coverage curve: lower is better), accuracy on the most sure
  30 / 50 / 80% of answers, and ECE (expected calibration error, 10 equal-width bins) beside
  the ECE a perfectly calibrated confidence would show on as many answers;
- beside it, on the same answers, the free baselines a single model has: its mean token
  log-probability and its least token probability (the author's, here the best member's);
- and the paid checks, computed from other answers to the same items: the share of the
  witnesses (the other members, each alone, greedy: a system of the run, or ``RUN:SYSTEM``
  where that member's answers were recorded by another run) whose final answer equals the
  ensemble's, and the best member's k samples (``--samples RUN[:SYSTEM]...``, ``specem eval
  --sampled`` runs; a run of several systems names the member) agreeing.

    python -m specem_research.confidence fit RUN [RUN ...] --system ensemble --name NAME [--l2 L2] --output FILE
    python -m specem_research.confidence report RUN --system ensemble [--calibrator FILE]
        [--witness MEMBER|RUN:MEMBER ...] [--samples RUN[:SYSTEM] ...] --output FILE
    python -m specem_research.confidence escalation RUN --reserve RESERVE_RUN [--calibrator FILE]
        [--reserve-system NAME] [--escalated-system NAME] --output FILE
    python -m specem_research.confidence penalty RUN [RUN ...] --output FILE   # the fit's L2 penalty, cross-validated
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.engine import Calibrator, answer_agreement, fit_calibrator

CHECK = "witnesses"  # the paid feature's name in a calibrator fitted with it


def items_by_id(run: Path) -> dict[str, dict[str, Any]]:
    """A run's items by id, the last record of each (a resumed item is written again)."""
    by_id: dict[str, dict[str, Any]] = {}
    for line in (run / "items.jsonl").read_text("utf-8").splitlines():
        record = json.loads(line)
        by_id[record["id"]] = record
    return by_id


def items(run: Path) -> list[dict[str, Any]]:
    """A run's items in order (``items_by_id``)."""
    return list(items_by_id(run).values())


def auroc(scores: Sequence[float], right: Sequence[bool]) -> float:
    """The probability that a right answer scores above a wrong one (ties: half)."""
    pos = [s for s, r in zip(scores, right) if r]
    neg = [s for s, r in zip(scores, right) if not r]
    if not pos or not neg:
        return math.nan
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    values = np.concatenate([pos, neg])[order]
    i = 0
    while i < len(values):  # average ranks over ties
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def bootstrap_interval(scores: Sequence[float], right: Sequence[bool], draws: int = 2000) -> tuple[float, float]:
    """A 95% percentile interval of the AUROC over items resampled with replacement (seed 0)."""
    generator = random.Random(0)
    n, values = len(scores), []
    for _ in range(draws):
        picked = [generator.randrange(n) for _ in range(n)]
        value = auroc([scores[i] for i in picked], [right[i] for i in picked])
        if not math.isnan(value):
            values.append(value)
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def paired_auroc_difference(first: Sequence[float], second: Sequence[float], right: Sequence[bool],
                            draws: int = 2000) -> dict[str, Any]:  # fmt: skip
    """``first``'s AUROC minus ``second``'s on the same answers, with a 95% percentile interval
    over the answers resampled together (seed 0), and the share of draws in which ``first`` is
    not ahead (a one-sided bootstrap p): two signals' intervals may overlap while one leads on
    the same answers."""
    generator = random.Random(0)
    n, values = len(right), []
    for _ in range(draws):
        picked = [generator.randrange(n) for _ in range(n)]
        said = [right[i] for i in picked]
        value = auroc([first[i] for i in picked], said) - auroc([second[i] for i in picked], said)
        if not math.isnan(value):
            values.append(value)
    return {
        "difference": auroc(first, right) - auroc(second, right),
        "ci95": [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))],
        "not_ahead": float(np.mean([value <= 0 for value in values])),
    }


def risk_coverage(scores: Sequence[float], right: Sequence[bool]) -> tuple[float, dict[str, float]]:
    """AURC (mean error over the most sure k answers, k = 1..n) and the accuracy of the most
    sure 30, 50 and 80% of the answers."""
    order = np.argsort(-np.asarray(scores), kind="mergesort")
    correct = np.asarray(right, dtype=np.float64)[order]
    cumulative = np.cumsum(correct) / np.arange(1, len(correct) + 1)
    aurc = float(np.mean(1 - cumulative))
    selective = {f"{int(share * 100)}%": float(cumulative[max(round(share * len(correct)), 1) - 1])
                 for share in (0.3, 0.5, 0.8)}  # fmt: skip
    return aurc, selective


def ece(probabilities: Sequence[float], right: Sequence[bool], bins: int = 10) -> float:
    """Expected calibration error: the answers binned by probability (equal widths), the gap
    between each bin's mean probability and its accuracy, weighted by its size."""
    p, y = np.asarray(probabilities), np.asarray(right, dtype=np.float64)
    which = np.minimum((p * bins).astype(int), bins - 1)
    return float(sum(abs(p[which == b].mean() - y[which == b].mean()) * np.sum(which == b) / len(p)
                     for b in range(bins) if np.any(which == b)))  # fmt: skip


def ece_if_calibrated(probabilities: Sequence[float], right: Sequence[bool], draws: int = 2000) -> dict[str, float]:
    """What ECE a perfectly calibrated confidence would show on as many answers with the same
    probabilities (each answer right with its probability, seed 0: consistency resampling,
    Bröcker and Smith 2007): ECE is biased upwards on few answers, so a goal such as 0.05 is
    read against this. ``p``: the share of those draws at least as far off as the answers
    measured (a small p: the confidence is not calibrated, beyond what chance explains)."""
    p = np.asarray(probabilities, dtype=np.float64)
    generator = np.random.default_rng(0)
    observed = ece(probabilities, right)
    values = np.array([ece(p, generator.random(len(p)) < p) for _ in range(draws)])
    p_value = float(np.mean(values >= observed))
    return {"mean": float(values.mean()), "p95": float(np.percentile(values, 95)), "p": p_value}


def measures(scores: Sequence[float], right: Sequence[bool], probabilities: bool = False) -> dict[str, Any]:
    """Everything ``report`` says of one score over the same answers."""
    aurc, selective = risk_coverage(scores, right)
    low, high = bootstrap_interval(scores, right)
    out = {"auroc": auroc(scores, right), "auroc_ci95": [low, high], "aurc": aurc, "selective_accuracy": selective}
    if probabilities:
        out["ece"] = ece(scores, right)
        out["ece_if_calibrated"] = ece_if_calibrated(scores, right)
    return out


def answer_source(name: str, run_default: bool) -> tuple[str, dict[str, dict[str, Any]] | None]:
    """Where a check's answers are: ``RUN:SYSTEM``, that system's answers to the same items in
    another run, by id (recorded once, not run again); otherwise ``name`` is a system of the
    reported run (a witness: None), or a run of one system (a samples run; one that holds a
    variant too must name its system)."""
    folder, _, system = name.rpartition(":")
    if folder and Path(folder).is_dir():
        return system, items_by_id(Path(folder))
    if not run_default:
        return name, None
    recorded = items_by_id(Path(name))
    systems = {s for record in recorded.values() for s in record["systems"]}
    if len(systems) != 1:
        raise SystemExit(f"{name} holds {len(systems)} systems ({', '.join(sorted(systems))}): name one, RUN:SYSTEM")
    return systems.pop(), recorded


def with_checks(run_items: list[dict[str, Any]], system: str, witnesses: Sequence[str],
                samples: Sequence[str]) -> list[dict[str, Any]]:  # fmt: skip
    """Each item's answer by ``system`` with the paid checks' agreement in its evidence: the share
    of ``witnesses`` (other members alone) and of the best member's ``samples`` (its sampled
    runs) whose final answer is the system's (each named as ``answer_source`` reads it). With
    checks named, only the items every one of them answered (a share over the same answers)."""
    sources = [answer_source(w, False) for w in witnesses] + [answer_source(s, True) for s in samples]
    out = []
    for record in run_items:
        answer = record["systems"].get(system)
        if answer is None or answer.get("evidence") is None:
            continue
        holders = [record if run is None else run.get(record["id"], {}) for _, run in sources]
        others = [
            holder["systems"][name] for (name, _), holder in zip(sources, holders) if name in holder.get("systems", {})
        ]
        if len(others) < len(sources):
            continue
        evidence = dict(answer["evidence"])
        if others:
            evidence[CHECK] = sum(answer_agreement(answer["extracted"], o["extracted"]) for o in others) / len(others)
        out.append({**answer, "evidence": evidence, "id": record["id"]})
    if sources and run_items and not out:
        raise SystemExit(
            f"no answer was checked by every one of {', '.join([*witnesses, *samples])}: are they named right?"
        )
    return out


def fitting_answers(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The answers ``fit`` and ``penalty`` learn from: every run named, one after another."""
    return [a for run in args.run for a in with_checks(items(run), args.system, args.witness, args.samples)]


def cmd_fit(args: argparse.Namespace) -> None:
    answers = fitting_answers(args)
    evidence, right = [a["evidence"] for a in answers], [a["correct"] for a in answers]
    calibrator = fit_calibrator(evidence, right, args.name, l2=args.l2)
    args.output.write_text(json.dumps(calibrator.to_dict(), indent=1) + "\n")
    print(f"fitted on {len(answers)} answers ({sum(right)} right): {args.output}")


def cmd_report(args: argparse.Namespace) -> None:
    answers = with_checks(items(args.run), args.system, args.witness, args.samples)
    right = [bool(a["correct"]) for a in answers]
    calibrator = Calibrator.from_dict(json.loads(args.calibrator.read_text())) if args.calibrator else None
    evidence = [a["evidence"] for a in answers]
    report: dict[str, Any] = {"run": str(args.run), "system": args.system, "answers": len(answers), "right": sum(right),
                              "checks": {"witness": args.witness, "samples": args.samples}}  # fmt: skip
    said = [calibrator.probability(e) for e in evidence] if calibrator is not None else []
    if calibrator is not None:
        report["calibrated"] = measures(said, right, probabilities=True)
        report["calibrator"] = calibrator.to_dict()
    report["as_shipped"] = measures([a["confidence"] for a in answers], right, probabilities=True)
    for name in ("mean_logprob", "least_logprob", CHECK):
        values = [e.get(name, math.nan) for e in evidence]
        if all(math.isfinite(v) for v in values):
            report[name] = measures(values, right)
    if calibrator is not None:  # the goals' comparisons, on the same answers: a single model's, the check's alone
        for name in ("mean_logprob", CHECK):
            if name in report:
                against = [e[name] for e in evidence]
                report[f"calibrated_minus_{name}"] = paired_auroc_difference(said, against, right)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    for name in ("mean_logprob", CHECK):
        if f"calibrated_minus_{name}" in report:
            paired = report[f"calibrated_minus_{name}"]
            low, high = paired["ci95"]
            print(f"calibrated - {name} AUROC: {paired['difference']:+.3f} ({low:+.3f} to {high:+.3f}), "
                  f"not ahead in {paired['not_ahead']:.1%} of draws")  # fmt: skip
    for name in ("calibrated", "as_shipped", "mean_logprob", "least_logprob", CHECK):
        if name in report:
            entry = report[name]
            low, high = entry["auroc_ci95"]
            said = ""
            if "ece" in entry:
                floor = entry["ece_if_calibrated"]
                said = f", ECE {entry['ece']:.3f} (if calibrated: {floor['mean']:.3f}, p = {floor['p']:.3f})"
            print(f"{name:>14}: AUROC {entry['auroc']:.3f} ({low:.3f}-{high:.3f}), AURC {entry['aurc']:.3f}, "
                  f"selective {entry['selective_accuracy']}{said}")  # fmt: skip


def escalation_curve(
    answers: list[dict[str, Any]],
    probabilities: Sequence[float],
    reserve: dict[str, dict[str, Any]],
    thresholds: Sequence[float] = tuple(i / 20 for i in range(21)),
) -> list[dict[str, float]]:
    """Each threshold's accuracy and time: the ensemble's answer when its confidence reaches the
    threshold, else the reserve's (its time added: it answers after the ensemble), on the items
    both answered."""
    both = [(a, p, reserve[a["id"]]) for a, p in zip(answers, probabilities) if a["id"] in reserve]
    curve = []
    for threshold in thresholds:
        escalated = [p < threshold for _, p, _ in both]
        right = [r["correct"] if e else a["correct"] for (a, _, r), e in zip(both, escalated)]
        seconds = [a["seconds"] + (r["seconds"] if e else 0.0) for (a, _, r), e in zip(both, escalated)]
        curve.append({"threshold": threshold, "escalated": float(np.mean(escalated)), "accuracy": float(np.mean(right)),
                      "seconds": float(np.sum(seconds))})  # fmt: skip
    return curve


def cmd_escalation(args: argparse.Namespace) -> None:
    """The escalation curve: the ensemble's run (its confidences from ``--calibrator``, else as
    recorded) and the reserve member's run alone on the same items."""
    answers = with_checks(items(args.run), args.system, args.witness, args.samples)
    calibrator = Calibrator.from_dict(json.loads(args.calibrator.read_text())) if args.calibrator else None
    probabilities = [calibrator.probability(a["evidence"]) if calibrator else a["confidence"] for a in answers]
    reserve_items = items(args.reserve)
    system = args.reserve_system or next(iter(reserve_items[0]["systems"]))
    instead = args.escalated_system or system
    reserve = {r["id"]: r["systems"][system] for r in reserve_items if system in r["systems"]}
    escalated = {r["id"]: r["systems"][instead] for r in reserve_items if instead in r["systems"]}
    curve = escalation_curve(answers, probabilities, escalated)
    alone = [reserve[a["id"]] for a in answers if a["id"] in reserve and a["id"] in escalated]
    report = {"run": str(args.run), "reserve": str(args.reserve), "reserve_system": system, "escalated_system": instead,
              "items": len(alone),
              "reserve_alone": {"accuracy": float(np.mean([r["correct"] for r in alone])),
                                "seconds": float(np.sum([r["seconds"] for r in alone]))},
              "curve": curve}  # fmt: skip
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    base = report["reserve_alone"]
    print(f"reserve alone: {100 * base['accuracy']:.1f}% in {base['seconds']:.0f} s ({len(alone)} items)")
    for point in curve:
        ratio = point["seconds"] / base["seconds"]
        print(f"below {point['threshold']:.2f}: {100 * point['escalated']:5.1f}% escalated, "
              f"{100 * point['accuracy']:.1f}% right, {ratio:.2f}x the reserve's time")  # fmt: skip


PENALTIES = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def cross_validated_log_loss(evidence: Sequence[dict[str, float]], right: Sequence[bool], l2: float,
                             folds: int = 10) -> float:  # fmt: skip
    """The mean log-loss of the calibrator fitted with penalty ``l2``, each answer predicted by
    the fit on the other folds (answer i in fold i mod ``folds``)."""
    losses = []
    for fold in range(folds):
        kept = [i for i in range(len(right)) if i % folds != fold]
        fitted = fit_calibrator([evidence[i] for i in kept], [right[i] for i in kept], "a fold", l2=l2)
        for i in range(fold, len(right), folds):
            p = min(max(fitted.probability(evidence[i]), 1e-6), 1 - 1e-6)
            losses.append(-math.log(p if right[i] else 1 - p))
    return float(np.mean(losses))


def cmd_penalty(args: argparse.Namespace) -> None:
    """The fit's L2 penalty checked on the fitting answers alone: ten-fold cross-validated
    log-loss for each penalty."""
    answers = fitting_answers(args)
    evidence, right = [a["evidence"] for a in answers], [bool(a["correct"]) for a in answers]
    losses = {str(l2): cross_validated_log_loss(evidence, right, l2) for l2 in PENALTIES}
    best = min(PENALTIES, key=lambda l2: losses[str(l2)])
    runs = [str(run) for run in args.run]
    report = {"run": runs[0] if len(runs) == 1 else runs, "answers": len(right), "log_loss": losses, "best": best}
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(", ".join(f"l2 {l2}: {loss:.4f}" for l2, loss in losses.items()) + f"; least: {best}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m specem_research.confidence", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    handlers = (("fit", cmd_fit), ("report", cmd_report), ("escalation", cmd_escalation), ("penalty", cmd_penalty))
    for action, handler in handlers:
        sub = actions.add_parser(action)
        several = action in ("fit", "penalty")
        what = "specem eval output folders, their answers pooled" if several else "a specem eval output folder"
        sub.add_argument("run", type=Path, nargs="+" if several else None, help=what)
        sub.add_argument("--system", default="ensemble")
        sub.add_argument(
            "--witness",
            action="append",
            default=[],
            help="another system of the run, or RUN:SYSTEM of another run on the same items",
        )
        sub.add_argument(
            "--samples", action="append", default=[], help="a sampled run of the best member (RUN[:SYSTEM])"
        )
        sub.add_argument("--output", type=Path, required=True)
        if action == "fit":
            sub.add_argument("--name", required=True, help="what it was fitted on, in words")
            sub.add_argument("--l2", type=float, default=1.0, help="the L2 penalty on standardised features")
        if action in ("report", "escalation"):
            sub.add_argument("--calibrator", type=Path, help="a fitted calibrator (fit's output)")
        if action == "escalation":
            sub.add_argument("--reserve", type=Path, required=True, help="the reserve member's run alone, same items")
            sub.add_argument("--reserve-system", help="the reserve's system in that run (default: its first)")
            sub.add_argument(
                "--escalated-system",
                help="the system of the reserve's run that answers the unsure items (default: the reserve's; "
                "prediction_cost.py's runs: the reserve reading the ensemble's answer ahead)",
            )
        sub.set_defaults(handler=handler)
    args = parser.parse_args()
    args.handler(args)


if __name__ == "__main__":
    main()
