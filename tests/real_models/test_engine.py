"""The ensemble loop on the real demo trio."""

import threading
import time

import numpy as np
import pytest

from specem_local.engine import Ensemble
from specem_local.engine.segments import copied_fraction
from specem_local.engine.vote import pick_winner
from specem_local.events import FinalEvent, RoundEvent, StartEvent
from tests.conftest import demo_config

QUESTION = "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May. How many in total?"


def test_events_and_final_record(trio):
    events = list(trio.stream(QUESTION, max_tokens=30))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    final = events[-1]
    assert isinstance(final, FinalEvent) and rounds
    assert final.text == "".join(e.text for e in rounds)
    assert final.rounds == len(rounds) and sum(final.wins.values()) == len(rounds)
    assert final.finish_reason in ("eos", "length") and final.tokens <= 30
    assert final.drafters_per_round == 3.0
    assert isinstance(events[0], StartEvent) and events[0].weights == trio.starting_weights()
    for event in rounds:
        assert event.author in trio.model_names
        assert sum(event.weights.values()) == pytest.approx(1.0)
        assert set(event.draft_seconds) == set(event.drafters)
        if event.decision == "vote":
            winner = max(event.candidates, key=lambda c: c.combined)
            assert winner.model == event.author and winner.text == event.text
            for candidate in event.candidates:
                assert set(candidate.scores) == set(trio.model_names)
                assert sum(candidate.shares.values()) > 0


def test_fixed_seed_gives_the_same_answer_in_both_drafting_modes(trio):
    """Threads decode with a share of the cores each, round-robin with all of them: the same
    answer and the same learned weights either way, with every token sampled or the top k."""
    for settings in (dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0), dict(top_k=40)):
        settings.update(seed=11, max_tokens=20, model_exit=False)
        first = trio.generate(QUESTION, drafting="round-robin", **settings)
        assert trio.generate(QUESTION, drafting="round-robin", **settings).text == first.text
        threaded = trio.generate(QUESTION, drafting="threads", **settings)
        assert (threaded.text, threaded.weights) == (first.text, first.weights)
    assert trio.generate(QUESTION, **{**settings, "seed": 12}).text != first.text


def test_cancel_mid_round_then_answer_equals_fresh_answer(trio, monkeypatch):
    """Cancelled inside a model's decode in the second round (drafting, with its tokens in the
    KV memory): the answer keeps the first round only, and the next answer is what a freshly
    loaded ensemble gives (nothing of the cut round is left behind).

    It failed now and then in a full run (issue 44). The cause, measured: not cells left behind,
    but the reuse of the cached prompt. ``Member.start`` decoded only what was new since the last
    prompt, and llama.cpp's last logits depend on how a prompt is split into decode calls (Gemma's
    16-token prompt as 5 + 11 moves them by up to 0.59; Qwen's by 0.3 when a part has under 8
    tokens): a sampled near-tie then goes the other way. With ``reuse_prompt = false`` the prompt
    is decoded as a fresh model would, cell for cell, and the answers are equal."""
    settings = dict(temperature=0.8, seed=5, max_tokens=30, model_exit=False, reuse_prompt=False)
    armed = threading.Event()
    decodes = {"after_arming": 0}
    member = trio.members[1]
    decode = member.model.decode

    def decode_then_cancel(rows):
        if armed.is_set():
            decodes["after_arming"] += 1
            if decodes["after_arming"] == 2:  # a draft token in: the round is under way
                trio.cancel()
        return decode(rows)

    monkeypatch.setattr(member.model, "decode", decode_then_cancel)
    events = []
    for event in trio.stream(QUESTION, **settings):
        events.append(event)
        if isinstance(event, RoundEvent):
            armed.set()
    monkeypatch.undo()
    rounds, final = [e for e in events if isinstance(e, RoundEvent)], events[-1]
    assert decodes["after_arming"] >= 2 and final.finish_reason == "cancelled"
    assert len(rounds) == final.rounds == 1 and final.text == rounds[0].text
    after_cancel = trio.generate(QUESTION, **settings).text
    with Ensemble.from_config(demo_config(max_tokens=40)) as fresh:
        assert fresh.generate(QUESTION, **settings).text == after_cancel


