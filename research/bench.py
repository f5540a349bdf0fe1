"""``specem bench``: speed and memory of the configured ensemble, measured in one process.

1. verification strategies on identical candidates (in-line batch / one at a time on the
   cached prefix / re-evaluating prefix + candidate) at several context lengths, with a check
   that they give equal scores;
2. per-round time against answer length;
3. ensemble tokens/s against each member alone and the lockstep ideal, with and without model
   exit, round-robin and threads;
4. time to first segment for a ~60-token prompt;
5. peak RSS against the sum of the GGUF file sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specem_local.backend import BatchRow, peak_rss_bytes, segment_score
from specem_local.commands import print_table
from specem_local.engine import Member
from specem_local.events import RoundEvent
from specem_local.models import load_config
from specem_local.storage import WeightStore

CANDIDATES = (
    " The answer depends on how light scatters in the air.",
    " Blue light has a shorter wavelength, so it scatters more.",
    " Sunlight contains every colour of the rainbow at once.",
    " At sunset the light travels through much more air.",
)


@dataclass(frozen=True)
class BenchPlan:
    context_lengths: tuple[int, ...]
    repeats: int
    round_length_tokens: int
    speed_tokens: int


FULL = BenchPlan(context_lengths=(50, 300, 1000), repeats=5, round_length_tokens=420, speed_tokens=160)
QUICK = BenchPlan(context_lengths=(50, 300), repeats=2, round_length_tokens=60, speed_tokens=30)
# The tests' plan: every table and field of a report, in seconds; its figures measure nothing.
TINY = BenchPlan(context_lengths=(50,), repeats=1, round_length_tokens=20, speed_tokens=10)
PLANS = {"full": FULL, "quick": QUICK, "tiny": TINY}


def bench_prompts() -> dict[str, str]:
    text = resources.files("specem_research").joinpath("data", "bench_prompts.jsonl").read_text("utf-8")
    return {row["id"]: row["prompt"] for row in map(json.loads, filter(str.strip, text.splitlines()))}


def _prefix_tokens(member: Member, length: int, filler: str) -> list[int]:
    """A prompt of about ``length`` tokens in this model's tokenization."""
    model = member.model
    tokens: list[int] = []
    while len(tokens) < length:
        tokens += model.tokenize(filler)
    tokens = tokens[:length]
    return [model.bos_token, *tokens[1:]] if model.adds_bos else tokens


def _median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def verification_strategies(member: Member, plan: BenchPlan, filler: str) -> list[dict[str, Any]]:
    """Time the three ways of scoring the same candidates on the same prefix."""
    results = []
    for length in plan.context_lengths:
        if length + 80 <= member.model.n_ctx:
            results.append(_strategies_at(member, _prefix_tokens(member, length, filler), plan))
    return results


def _strategies_at(member: Member, prefix: list[int], plan: BenchPlan) -> dict[str, Any]:
    model = member.model
    candidates = dict(enumerate(CANDIDATES))
    member.reset()
    member.start(prefix)

    def inline() -> dict[int, float]:
        scores = member.score(candidates, "logprob").scores
        model.seq_keep(0)
        return scores

    def one_at_a_time() -> dict[int, float]:
        scores = {}
        for index, text in candidates.items():
            scores[index] = member.score({index: text}, "logprob").scores[index]
            model.seq_keep(0)
        return scores

    def from_scratch() -> dict[int, float]:
        scores = {}
        for index, text in candidates.items():
            tokens = model.tokenize(text)
            model.clear()
            everything = prefix + tokens
            rows = model.decode([BatchRow(t, i, 0, i >= len(prefix) - 1) for i, t in enumerate(everything)])
            scores[index] = segment_score(rows[:-1], tokens, "logprob")
        member.reset()
        member.start(prefix)
        return scores

    reference = inline()
    others = (one_at_a_time(), from_scratch())
    return {
        "model": member.name,
        "context_tokens": len(prefix),
        "candidate_tokens": sum(len(model.tokenize(c)) for c in CANDIDATES),
        "inline_ms": 1000 * _median_seconds(inline, plan.repeats),
        "one_at_a_time_ms": 1000 * _median_seconds(one_at_a_time, plan.repeats),
        "from_scratch_ms": 1000 * _median_seconds(from_scratch, plan.repeats),
        "max_score_difference": max(abs(reference[i] - other[i]) for other in others for i in reference),
    }


def round_time_by_length(ensemble, prompt: str, plan: BenchPlan) -> dict[str, Any]:
    """Mean round time for rounds whose answer so far is near 50, 200 and 400 tokens. The
    answer goes on past end-of-generation tokens so every length is reached."""
    stream = ensemble.stream(prompt, max_tokens=plan.round_length_tokens, temperature=0.8, seed=1, ignore_eos=True)
    events = [e for e in stream if isinstance(e, RoundEvent)]
    marks = [m for m in (50, 200, 400) if m <= plan.round_length_tokens] or [plan.round_length_tokens]
    by_mark = {}
    for mark in marks:
        near = [e.seconds for e in events if abs(e.answer_tokens - mark) <= 30]
        by_mark[str(mark)] = statistics.mean(near) if near else None
    first = by_mark.get(str(marks[0]))
    last = by_mark.get(str(marks[-1]))
    return {
        "rounds": len(events),
        "answer_tokens": events[-1].answer_tokens if events else 0,
        "round_seconds_near_tokens": by_mark,
        "ratio_last_to_first": (last / first) if first and last else None,
    }


