"""In-line verification and KV adoption against the slow, obvious ways, on real models."""

import threading

import numpy as np
import pytest

from specem_local.backend import LlamaModel
from specem_local.backend.protocol import BatchRow
from specem_local.backend.scoring import segment_score
from specem_local.engine.loading import prompt_format_for
from specem_local.engine.member import Member
from specem_local.engine.prompting import Message
from specem_local.models.demo_models import DEMO_MODELS, assemble_demo
from tests.conftest import demo_config

CANDIDATES = {0: " Paris is the capital.", 1: " I think it is Lyon", 2: " 巴黎 🙂 yes"}
# SmolLM2 (Q4_1) gives bit-for-bit equal scores however the batch is shaped. The K-quant models
# (Gemma, Qwen: Q4_K_M) do not: the *same* sequence decoded in one batch and token by token
# already differs by up to 0.19 (Gemma, mean raw logit of a CJK/emoji candidate; Qwen: 0.03),
# measured, so they get a tolerance at that noise floor.
# A real fault (a candidate attending to another's cells, wrong positions) moves scores by whole
# units.
TOLERANCE = {"smollm2-135m": (1e-5, 1e-4), "gemma-3-270m": (0.0, 0.35), "qwen2.5-coder-0.5b": (0.02, 0.05)}


def member(key: str, n_seq_max: int = 4) -> Member:
    spec = next(m for m in demo_config().models if m.demo == key)
    model = LlamaModel(assemble_demo(DEMO_MODELS[key]), n_ctx=512, n_seq_max=n_seq_max, n_threads=2)
    m = Member(spec, model, prompt_format_for(spec, model))
    bos = model.bos_token if model.adds_bos else None
    m.start(m.prompt_format.tokens([Message("user", "What is the capital of France?")], model, bos_token=bos))
    return m


def scratch_score(m: Member, text: str, scoring: str) -> float:
    """Re-evaluate prefix + candidate from an empty cache (the naive way)."""
    prefix = list(m.tokens)
    tokens = m.model.tokenize(text)
    m.model.clear()
    everything = prefix + tokens
    rows = m.model.decode([BatchRow(t, i, 0, i >= len(prefix) - 1) for i, t in enumerate(everything)])
    return segment_score(rows[:-1], tokens, scoring)


@pytest.mark.parametrize("key", ["smollm2-135m", "gemma-3-270m", "qwen2.5-coder-0.5b"])
@pytest.mark.parametrize("scoring", ["logit", "logprob"])
def test_inline_scores_equal_one_at_a_time_and_scratch(key, scoring):
    m = member(key)
    inline = m.score(CANDIDATES, scoring).scores
    one_at_a_time = {}
    for index, text in CANDIDATES.items():
        one_at_a_time[index] = m.score({index: text}, scoring).scores[index]
        m.model.seq_keep(0)
    scratch = {index: scratch_score(member(key), text, scoring) for index, text in CANDIDATES.items()}
    rel, tol = TOLERANCE[key]
    for index in CANDIDATES:
        assert inline[index] == pytest.approx(one_at_a_time[index], rel=rel, abs=tol)
        assert inline[index] == pytest.approx(scratch[index], rel=rel, abs=tol)
    spread = max(inline.values()) - min(inline.values())
    assert spread > 10 * max(tol, rel * abs(max(inline.values())))  # the tolerance can tell candidates apart
    m.model.close()


@pytest.mark.parametrize(("key", "tolerance"), [("smollm2-135m", 1e-3), ("qwen2.5-coder-0.5b", 0.5)])
def test_adopted_winner_gives_same_next_logits_as_fresh_decode(key, tolerance):
    m = member(key)
    scored = m.score(CANDIDATES, "logprob")
    m.commit(0, CANDIDATES[0], None, scored)
    adopted_row = m.last_row.copy()
    probe = m.model.tokenize(" It")
    probe_row = m.model.decode([BatchRow(probe[0], len(m.tokens), 0, True)])[0]

    fresh = member(key)
    winner_tokens = fresh.model.tokenize(CANDIDATES[0])
    fresh.commit(0, CANDIDATES[0], None, None)  # decodes the winner afresh
    assert fresh.tokens == m.tokens and fresh.tokens[-len(winner_tokens) :] == winner_tokens
    fresh_probe = fresh.model.decode([BatchRow(probe[0], len(fresh.tokens), 0, True)])[0]
    assert np.abs(adopted_row - fresh.last_row).max() < tolerance
    assert np.abs(probe_row - fresh_probe).max() < tolerance
    assert int(np.argmax(probe_row)) == int(np.argmax(fresh_probe))
    m.model.close()
    fresh.model.close()


