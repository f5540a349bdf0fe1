"""Round-robin against threaded drafting on this machine, alternated so that drift in the
machine's speed moves both: each repeat runs every mode once (in a rotating order) between
two timings of the members alone, and the ratio to the lockstep ideal uses their mean.

    python -m specem_research.drafting [--repeats 6] [--tokens 160] [--output drafting.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from specem_local.engine import Ensemble
from specem_local.models import load_config
from specem_research.bench import bench_prompts, lockstep_ideal, members_alone, rotated, speed_settings

MODES = {
    "round-robin": {"drafting": "round-robin", "model_exit": False},
    "threads": {"drafting": "threads", "model_exit": False},
    "round-robin, model exit": {"drafting": "round-robin", "model_exit": True},
    "threads, model exit": {"drafting": "threads", "model_exit": True},
}


def compare(ensemble, repeats: int, tokens: int) -> dict[str, Any]:
    prompt = bench_prompts()["story"]
    common = speed_settings(tokens)
    before = members_alone(ensemble, prompt, common)
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        order = rotated(list(MODES), repeat)
        speeds = {label: ensemble.generate(prompt, **common, **MODES[label]).tokens_per_second for label in order}
        after = members_alone(ensemble, prompt, common)
        ideal = lockstep_ideal({name: (before[name] + after[name]) / 2 for name in before})
        runs.append({"ideal": ideal, "tokens_per_second": speeds, "ratio": {k: v / ideal for k, v in speeds.items()}})
        ratios = ", ".join(f"{k} {v / ideal:.2f}x" for k, v in speeds.items())
        print(f"repeat {repeat + 1}: ideal {ideal:.1f} tok/s; {ratios}", flush=True)
        before = after
    medians = {label: statistics.median(run["ratio"][label] for run in runs) for label in MODES}
    return {
        "models": ensemble.model_names,
        "threads_per_model": ensemble.threads_per_model,
        "tokens": tokens,
        "runs": runs,
        "median_ratio": medians,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="models.toml (default: the usual lookup)")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--output", default="drafting.json")
    args = parser.parse_args()
    with Ensemble.from_config(load_config(args.config)) as ensemble:
        ensemble.weight_store = None  # every answer from the prior: the runs must not teach each other
        report = compare(ensemble, args.repeats, args.tokens)
    Path(args.output).write_text(json.dumps(report, indent=2))
    medians = ", ".join(f"{k} {v:.2f}x" for k, v in report["median_ratio"].items())
    print(f"median ratio to the lockstep ideal: {medians}")


if __name__ == "__main__":
    main()