def speed_settings(tokens: int) -> dict[str, Any]:
    """Every speed run: the same length (end-of-generation tokens resampled), sampling and seed."""
    return dict(max_tokens=tokens, temperature=0.8, seed=3, ignore_eos=True)


def members_alone(ensemble, prompt: str, common: dict[str, Any]) -> dict[str, float]:
    """Each member's tokens/s answering alone."""
    return {name: ensemble.generate(prompt, models=[name], **common).tokens_per_second for name in ensemble.model_names}


def rotated(labels: list[str], repeat: int) -> list[str]:
    """``labels`` starting at ``repeat``: each repeat of an A/B runs first a different one."""
    shift = repeat % len(labels)
    return labels[shift:] + labels[:shift]


def lockstep_ideal(members: dict[str, float]) -> float:
    """Tokens/s if every member generated every token and nothing else cost: 1 / Σ 1/speed."""
    return 1 / sum(1 / speed for speed in members.values() if speed > 0)


def speeds(ensemble, prompt: str, plan: BenchPlan) -> dict[str, Any]:
    """Ensemble tokens/s against each member alone and the lockstep ideal, every run the same
    number of tokens long (end-of-generation tokens are resampled). The members are timed
    before and after the ensemble runs and the ideal uses their mean, so a machine whose speed
    drifts during the bench (a shared virtual machine) moves the ratio less; both are kept."""
    common = speed_settings(plan.speed_tokens)
    before = members_alone(ensemble, prompt, common)
    runs = {}
    for label, overrides in (
        ("round-robin", {"drafting": "round-robin", "model_exit": False}),
        ("threads", {"drafting": "threads", "model_exit": False}),
        ("round-robin, model exit", {"drafting": "round-robin", "model_exit": True}),
        ("threads, model exit", {"drafting": "threads", "model_exit": True}),
    ):
        final = ensemble.generate(prompt, **common, **overrides)
        runs[label] = {
            "tokens_per_second": final.tokens_per_second,
            "tokens": final.tokens,
            "drafters_per_round": final.drafters_per_round,
        }
    after = members_alone(ensemble, prompt, common)
    members = {name: (before[name] + after[name]) / 2 for name in before}
    ideal = lockstep_ideal(members)
    for run in runs.values():
        run["ratio_to_ideal"] = run["tokens_per_second"] / ideal
    return {
        "members_tokens_per_second": members,
        "members_tokens_per_second_before": before,
        "members_tokens_per_second_after": after,
        "lockstep_ideal_tokens_per_second": ideal,
        "ensemble": runs,
    }


def first_segment(ensemble, prompt: str) -> dict[str, Any]:
    """Time to the first segment, median of three: from the ensemble's current starting weights
    (the prior, in the bench), and ``shipped``: as a user's first answer starts, from the
    calibration shipped for a built-in ensemble (a fresh, empty weight store; the prior again
    where none is shipped), when members ruled out neither draft nor read the prompt."""
    kept = ensemble.weight_store
    with tempfile.TemporaryDirectory() as folder:
        ensemble.weight_store = WeightStore(Path(folder) / "weights.sqlite")
        try:
            shipped = _first_segment_times(ensemble, prompt)
        finally:
            ensemble.weight_store = kept
    result = _first_segment_times(ensemble, prompt)
    result["shipped"] = shipped
    return result


def _first_segment_times(ensemble, prompt: str) -> dict[str, Any]:
    tokens = len(ensemble.members[0].model.tokenize(prompt))
    times = []
    for seed in (1, 2, 3):
        stream = ensemble.stream(prompt, max_tokens=40, temperature=0.8, seed=seed)
        started = time.perf_counter()
        next(event for event in stream if isinstance(event, RoundEvent))
        times.append(time.perf_counter() - started)
        stream.cancel()
        stream.final()
    return {"prompt_tokens": tokens, "seconds": statistics.median(times), "all_seconds": times}


