"""Why several answers at once decode on one thread (issue 48), and the ceiling on their gain.

1. The rows ceiling: the best member decodes B single rows (B sequences of ``--context``
   tokens, one row each per step) in one batch; milliseconds a step and the tokens per second
   against one row.
2. The thread: 16 GSM8K dev answers, 4 at once in one process, with every shared batch decoded
   on the batcher's own thread (as shipped) and on whichever answer's thread comes last (as
   before): milliseconds of a 4-row batch (median), this process's voluntary context switches
   and its share of the cores. llama.cpp's CPU backend decodes on an OpenMP team that belongs
   to the calling thread.
3. What handing each batch to that thread costs (microseconds a call).

With ``--waits`` it measures instead how long a decode should wait for the other answers' rows
(``MAX_WAIT``): the 16 answers one at a time, then 4 at once under each wait given.

    python -m specem_research.decode_thread [--ensemble NAME] [--context 150] [--output FILE]
    python -m specem_research.decode_thread --waits 0.005,0.02,0.05,0.1 --output FILE
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specem_local import Ensemble
from specem_local.backend import BatchRow
from specem_local.commands import config_from_args
from specem_research.throughput import MAX_TOKENS, questions

STEPS = 20
REPEATS = 6


def rows_ceiling(model: Any, context: int, sizes: tuple[int, ...] = (1, 2, 4, 8)) -> dict[int, float]:
    """Median milliseconds of a step of B rows (the sizes alternate, so drift moves all)."""
    model.clear()
    for seq in range(max(sizes)):
        model.decode([BatchRow(100 + i % 50, i, seq, i == context - 1) for i in range(context)])
    steps: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(REPEATS):
        for size in sizes:
            times = []
            for step in range(STEPS):
                started = time.perf_counter()
                model.decode([BatchRow(200, context + step, seq, True) for seq in range(size)])
                times.append(time.perf_counter() - started)
            for seq in range(size):
                model.seq_remove(seq, context, -1)
            steps[size].append(statistics.median(times))
    return {size: round(statistics.median(times) * 1000, 1) for size, times in steps.items()}


def hand_over_us(count: int = 20000) -> float:
    """Microseconds to hand a call to a waiting thread and get its result back."""
    with ThreadPoolExecutor(1) as decoder:
        decoder.submit(int).result()
        started = time.perf_counter()
        for _ in range(count):
            decoder.submit(int).result()
        return round((time.perf_counter() - started) / count * 1e6, 1)


def answered(ensemble: Ensemble, asked: list[str], at_once: int) -> tuple[int, float]:
    """The answer tokens and seconds of ``asked``, ``at_once`` answers at a time."""
    started = time.perf_counter()
    with ThreadPoolExecutor(at_once) as pool:
        finals = list(pool.map(ensemble.generate, asked))
    return sum(final.tokens for final in finals), time.perf_counter() - started


def four_at_once(ensemble: Ensemble, asked: list[str], one_thread: bool) -> dict[str, Any]:
    """The answers 4 at once, each batch decoded on the decoding thread or (``one_thread``
    False) on the thread that hands it over."""
    batches: list[float] = []
    batcher = ensemble.runner.batcher

    def timed(rows: int, seconds: float) -> None:
        if rows == 4:
            batches.append(seconds)

    batcher.on_batch, batcher.one_thread = timed, one_thread
    try:
        before, cpu_before = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        tokens, seconds = answered(ensemble, asked, 4)
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        batcher.on_batch, batcher.one_thread = None, True
    return {
        "tokens_per_second": round(tokens / seconds, 1),
        "four_row_batch_ms": round(statistics.median(batches) * 1000, 1),
        "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
        "cores_used": round((time.process_time() - cpu_before) / seconds, 2),
    }


def wait_gains(ensemble: Ensemble, asked: list[str], waits: list[float]) -> dict[str, Any]:
    """4 at once against one at a time under each longest wait for the other answers' rows."""
    tokens, seconds = answered(ensemble, asked, 1)
    alone = tokens / seconds
    gains = {}
    for wait in waits:
        ensemble.runner.batcher.max_wait = wait
        tokens, seconds = answered(ensemble, asked, 4)
        gains[str(wait)] = round(tokens / seconds / alone, 2)
    return {"one_at_a_time_tokens_per_second": round(alone, 1), "gain_at_4_by_wait": gains}


def main() -> None:
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m specem_research.decode_thread", description=summary)
    parser.add_argument("--ensemble")
    parser.add_argument("--config")
    parser.add_argument("--context", type=int, default=150)
    parser.add_argument("--output", default="research/results/issue48-decode-thread-cpu.json")
    parser.add_argument("--waits", help="comma-separated seconds: measure the wait before a batch instead")
    args = parser.parse_args()
    asked = questions(16)
    with Ensemble.from_config(config_from_args(args), parallel=4, greedy=True, max_tokens=MAX_TOKENS) as ensemble:
        best = max(ensemble.runner.members, key=lambda member: member.model.n_params).model.shared.model
        answered(ensemble, asked[:4], 4)  # warm
        if args.waits:
            report = wait_gains(ensemble, asked, [float(wait) for wait in args.waits.split(",")])
        else:
            ways = (("one thread", True), ("answers' threads", False))
            runs = {f"{label} {index}": four_at_once(ensemble, asked, one_thread)
                    for index in (1, 2) for label, one_thread in ways}  # fmt: skip
            ceiling = rows_ceiling(best, args.context)
            gain = {size: round(size * ceiling[1] / ms, 2) for size, ms in ceiling.items()}
            report = {"context": args.context, "rows_ms": ceiling, "runs": runs, "hand_over_us": hand_over_us(),
                      "rows_gain": gain}  # fmt: skip
    Path(args.output).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
