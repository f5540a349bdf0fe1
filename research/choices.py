"""How far the user's choices move the weights (issue 27), simulated on answers already in a
``specem eval`` run, without loading a model:

    python -m specem_research.choices research/results/eval-gsm8k-dev120 --skip 20

A careful user compares the members' answers to each item (the chat app's compare) and marks
a right one as the best when some member is right and some is wrong (the first right one in
the order the members are listed; nothing when all or none are right). Each mark is one
``choices.best_rewards`` step from the size prior. The target is what ``specem calibrate``
learned from 20 labelled items (the built-in calibration of the same members). A second run
starts from that calibration and marks a weak member best every time: its weight must move,
however small it is (not drowned by the strong member's).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np

from specem_local.engine import best_rewards, built_in_calibrations, choice_change, feedback, names_in
from specem_research.evaluate import member_systems, read_records


def weights_of(log_weights: dict[str, float]) -> dict[str, float]:
    names = list(log_weights)
    values = feedback.from_log_weights(np.array([log_weights[n] for n in names]), np.ones(len(names), dtype=bool))
    return {name: float(value) for name, value in zip(names, values)}


def apply(log_weights: dict[str, float], rewards: dict[str, float], rate: float) -> dict[str, float]:
    step = choice_change(rewards, rate)
    return {name: value + step.get(name, 0.0) for name, value in log_weights.items()}


def careful_choices(records: list[dict], members: list[str]) -> list[dict[str, float]]:
    """The rewards of each mark a careful user makes, item by item."""
    marks = []
    for record in records:
        right = [m for m in members if record["systems"][m]["correct"]]
        if right and len(right) < len(members):
            marks.append(best_rewards(right[0], members, {}))
    return marks


def size_prior(key: str) -> dict[str, float]:
    """Centred log size prior of a stored ensemble key (its identities carry the parameter counts)."""
    sizes = {
        name: int(re.search(r"\(([\d,]+) parameters", identity).group(1).replace(",", ""))
        for name, identity in zip(names_in(key), key.split(" + "))
    }
    logs = {name: math.log(size) for name, size in sizes.items()}
    mean = sum(logs.values()) / len(logs)
    return {name: value - mean for name, value in logs.items()}


def simulate(records: list[dict], members: list[str], key: str, rate: float) -> dict:
    calibrated = built_in_calibrations()[key]
    target = weights_of({name: calibrated.anchor[identity] for name, identity in zip(names_in(key), key.split(" + "))})
    strong = max(target, key=target.get)
    log_weights = size_prior(key)
    path = [weights_of(log_weights)]
    for rewards in careful_choices(records, members):
        log_weights = apply(log_weights, rewards, rate)
        path.append(weights_of(log_weights))
    reached = next((n for n, w in enumerate(path) if w[strong] >= target[strong]), None)
    weak = min(target, key=target.get)
    against = {name: calibrated.anchor[identity] for name, identity in zip(names_in(key), key.split(" + "))}
    weak_path = [weights_of(against)[weak]]
    for _ in range(10):
        against = apply(against, best_rewards(weak, [weak, strong], {}), rate)
        weak_path.append(weights_of(against)[weak])
    return {
        "rate": rate,
        "choices": len(path) - 1,
        "strong": strong,
        "calibrated_weight": target[strong],
        "prior_weight": path[0][strong],
        "choices_to_calibrated": reached,
        "after": {n: round(path[n][strong], 3) for n in (5, 10, 20) if n < len(path)},
        "weak": weak,
        "weak_after_choices_against_strong": [round(w, 4) for w in weak_path[:1] + weak_path[1:4] + weak_path[10:]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a specem eval --output folder with every member alone")
    parser.add_argument("--skip", type=int, default=20, help="leave out the first N items (the calibration's)")
    args = parser.parse_args()
    records = list(read_records(args.run / "items.jsonl").values())[args.skip :]
    members = member_systems(records)
    records = [r for r in records if all(m in r["systems"] for m in members)]
    key = next(k for k in built_in_calibrations() if sorted(names_in(k)) == sorted(members))
    for rate in (0.1, 0.25, 0.5):
        print(simulate(records, members, key, rate))


if __name__ == "__main__":
    main()