def test_cancel_from_another_thread_while_answering(trio):
    first_round = threading.Event()
    outcome = {}

    def answer():
        for event in trio.stream(QUESTION, max_tokens=200):
            if isinstance(event, RoundEvent):
                first_round.set()
            outcome["last"] = event

    worker = threading.Thread(target=answer)
    worker.start()
    assert first_round.wait(60)
    cancelled = time.monotonic()
    trio.cancel()  # from this thread, while the worker drafts or verifies the next round
    worker.join(60)
    assert not worker.is_alive() and time.monotonic() - cancelled < 1.0  # the promise: within a second
    assert outcome["last"].finish_reason == "cancelled" and outcome["last"].tokens < 200
    assert trio.generate("Say hi.", max_tokens=8).finish_reason in ("eos", "length")


def test_cjk_and_emoji_never_produce_replacement_characters(trio):
    prompt = "Translate to Chinese and Japanese, and add three emoji: 'good morning, friends'. 日本語と中文で 🙂"
    events = list(trio.stream(prompt, max_tokens=40, segment_tokens=3, temperature=1.0, seed=3))
    texts = [c.text for e in events if isinstance(e, RoundEvent) for c in e.candidates] + [events[-1].text]
    assert any(ord(ch) > 0x2E80 for text in texts for ch in text), "expected some CJK or emoji output"
    assert not any("\ufffd" in text for text in texts)


def test_stop_strings(trio):
    """Stop at a string that spans two segments: the answer is cut just before it."""
    events = list(trio.stream(QUESTION, greedy=True, max_tokens=40))
    segments = [e.text for e in events if isinstance(e, RoundEvent)]
    assert len(segments) >= 3
    boundary = len(segments[0]) + len(segments[1])
    full = events[-1].text
    stop = full[boundary - 3 : boundary + 2]
    final = trio.generate(QUESTION, greedy=True, max_tokens=40, stop=(stop,))
    assert final.finish_reason == "stop"
    assert final.text == full[: full.index(stop)]


def test_max_tokens(trio):
    # greedy: a sampled story may end early, depending on what the KV cache held before
    final = trio.generate("Write a long story about a dragon.", greedy=True, max_tokens=15)
    assert final.finish_reason == "length" and 15 <= final.tokens < 15 + 12


def test_multi_turn_chat(trio):
    messages = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    final = trio.chat(messages, greedy=True, max_tokens=20)
    assert "Ada" in final.text


def test_two_models_weights_move_with_feedback_and_stay_without():
    """With K = 2 the reference's reward is always 1 and the weights never move; ours do."""
    with Ensemble.from_config(demo_config("qwen2.5-coder-0.5b", "smollm2-135m", max_tokens=40)) as pair:
        start = pair.starting_weights()
        learned = [e for e in pair.stream(QUESTION, greedy=True) if isinstance(e, RoundEvent)]
        fixed = [e for e in pair.stream(QUESTION, greedy=True, feedback=False) if isinstance(e, RoundEvent)]
    assert any(e.decision == "vote" for e in learned)
    assert all(e.weights == start for e in fixed)
    assert any(abs(e.weights["qwen2.5-coder-0.5b"] - start["qwen2.5-coder-0.5b"]) > 0.01 for e in learned)


def test_one_model_is_plain_generation():
    with Ensemble.from_config(demo_config("smollm2-135m")) as single:
        assert single.plain_generation
        final = single.generate("Say hello.", greedy=True, max_tokens=20)
    assert final.plain_generation and final.text and set(final.wins) == {"smollm2-135m"}


