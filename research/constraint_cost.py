"""What structured output costs (issue 37): the grammar tokenizer built once per model (by
vocabulary size), a schema's matcher compiled per answer and member, the token mask drafting
computes before each token, and the ensemble's time per token with and without a schema on
the same prompts. Also how much probability each model puts outside the mask along a valid
answer: what renormalising verifiers' scores under the mask would change.

    python -m specem_research.constraint_cost [--answers 6] [--max-tokens 96] [--output cost.json]

Run it with nothing else heavy on the machine: the ratio is of two runs in one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.backend import BatchRow, LlamaModel
from specem_local.engine import Ensemble, allowed_tokens, member_matcher, output_format_from
from specem_local.events import RoundEvent
from specem_local.models import DEMO_MODELS, demo_path, load_config

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "country": {"type": "string"},
        "population": {"type": "integer"},
        "landmarks": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "country", "population", "landmarks"],
}
ANSWER = '{"city": "Paris", "country": "France", "population": 2100000, "landmarks": ["Eiffel Tower", "Louvre"]}'
PROMPTS = [
    "Describe the capital of France.",
    "Describe the capital of Japan.",
    "Describe the capital of Brazil.",
    "Describe the capital of Kenya.",
    "Describe the capital of Canada.",
    "Describe the capital of Egypt.",
]


def per_model(name: str) -> dict[str, Any]:
    """Tokenizer build, matcher compile and mask time for one demo model."""
    model = LlamaModel(demo_path(DEMO_MODELS[name]), n_ctx=256, n_seq_max=2, n_threads=2)
    try:
        started = time.perf_counter()
        tokenizer = model.grammar_tokenizer()
        build = time.perf_counter() - started
        constraint = output_format_from(SCHEMA)
        compiles, masks = [], []
        for _ in range(20):
            started = time.perf_counter()
            matcher = member_matcher(tokenizer, constraint)
            compiles.append(time.perf_counter() - started)
        prompt = model.tokenize(f"Describe the capital of France as JSON matching {json.dumps(SCHEMA)}.\n")
        answer = model.tokenize(ANSWER)
        tokens = [*prompt, *answer]
        rows = model.decode([BatchRow(t, i, 0, i >= len(prompt) - 1) for i, t in enumerate(tokens)])
        outside = []  # the probability a model puts on tokens the constraint forbids, at each answer token
        for token, row in zip(answer, rows):
            started = time.perf_counter()
            allowed = allowed_tokens(matcher, model.n_vocab)
            masks.append(time.perf_counter() - started)
            assert allowed[token], (name, token)
            probabilities = np.exp(row - row.max())
            outside.append(float(probabilities[~allowed].sum() / probabilities.sum()))
            matcher.consume_token(token)
        return {
            "vocabulary": model.n_vocab,
            "tokenizer_build_s": round(build, 3),
            "matcher_compile_ms_median": round(statistics.median(compiles) * 1000, 3),
            "mask_us_median": round(statistics.median(masks) * 1e6, 1),
            "mask_us_p90": round(sorted(masks)[int(len(masks) * 0.9)] * 1e6, 1),
            "mass_outside_mask_median": round(statistics.median(outside), 4),
            "mass_outside_mask_p90": round(sorted(outside)[int(len(outside) * 0.9)], 4),
            "mass_outside_mask_max": round(max(outside), 4),
        }
    finally:
        model.close()


def per_token(ensemble: Ensemble, prompts: list[str], max_tokens: int, **options: Any) -> dict[str, Any]:
    """Time per answer token once the prompt is read: the rounds after the first (which reads
    the prompt, longer with a schema in it) over the tokens they wrote."""
    seconds = tokens = 0.0
    for prompt in prompts:
        rounds = [
            e
            for e in ensemble.stream(prompt, max_tokens=max_tokens, greedy=True, **options)
            if isinstance(e, RoundEvent)
        ]
        seconds += sum(event.seconds for event in rounds[1:])
        tokens += rounds[-1].answer_tokens - rounds[0].answer_tokens
    return {"answers": len(prompts), "tokens": int(tokens), "seconds": round(seconds, 2), "per_token": seconds / tokens}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specem_research.constraint_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--answers", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--output", help="also write the figures as JSON")
    args = parser.parse_args()
    trio = [name for name in DEMO_MODELS if name != "qwen2.5-coder-1.5b"]
    figures: dict[str, Any] = {"models": {name: per_model(name) for name in trio}}
    prompts = PROMPTS[: args.answers]
    with Ensemble.from_config(load_config()) as ensemble:
        ensemble.generate(prompts[0], max_tokens=8, schema=SCHEMA)  # every grammar tokenizer built once
        plain = per_token(ensemble, prompts, args.max_tokens, ignore_eos=True)  # as many tokens as it may
        shaped = per_token(ensemble, prompts, args.max_tokens, schema=SCHEMA)
    figures["ensemble"] = {"plain": plain, "schema": shaped, "ratio": shaped["per_token"] / plain["per_token"]}
    print(json.dumps(figures, indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
