"""How far llama.cpp's logits for the same tokens differ when they are decoded one at a time (as
a drafter decodes) and in one batch (as a prediction is read ahead, or a candidate scored): the
largest difference per position, and where the top two tokens are closer than it (a near tie the
two ways can break differently). Run on one member of the demo trio.

    python -m specem_research.batch_logits [--member qwen2.5-coder-0.5b] [--question Q] [--answer A]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from specem_local.backend import BatchRow
from specem_local.engine import Ensemble, Message
from specem_local.models import load_config

QUESTION, ANSWER = "Write a haiku about rain.", "Raindrops fall,\nIn puddles,\nWhispering secrets."


def compare(member, question: str, answer: str) -> list[dict[str, float]]:
    model = member.model
    prompt = member.prompt_format.tokens([Message("user", question)], model, bos_token=model.bos_token)
    tokens = model.tokenize(answer)

    def rows(batched: bool) -> np.ndarray:
        model.clear()
        model.decode([BatchRow(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        start = len(prompt)
        if batched:
            return model.decode([BatchRow(t, start + i, 0, True) for i, t in enumerate(tokens)])
        return np.stack([model.decode([BatchRow(t, start + i, 0, True)])[0] for i, t in enumerate(tokens)])

    one, batch = rows(False), rows(True)
    model.clear()
    said = []
    for i, token in enumerate(tokens):
        top = np.sort(one[i])[::-1][:2]
        said.append({"token": model.token_bytes(token).decode("utf-8", "replace"),
                     "largest_difference": float(np.abs(one[i] - batch[i]).max()),
                     "top_two_gap": float(top[0] - top[1]),
                     "same_top": bool(one[i].argmax() == batch[i].argmax())})  # fmt: skip
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specem_research.batch_logits", description=__doc__)
    parser.add_argument("--member", default="qwen2.5-coder-0.5b")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--answer", default=ANSWER)
    args = parser.parse_args(argv)
    with Ensemble.from_config(load_config(None, "demo")) as ensemble:
        [member] = [m for m in ensemble.members if m.name == args.member]
        said = compare(member, args.question, args.answer)
    largest = max(row["largest_difference"] for row in said)
    print(json.dumps({"positions": len(said), "largest_difference": largest, "rows": said}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