def test_fast_finish_and_model_exit(trio):
    final = trio.generate(QUESTION, model_exit=True, exit_warmup_rounds=1, exit_share=0.9, max_tokens=60)
    assert final.drafters_per_round < 3.0
    events = list(trio.stream("Say yes.", fast_finish=True, greedy=True, max_tokens=30))
    finishing = [e for e in events if isinstance(e, RoundEvent) and e.decision == "fast-finish"]
    assert finishing and finishing[-1] is events[-2] and events[-1].finish_reason == "eos"
    assert (
        finishing[-1].verify_seconds == {}
        and next(c for c in finishing[-1].candidates if c.model == finishing[-1].author).ended
    )


def test_ignore_eos_answers_to_the_length_limit(trio):
    short = trio.generate("Say yes.", greedy=True, max_tokens=40)
    assert short.finish_reason == "eos" and short.tokens < 40
    forced = trio.generate("Say yes.", greedy=True, max_tokens=40, ignore_eos=True)
    assert forced.finish_reason == "length" and forced.tokens == 40  # finishing a word never overruns


def test_separate_drafter_and_verifier_sets():
    config = demo_config(max_tokens=20)
    from dataclasses import replace

    models = (replace(config.models[0], role="verify"), config.models[1], replace(config.models[2], role="draft"))
    with Ensemble.from_config(replace(config, models=models)) as ensemble:
        events = [e for e in ensemble.stream(QUESTION) if isinstance(e, RoundEvent)]
    assert all(e.author != "qwen2.5-coder-0.5b" for e in events)
    assert all("smollm2-135m" not in e.weights for e in events)


def test_context_full_stops_cleanly():
    from dataclasses import replace

    config = demo_config("smollm2-135m", max_tokens=500)
    config = replace(config, models=(replace(config.models[0], n_ctx=128),))
    with Ensemble.from_config(config) as small:
        final = small.generate("Write a long story about the sea.", greedy=True)
        assert final.finish_reason == "context" and final.text
        assert small.generate("Say hi.", greedy=True, max_tokens=5).finish_reason in ("eos", "length")


def test_loop_guard_discounts_repeated_candidates_in_the_vote(trio):
    prompt = "Write the line 'I will not talk in class.' ten times, one per line."
    events = trio.stream(prompt, greedy=True, max_tokens=80, ignore_eos=True, loop_guard=True, model_exit=False)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    answer, discounted = "", 0
    for event in rounds:
        if event.decision == "vote":
            distinct = [c for c in event.candidates if c.same_as is None]
            for c in distinct:
                assert c.copied == pytest.approx(copied_fraction(answer, c.text))
            index = {c.model: i for i, c in enumerate(distinct)}
            combined = np.array([c.combined for c in distinct])
            chosen = pick_winner(list(range(len(distinct))), combined, np.array([c.copied for c in distinct]))
            assert distinct[chosen].model == event.author or combined[chosen] == combined[index[event.author]]
            discounted += combined[index[event.author]] < combined.max()
        answer += event.text
    assert discounted  # the models repeat the line; the guard must let new text win at least once
    plain = [e for e in trio.stream(prompt, greedy=True, max_tokens=20) if isinstance(e, RoundEvent)]
    assert all(c.copied is None for e in plain for c in e.candidates)


