"""Token-level contrast on real models (issue 26): Qwen2.5-Coder-1.5B drafts against the 0.5B,
which share one vocabulary (the demo-1.5b ensemble without Gemma). The engine's answer must be
what a plain token-by-token contrastive decoding of the two models writes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from specem_local.backend.protocol import BatchRow
from specem_local.engine import Ensemble
from specem_local.engine.prompting import as_messages
from specem_local.events import RoundEvent
from specem_local.models.config import load_config
from specem_local.settings import EnsembleSettings

BIG, SMALL = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
QUESTION = "A shop sells pens at 3 dollars each. Tom buys 7 pens and pays with a 50 dollar note. How much change?"


@pytest.fixture(scope="module")
def qwen_pair():
    config = load_config(ensemble="demo-1.5b")
    models = tuple(m for m in config.models if m.name in (BIG, SMALL))
    settings = dataclasses.replace(config.ensemble, fresh_weights=True, greedy=True)
    with Ensemble.from_config(dataclasses.replace(config, models=models, ensemble=settings)) as ensemble:
        yield ensemble


def prompt_tokens(member, settings: EnsembleSettings) -> list[int]:
    model = member.model
    messages = as_messages(QUESTION, settings.system_prompt)
    return member.prompt_format.tokens(messages, model, bos_token=model.bos_token if model.adds_bos else None)


def reference_contrastive_decoding(ensemble: Ensemble, beta: float, tokens: int) -> tuple[list[int], int]:
    """Greedy contrastive decoding, one token at a time, straight on the two models' contexts:
    the tokens and how many of them were not the expert's own top choice. Leaves both models
    empty (the members are reset)."""
    members = {m.name: m for m in ensemble.members}
    rows, positions = {}, {}
    for name, member in members.items():
        member.reset()
        prompt = prompt_tokens(member, ensemble.settings)
        rows[name] = member.model.decode([BatchRow(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])[-1]
        positions[name] = len(prompt)
    out, changed = [], 0
    while len(out) < tokens:
        expert, amateur = rows[BIG].astype(np.float64), rows[SMALL].astype(np.float64)
        plausible = expert >= expert.max() + math.log(0.1)
        token = int(np.argmax(np.where(plausible, (1 + beta) * expert - beta * amateur, -np.inf)))
        if members[BIG].model.is_eog(token):
            break
        changed += token != int(np.argmax(expert))
        out.append(token)
        for name, member in members.items():
            rows[name] = member.model.decode([BatchRow(token, positions[name], 0, True)])[0]
            positions[name] += 1
    for member in members.values():
        member.reset()
    return out, changed


def test_the_engine_decodes_what_plain_contrastive_decoding_does(qwen_pair):
    """Drafting in segments, the amateur catching up in batches only where two tokens are
    plausible, and commits that keep the drafted cells change nothing: the answer's tokens are
    those of a plain greedy contrastive decoding, in both models' memories."""
    events = list(qwen_pair.stream(QUESTION, contrast=0.5, max_tokens=64))
    start, rounds, final = events[0], [e for e in events if isinstance(e, RoundEvent)], events[-1]
    assert start.drafters == (BIG,) and final.text
    assert all(e.candidates[0].contrasted_with == (SMALL,) for e in rounds)
    members = {m.name: m for m in qwen_pair.members}
    answer = members[BIG].tokens[start.prompt_tokens[BIG] :]
    assert members[SMALL].tokens[start.prompt_tokens[SMALL] :] == answer  # read along, cells kept
    reference, changed = reference_contrastive_decoding(qwen_pair, 0.5, len(answer))
    assert answer == reference[: len(answer)]
    assert final.contrast_changed == changed
    assert final.drafted_tokens >= 2 * len(answer)  # the 1.5B's drafting and the 0.5B's reading


def test_beta_changes_the_answer_and_the_same_seed_gives_the_same_sample(qwen_pair):
    plain = qwen_pair.generate(QUESTION, max_tokens=64)
    strong = qwen_pair.generate(QUESTION, contrast=2.0, max_tokens=64)
    assert strong.contrast_changed > 0 and strong.text != plain.text
    sampled = dict(greedy=False, seed=11, contrast=0.5, max_tokens=48)
    assert qwen_pair.generate(QUESTION, **sampled).text == qwen_pair.generate(QUESTION, **sampled).text


def test_no_amateur_in_the_trio(trio):
    """The demo trio's tokenizers all differ: contrast stays per segment, everyone drafts."""
    events = list(trio.stream("Name a colour.", contrast=0.5, model_exit=False, max_tokens=12))
    assert len(events[0].drafters) == 3
    assert all(c.contrasted_with == () for e in events if isinstance(e, RoundEvent) for c in e.candidates)
