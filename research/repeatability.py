"""Does the same seed give the same answer whatever was asked before (issue 44)? For pairs of
questions: a freshly loaded ensemble answers the second; another answers the first, then the
second; with ``reuse_prompt`` on (the default: the cached prompt prefix is reused) and off. Then
what reuse saves: the first segment's latency over the turns of one chat, on and off.

    python -m specem_research.repeatability [--output research/results/issue44-repeatability.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specem_local import load_config
from specem_local.engine import Ensemble

PAIRS = [
    ("What is 7 * 6?", "Why is the sky blue?"),
    ("Name a colour.", "Write a haiku about rain."),
    ("What is the capital of France?", "How do magnets work?"),
    ("Say hello.", "Explain photosynthesis in two sentences."),
    ("Count to five.", "What is a prime number?"),
]
SETTINGS = {"temperature": 0.8, "seed": 5, "model_exit": False, "fresh_weights": True}
CHAT = ["Tell me about the moon.", "How far away is it?", "Could people live there?", "What would they eat?"]


def pairs(tokens: int) -> dict[str, int]:
    """Answers that differ from a fresh ensemble's, with reuse on and off."""
    differ = {"reuse on": 0, "reuse off": 0}
    for first, second in PAIRS:
        with Ensemble.from_config(load_config()) as fresh:
            expected = fresh.generate(second, max_tokens=tokens, **SETTINGS).text
        with Ensemble.from_config(load_config()) as used:
            for label, reuse in (("reuse on", True), ("reuse off", False)):
                used.generate(first, max_tokens=tokens, reuse_prompt=reuse, **SETTINGS)
                got = used.generate(second, max_tokens=tokens, reuse_prompt=reuse, **SETTINGS).text
                differ[label] += got != expected
    return differ


def chat_latency() -> dict[str, list[float]]:
    """The first segment's seconds at each turn of one chat, with reuse on and off."""
    out: dict[str, list[float]] = {}
    for label, reuse in (("reuse on", True), ("reuse off", False)):
        with Ensemble.from_config(load_config()) as ensemble:
            messages: list[dict[str, str]] = []
            seconds = []
            for question in CHAT:
                messages.append({"role": "user", "content": question})
                final = ensemble.chat(messages, max_tokens=120, greedy=True, reuse_prompt=reuse)
                messages.append({"role": "assistant", "content": final.text})
                seconds.append(round(final.first_segment_seconds or 0.0, 3))
            out[label] = seconds
    return out


def main() -> None:
    about = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m specem_research.repeatability", description=about)
    parser.add_argument("--output", default="research/results/issue44-repeatability.json")
    args = parser.parse_args()
    result = {"pairs": len(PAIRS), "differ_at_30_tokens": pairs(30), "differ_at_60_tokens": pairs(60)}
    print(json.dumps(result), flush=True)
    result["first_segment_seconds_per_turn"] = chat_latency()
    print(json.dumps(result["first_segment_seconds_per_turn"]), flush=True)
    Path(args.output).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