def test_the_package_loads_llama_cpp_before_numpy_and_the_api_works_after_numpy():
    """On a CUDA build numpy's C++ runtime loaded first crashed llama.cpp's model loading:
    every path into the package loads libllama first; and importing numpy first must work."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    check = (
        "import sys; m = list(sys.modules); "  # in the order the imports completed
        "print(m.index('llama_cpp.llama_cpp') < min(i for i, name in enumerate(m) if name.startswith('numpy')))"
    )
    for module in ("specem_local", "specem_local.commands.cli", "specem_tui.app"):
        result = subprocess.run(
            [sys.executable, "-c", f"import {module}; {check}"], capture_output=True, text=True, cwd=ROOT
        )
        assert result.stdout.strip() == "True", (module, result.stderr)
    numpy_first = (
        "import numpy\nfrom specem_local import Ensemble\nfrom tests.conftest import demo_config\n"
        "with Ensemble.from_config(demo_config('smollm2-135m', max_tokens=4, greedy=True)) as e:\n"
        "    print(e.generate('Hi').tokens)"
    )
    result = subprocess.run([sys.executable, "-c", numpy_first], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "4", result.stderr


def test_vote_gate_on_the_demo_trio(trio):
    """Sure segments of the heaviest drafter are taken unvoted, the rest voted by all three; a
    gate every segment passes gives the leader's own greedy answer."""
    settings = dict(greedy=True, max_tokens=40, model_exit=False)
    leader = max(trio.starting_weights(), key=trio.starting_weights().get)
    events = list(trio.stream(QUESTION, vote_gate=0.5, **settings))
    rounds, final = [e for e in events if isinstance(e, RoundEvent)], events[-1]
    assert rounds and final.confident_rounds == sum(e.decision == "confident" for e in rounds)
    for event in rounds:
        assert event.confidence is not None
        if event.decision == "confident":
            assert event.drafters == (leader,) and event.author == leader and event.confidence >= 0.5
        else:
            assert len(event.drafters) == 3 and event.confidence < 0.5
    always = trio.generate(QUESTION, vote_gate=1e-30, **settings)
    assert always.confident_rounds == always.rounds and always.drafters_per_round == 1.0
    assert always.text == trio.generate(QUESTION, models=[leader], **settings).text


def test_draft_budget_and_contrast_on_the_demo_trio(trio):
    """The strong member drafts several candidates (real KV sequences: a second draft drops
    the first's cells, an earlier draft that wins is decoded again), all three verify, and the
    contrastive vote picks among them; the same seed gives the same answer."""
    settings = dict(greedy=True, max_tokens=40, model_exit=False, draft_budget=3, contrast=0.5, seed=4)
    events = list(trio.stream(QUESTION, **settings))
    rounds, final = [e for e in events if isinstance(e, RoundEvent)], events[-1]
    assert final.text and final.text == "".join(e.text for e in rounds)
    qwen = "qwen2.5-coder-0.5b"
    assert any(c.model == qwen and c.sample > 0 for e in rounds for c in e.candidates)
    for event in rounds:
        assert event.draft_tokens.keys() == set(event.drafters)
        if event.decision == "contrast":
            assert {v for c in event.candidates for v in c.scores} == set(trio.model_names)
    assert any(event.decision == "contrast" for event in rounds)  # the contrastive vote did decide
    assert trio.generate(QUESTION, **settings).text == final.text
    plain = trio.generate(QUESTION, greedy=True, max_tokens=40, model_exit=False)
    assert plain.text  # the ensemble still answers the usual way afterwards


def test_continuing_the_first_rounds_of_a_greedy_answer_gives_it_back(trio):
    """Issue 27: a conversation that ends with an assistant message is continued; every member
    gets that text in its own tokens. Greedy, from the answer's own first k rounds, the
    continuation is the rest of the answer."""
    question = "Name three primary colours."
    settings = {"greedy": True, "model_exit": False, "fast_finish": False, "segment_tokens": 4}
    events = list(trio.stream(question, max_tokens=30, **settings))
    rounds, final = events[1:-1], events[-1]
    assert len(rounds) >= 3
    for k in (1, len(rounds) // 2):
        prefix = "".join(event.text for event in rounds[:k])
        conversation = [{"role": "user", "content": question}, {"role": "assistant", "content": prefix}]
        rest = 30 - rounds[k - 1].answer_tokens
        continued = trio.generate(conversation, max_tokens=rest, **settings)
        assert prefix + continued.text == final.text
