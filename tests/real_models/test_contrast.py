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


# How far apart two scores may be and still count as a tie: llama.cpp's kernels differ with the
# batch's shape (a segment of 8 rows, a catch-up batch, one row here), which moves a logit by
# ~1e-3; a wrong position, beta or plausibility cut moves scores by far more.
TIE = 0.05


@dataclasses.dataclass
class Replay:
    wrong: list[str]  # positions where the engine's token was not the reference's choice
    changed: int  # tokens that were not the expert's own top choice
    ties: int  # positions where a choice was a tie within TIE (either decision is right)


def replay_contrastive_decoding(ensemble: Ensemble, beta: float, answer: list[int]) -> Replay:
    """Greedy contrastive decoding one token at a time, straight on the two models' contexts,
    along the engine's own answer: at each position the engine's token must be the reference's
    choice, or tie with it within TIE (batch shapes differ, so exact ties may break either
    way); then both models read the engine's token, so one tie never derails the rest. Leaves
    both models empty (the members are reset)."""
    members = {m.name: m for m in ensemble.members}
    rows, positions = {}, {}
    for name, member in members.items():
        member.reset()
        prompt = prompt_tokens(member, ensemble.settings)
        rows[name] = member.model.decode([BatchRow(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])[-1]
        positions[name] = len(prompt)
    replay = Replay([], 0, 0)
    for index, token in enumerate(answer):
        expert, amateur = rows[BIG].astype(np.float64), rows[SMALL].astype(np.float64)
        cut = expert.max() + math.log(0.1)
        scores = np.where(expert >= cut - TIE, (1 + beta) * expert - beta * amateur, -np.inf)
        best = int(np.argmax(np.where(expert >= cut, scores, -np.inf)))
        if scores[token] < scores[best] - TIE:
            replay.wrong.append(f"token {index}: {token} scores {scores[token]:.3f}, {best} {scores[best]:.3f}")
        replay.ties += token != best or _top_two_gap(expert) < TIE or abs(expert[token] - cut) < TIE
        replay.changed += token != int(np.argmax(expert))
        for name, member in members.items():
            rows[name] = member.model.decode([BatchRow(token, positions[name], 0, True)])[0]
            positions[name] += 1
    for member in members.values():
        member.reset()
    return replay


def _top_two_gap(logits: np.ndarray) -> float:
    top = np.partition(logits, -2)[-2:]
    return float(top[1] - top[0])


def test_the_engine_decodes_what_plain_contrastive_decoding_does(qwen_pair):
    """Drafting in segments, the amateur catching up in batches only where two tokens are
    plausible, and commits that keep the drafted cells change nothing: every token of the
    answer is what a plain greedy contrastive decoding chooses at that point, in both
    models' memories (up to ties within float noise, which batch shapes break either way)."""
    events = list(qwen_pair.stream(QUESTION, contrast=0.5, max_tokens=64))
    start, rounds, final = events[0], [e for e in events if isinstance(e, RoundEvent)], events[-1]
    assert start.drafters == (BIG,) and final.text
    assert all(e.candidates[0].contrasted_with == (SMALL,) for e in rounds)
    members = {m.name: m for m in qwen_pair.members}
    answer = members[BIG].tokens[start.prompt_tokens[BIG] :]
    assert members[SMALL].tokens[start.prompt_tokens[SMALL] :] == answer  # read along, cells kept
    assert len(answer) >= 16
    replay = replay_contrastive_decoding(qwen_pair, 0.5, answer)
    assert replay.wrong == []
    assert abs(final.contrast_changed - replay.changed) <= replay.ties and replay.ties <= len(answer) // 4
    assert final.drafted_tokens >= 2 * len(answer)  # the 1.5B's drafting and the 0.5B's reading


def test_beta_changes_the_answer_and_the_same_seed_gives_the_same_sample(qwen_pair):
    plain = qwen_pair.generate(QUESTION, max_tokens=64)
    strong = qwen_pair.generate(QUESTION, contrast=2.0, max_tokens=64)
    assert strong.contrast_changed > 0 and strong.text != plain.text
    sampled = dict(greedy=False, contrast=0.5, max_tokens=48)
    texts = [qwen_pair.generate(QUESTION, seed=seed, **sampled).text for seed in (11, 12, 13)]
    assert len(set(texts)) > 1  # it sampled: other seeds, other answers
    assert qwen_pair.generate(QUESTION, seed=11, **sampled).text == texts[0]  # and the same seed, the same one


def test_no_amateur_in_the_trio(trio):
    """The demo trio's tokenizers all differ: contrast stays per segment, everyone drafts."""
    events = list(trio.stream("Name a colour.", contrast=0.5, model_exit=False, max_tokens=12))
    assert len(events[0].drafters) == 3
    assert all(c.contrasted_with == () for e in events if isinstance(e, RoundEvent) for c in e.candidates)