def run_bench(config_path: str | None, plan_name: str) -> dict[str, Any]:
    from specem_local.backend import devices
    from specem_local.commands import build_description
    from specem_local.engine import Ensemble

    plan = PLANS[plan_name]
    gpu_free_before = {d.name: d.free_bytes for d in devices() if d.kind != "CPU"}
    prompts = bench_prompts()
    config = load_config(config_path)
    started = time.perf_counter()
    # One sequence per candidate: table 1 scores four at once.
    with Ensemble.from_config(config, n_seq_max=len(CANDIDATES) + 1) as ensemble:
        ensemble.weight_store = None  # every run from the prior: the runs must not teach each other
        gguf_bytes = sum(path.stat().st_size for path in ensemble.model_files.values())
        filler = prompts["summary"]
        verification = [row for member in ensemble.members for row in verification_strategies(member, plan, filler)]
        gpu_used = {d.name: gpu_free_before[d.name] - d.free_bytes for d in devices() if d.name in gpu_free_before}
        report = {
            "quick": plan_name != "full",
            "plan": plan_name,
            "llama_cpp": build_description()["summary"],
            "runs_on": {m.name: m.model.placement for m in ensemble.members},
            "gpu_memory_used_bytes": gpu_used,  # GPU memory taken by loading the models, per device
            "models": ensemble.model_names,
            "threads_per_model": ensemble.threads_per_model,
            "segment_tokens": ensemble.settings.segment_tokens,
            "verification": verification,
            "round_time": round_time_by_length(ensemble, prompts["story"], plan),
            "speed": speeds(ensemble, prompts["story"], plan),  # a prompt that gives long answers
            "first_segment": first_segment(ensemble, prompts["first-segment"]),
        }
        report["memory"] = {
            "peak_rss_bytes": peak_rss_bytes(),
            "gguf_total_bytes": gguf_bytes,
            "overhead_bytes": peak_rss_bytes() - gguf_bytes,
        }
    report["seconds"] = time.perf_counter() - started
    return report


def print_summary(report: dict[str, Any]) -> None:
    if "llama_cpp" in report:  # reports written before these were recorded lack them
        print(f"llama.cpp: {report['llama_cpp']}")
        print("runs on: " + ", ".join(f"{name} {where}" for name, where in report["runs_on"].items()))
        for device, used in report["gpu_memory_used_bytes"].items():
            print(f"{device}: {used / 2**30:.2f} GiB of GPU memory taken by the models")
    print("\n1. Verification (ms, median; 4 candidates)")
    print_table(
        ("MODEL", "CTX", "IN-LINE", "ONE-AT-A-TIME", "FROM SCRATCH", "SCRATCH/IN-LINE", "MAX |Δscore|"),
        [
            (
                r["model"],
                r["context_tokens"],
                f"{r['inline_ms']:.0f}",
                f"{r['one_at_a_time_ms']:.0f}",
                f"{r['from_scratch_ms']:.0f}",
                f"{r['from_scratch_ms'] / r['inline_ms']:.1f}x",
                f"{r['max_score_difference']:.3f}",
            )
            for r in report["verification"]
        ],
    )
    rounds = report["round_time"]
    near = ", ".join(f"~{k} tok: {v:.2f}s" for k, v in rounds["round_seconds_near_tokens"].items() if v)
    ratio = rounds["ratio_last_to_first"]
    print(f"\n2. Per-round time by answer length: {near}" + (f" (ratio {ratio:.2f})" if ratio else ""))
    speed = report["speed"]
    before, after = speed.get("members_tokens_per_second_before"), speed.get("members_tokens_per_second_after")
    print(
        "\n3. Tokens/s: "
        + ", ".join(
            f"{n} {v:.1f}" + (f" ({before[n]:.1f} before, {after[n]:.1f} after)" if before and after else "")
            for n, v in speed["members_tokens_per_second"].items()
        )
        + f"; lockstep ideal {speed['lockstep_ideal_tokens_per_second']:.1f}"
    )
    print_table(
        ("ENSEMBLE RUN", "TOKENS", "TOK/S", "x IDEAL", "DRAFTERS/ROUND"),
        [
            (
                k,
                v["tokens"],
                f"{v['tokens_per_second']:.1f}",
                f"{v['ratio_to_ideal']:.2f}",
                f"{v['drafters_per_round']:.2f}",
            )
            for k, v in speed["ensemble"].items()
        ],
    )
    first = report["first_segment"]
    shipped = first.get("shipped", {}).get("seconds")
    as_shipped = f" (as shipped: {shipped:.2f}s)" if shipped is not None else ""
    said = f"{first['seconds']:.2f}s from the prior{as_shipped}"
    print(f"\n4. First segment for a {first['prompt_tokens']}-token prompt: {said}")
    memory = report["memory"]
    print(
        f"\n5. Peak RSS {memory['peak_rss_bytes'] / 2**30:.2f} GiB vs GGUF total "
        f"{memory['gguf_total_bytes'] / 2**30:.2f} GiB (+{memory['overhead_bytes'] / 2**30:.2f} GiB)"
    )


def cmd_bench(args: argparse.Namespace) -> int:
    report = run_bench(args.config, "quick" if args.quick else args.plan)
    Path(args.output).write_text(json.dumps(report, indent=2))
    print_summary(report)
    print(f"\nJSON: {args.output} ({report['seconds']:.0f}s)")
    return 0


def add_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("bench", parents=[common], help="speed and memory benchmarks")
    parser.add_argument("--quick", action="store_true", help="a reduced run (under two minutes): --plan quick")
    parser.add_argument(
        "--plan", choices=tuple(PLANS), default="full", help="full, quick, or tiny (every field in seconds; the tests')"
    )
    parser.add_argument("--output", default="bench.json", help="where to write the JSON summary")
    parser.set_defaults(handler=cmd_bench)
