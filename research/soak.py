"""Soak: many short answers in one process through the Python API, as an automation script
would run them, each recorded in the history as a front end records it. Random cancels,
random settings per answer, and the models reloaded from the config every ``--reload``
answers. Checks: no crash, every answer in the history as it ended (text, state, rounds),
database integrity, and memory: the RSS now at the end of each block of answers (between
reloads) against the first block's, and the peak. Run it in a process of its own (the test does):
a peak that an earlier load set in the same process hides any growth.

    python -m specem_research.soak [--answers 500] [--max-tokens 12] [--output soak.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from specem_local import Ensemble
from specem_local.backend import peak_rss_bytes, rss_bytes
from specem_local.events import FinalEvent, RoundEvent
from specem_local.models import load_config
from specem_local.storage import History, Turn

QUESTIONS = (
    "What is six times seven?",
    "Name a colour of the sky.",
    "Write one line about the sea.",
    "What is the capital of France?",
    "Give me a word that rhymes with cat.",
)


def one_answer(ensemble: Ensemble, history: History, rng: random.Random, max_tokens: int) -> dict[str, Any]:
    question = rng.choice(QUESTIONS)
    settings = {
        "max_tokens": max_tokens,
        "temperature": rng.choice([0.0, 0.7, 1.0]),
        "segment_tokens": rng.choice([4, 6, 10]),
        "seed": rng.randrange(1000),
    }
    record = history.start_new_chat("api", [Turn("user", question)])
    stream = ensemble.stream(question, **settings)
    cancel_after = rng.choice([None, None, None, 1, 2])  # a quarter of the answers are cancelled
    rounds = 0
    for event in stream:
        record.event(event)
        if isinstance(event, RoundEvent):
            rounds += 1
            if cancel_after is not None and rounds >= cancel_after:
                stream.cancel()
    final = stream.final()
    if record.turn.final is None:  # cancelled before the final event was read
        record.event(final)
    assert isinstance(final, FinalEvent)
    return {
        "chat": record.chat_id,
        "text": final.text,
        "finish": final.finish_reason,
        "rounds": len(record.turn.rounds),
        "record_error": record.error,
    }


def check(history: History, expected: list[dict[str, Any]]) -> dict[str, Any]:
    """Every answer stored as it ended: same text, a final state, all its rounds."""
    lost = corrupt = 0
    for answer in expected:
        try:
            stored = history.load(answer["chat"]).turns
        except Exception:
            lost += 1
            continue
        last = stored[-1] if stored else None
        if len(stored) != 2 or last is None or last.final is None:
            lost += 1
        elif last.content != answer["text"] or len(last.rounds) != answer["rounds"] or last.error:
            corrupt += 1
    with contextlib.closing(sqlite3.connect(history.path)) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        streaming = db.execute("SELECT COUNT(*) FROM messages WHERE state = 'streaming'").fetchone()[0]
    return {"lost": lost, "corrupt": corrupt, "integrity": integrity, "left_streaming": streaming}


WARM_UP = 5  # answers at the start of each block (after a load) left out of its slope
MAX_SLOPE = 128 * 1024  # bytes of RSS per answer: a leak of a megabyte an answer is far past it


def block_slopes(rss: list[int], reload_every: int) -> list[float]:
    """Per block of answers between reloads, the least-squares growth of the RSS in bytes per
    answer, its first answers (warm-up) left out."""
    slopes = []
    for start in range(0, len(rss), reload_every):
        ys = np.array(rss[start + WARM_UP : start + reload_every], dtype=float)
        if len(ys) >= 3:
            slopes.append(round(float(np.polyfit(np.arange(len(ys)), ys, 1)[0]), 1))
    return slopes


def soak(
    answers: int, max_tokens: int, reload_every: int, config_path: str | None, seed: int, data: Path
) -> dict[str, Any]:
    rng = random.Random(seed)
    history = History(data / "specem.db", chat_files=data / "none")
    config = load_config(config_path)
    ensemble = Ensemble.from_config(config)
    done: list[dict[str, Any]] = []
    peaks: dict[int, int] = {}
    now: dict[int, int] = {}  # RSS at the end of each block
    after: list[int] = []  # RSS after every answer: a leak is a slope, not two points
    started = time.perf_counter()
    try:
        for index in range(1, answers + 1):
            done.append(one_answer(ensemble, history, rng, max_tokens))
            after.append(rss_bytes(os.getpid()) or 0)
            if index % reload_every == 0:
                peaks[index] = peak_rss_bytes()
                now[index] = rss_bytes(os.getpid()) or peaks[index]
                if index < answers:
                    ensemble.close()
                    ensemble = Ensemble.from_config(load_config(config_path))
    finally:
        ensemble.close()
    seconds = time.perf_counter() - started
    first_block = peaks.get(reload_every, peak_rss_bytes())
    final_peak = peak_rss_bytes()
    result = check(history, done)
    finishes: dict[str, int] = {}
    for answer in done:
        finishes[answer["finish"]] = finishes.get(answer["finish"], 0) + 1
    growth = final_peak / first_block - 1
    blocks = sorted(now)
    rss_growth = now[blocks[-1]] / now[blocks[0]] - 1 if blocks else 0.0
    slopes = block_slopes(after, reload_every)
    result.update(
        answers=len(done),
        seconds=round(seconds, 1),
        finishes=finishes,
        record_errors=sum(bool(a["record_error"]) for a in done),
        peak_rss_after_first_block_bytes=first_block,
        peak_rss_at_end_bytes=final_peak,
        peak_rss_growth=round(growth, 4),
        peak_rss_by_block=peaks,
        rss_by_block=now,
        rss_growth=round(rss_growth, 4),
        rss_slope_bytes_per_answer=slopes,
        rss_slope_max=max(slopes, default=0.0),
    )
    result["ok"] = (
        result["lost"] == 0
        and result["corrupt"] == 0
        and result["integrity"] == "ok"
        and result["left_streaming"] == 0
        and result["record_errors"] == 0
        and growth <= 0.05
        and rss_growth <= 0.05
        and max(slopes, default=0.0) <= MAX_SLOPE
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=500)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--reload", type=int, default=50, help="reload the models every N answers (default 50)")
    parser.add_argument("--config", help="models.toml (default: the usual lookup, the demo trio)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the results as JSON here")
    parser.add_argument("--data", help="keep the history here (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specem-soak-") as folder:
        data = Path(args.data or folder)
        result = soak(args.answers, args.max_tokens, args.reload, args.config, args.seed, data)
    print(json.dumps(result, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