def test_own_draft_is_scored_from_drafting_logits():
    m = member("smollm2-135m")
    from specem_local.engine.sampling import greedy_sampler

    draft = m.draft(8, greedy_sampler(), threading.Event())
    assert draft.aligned and draft.text
    own = m.own_score(draft, "logit")
    m.model.seq_remove(0, len(m.tokens), -1)
    assert own == pytest.approx(m.score({0: draft.text}, "logit").scores[0], abs=1e-4)
    m.model.close()


def test_ending_is_scored_the_same_from_drafting_logits_and_in_line():
    from specem_local.engine.sampling import greedy_sampler

    m = member("qwen2.5-coder-0.5b")
    draft = m.draft(16, greedy_sampler(), threading.Event())
    assert draft.ended and draft.aligned  # "The capital of France is Paris." then end-of-turn
    own = m.own_score(draft, "logprob", with_end=True)
    assert own != pytest.approx(m.own_score(draft, "logprob"), abs=1e-3)
    m.model.seq_remove(0, len(m.tokens), -1)
    in_line = m.score({0: draft.text}, "logprob", ending=frozenset({0})).scores[0]
    m.model.close()
    assert own == pytest.approx(in_line, abs=0.05)  # Q4_K_M batch-shape noise, see TOLERANCE


@pytest.mark.parametrize("length", [1, 3, 5, 8])
def test_drafts_end_on_a_whole_word_without_discarding_tokens(length):
    from specem_local.engine.sampling import greedy_sampler

    m = member("qwen2.5-coder-0.5b")
    draft = m.draft(length, greedy_sampler(), threading.Event())
    m.model.close()
    assert draft.aligned and len(draft.text_tokens) == draft.sampled  # every drafted token kept
    assert draft.sampled >= length or draft.ended
    following = m.model.token_bytes(greedy_sampler()(draft.rows[-1]))
    assert draft.ended or following[:1].isspace() or not draft.text[-1].isalnum()


def test_special_token_text_in_a_prompt_stays_text():
    m = member("qwen2.5-coder-0.5b")
    im_end = m.model.tokenize("<|im_end|>", parse_special=True)
    assert len(im_end) == 1
    plain = m.prompt_format.tokens([Message("user", "hello")], m.model, bos_token=None)
    tricky = m.prompt_format.tokens([Message("user", "hello <|im_end|> <end_of_turn>")], m.model, bos_token=None)
    assert tricky.count(im_end[0]) == plain.count(im_end[0])
    m.model.close()


@pytest.mark.parametrize("key", ["smollm2-135m", "gemma-3-270m"])
def test_candidates_sharing_the_verifiers_draft_score_as_without_it(key):
    """The shared start is scored from the drafting rows and its cells are shared, not decoded."""
    from specem_local.engine.sampling import greedy_sampler

    drafted = member(key)
    draft = drafted.draft(12, greedy_sampler(), threading.Event())
    half = b"".join(map(drafted.model.token_bytes, draft.tokens[:6])).decode()
    candidates = {1: half + " Lyon, I think", 2: draft.text[: len(draft.text) - 2], 3: " Lyon"}
    for index in (1, 2):
        shared = next(
            i for i, (a, b) in enumerate(zip([*drafted.model.tokenize(candidates[index]), -1], draft.tokens)) if a != b
        )
        assert shared >= 4, (candidates[index], draft.text)
    in_line = drafted.score(candidates, "logprob", ending=frozenset({2}))
    plain = member(key)
    reference = plain.score(candidates, "logprob", ending=frozenset({2})).scores
    rel, tol = TOLERANCE[key]
    for index in candidates:
        assert in_line.scores[index] == pytest.approx(reference[index], rel=rel, abs=tol)
    drafted.commit(1, candidates[1], None, in_line)  # adopts cells shared with the draft
    plain.commit(1, candidates[1], None, None)  # decodes the winner afresh
    assert drafted.tokens == plain.tokens
    assert np.abs(drafted.last_row - plain.last_row).max() < max(10 * tol, 1e-3)
    drafted.model.close()
    plain.model.close()
