"""An answer among options on fake members (issue 56): scored by every member both ways in one
step, not drafted; the task's weights decide; what turns it off; what it says of itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specem_local.backend.protocol import StepAbandoned
from specem_local.commands.cli import main
from specem_local.engine import Ensemble, candidate_label, explain
from specem_local.engine import options as opt
from specem_local.engine.formats import output_format_from
from specem_local.engine.learned import key_of
from specem_local.engine.option_answers import CONFIDENCE_FROM, choice_among, option_vote, scored_here, source_weights
from specem_local.engine.request import PromptTooLong
from specem_local.engine.task_weights import TaskWeights, keep_task_weights, task_weights
from specem_local.errors import NoMemberLeft, SettingError, SpecemError
from specem_local.events import RoundEvent
from specem_local.settings import EnsembleSettings
from tests.engine.conftest import fake_ensemble, fake_member

PETS = {"enum": ["cat", "dog"]}


@pytest.fixture(autouse=True)
def own_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))


def pets():
    """``a`` would answer "cat", ``b`` "dog"; neither would ever write the other's word."""
    return fake_ensemble(fake_member("a", '"cat"'), fake_member("b", '"dog"'))


def lean(ensemble, task, toward):
    """Keep weights for ``task`` that believe ``toward`` (both its ways) nine times the other."""
    weights = {opt.source(m, way): 9.0 if m == toward else 1.0 for m in ("a", "b") for way in opt.WAYS}
    keep_task_weights(ensemble.members, TaskWeights(task, weights, {}, 40, "forty labelled items"))


def events(ensemble, **options):
    return list(ensemble.stream("Which pet?", schema=PETS, **options))


def test_the_members_score_the_options_in_one_step_and_the_tasks_weights_decide():
    with pets() as ensemble:
        lean(ensemble, "shelter", "b")
        lean(ensemble, "cattery", "a")
        for task, answer in (("shelter", "dog"), ("cattery", "cat")):
            start, round_, final = events(ensemble, task=task)
            assert isinstance(round_, RoundEvent) and round_.decision == "options" and final.rounds == 1
            assert final.parsed == answer and final.finish_reason == "eos" and final.text == f'"{answer}"'
            assert round_.author == ("b" if answer == "dog" else "a")
            assert set(round_.candidates[0].scores) == {"asked:a", "asked:b", "scored:a", "scored:b"}
            assert [c.text for c in round_.candidates] == ['"cat"', '"dog"']
            chosen = next(c for c in round_.candidates if c.text == final.text)
            assert final.confidence == pytest.approx(chosen.combined) and final.confidence > 0.5
            assert start.weights[round_.author] == pytest.approx(0.9) and final.weights == start.weights
            assert start.weights_from and final.confidence_from == CONFIDENCE_FROM and final.drafters_per_round == 0
            assert final.tokens == round_.answer_tokens >= 1 and all(c.ended is True for c in round_.candidates)
            firsts = [max(range(2), key=lambda i: round_.candidates[i].shares[n]) for n in round_.candidates[0].shares]
            assert round_.agreement == pytest.approx(firsts.count(["cat", "dog"].index(answer)) / len(firsts))
            assert all(s <= 0 for c in round_.candidates for s in c.scores.values())  # log-probabilities, summed
            assert f"task {task!r}" in start.notes[0] and "forty labelled items" in start.notes[0]
            assert start.weights_from == "task" and start.calibrated_items == 40
            assert start.weights_origin == "the task's weights, fitted on 40 labelled items"
        assert all(m.model.decodes > 0 for m in ensemble.members)
        assert round_.candidates[0].model == "a" and all(c.option for c in round_.candidates)  # a argued for cat
        assert [candidate_label(c) for c in round_.candidates] == ['"cat"', '"dog"']  # each option by its text
        said = explain(round_)
        assert said.startswith('Round 1: "cat" was the option the members\' weighted beliefs favoured')
        assert f"{chosen.combined:.3f} against" in said and 'for "dog"' in said and "Believed most by: a" in said


def test_the_mix_is_the_weighted_mean_of_the_corrected_beliefs():
    with pets() as ensemble:
        prior = {"asked:a": [0.8, 0.2]}
        weights = {"asked:a": 1.0, "asked:b": 2.0, "scored:a": 0.5, "scored:b": 0.5}
        keep_task_weights(ensemble.members, TaskWeights("t", weights, {'["\\"cat\\"", "\\"dog\\""]': prior}, 5, "five"))
        _, round_, final = events(ensemble, task="t")
        scores = {name: [c.scores[name] for c in round_.candidates] for name in weights}
        beliefs = {name: opt.distribution(s) for name, s in scores.items()}
        beliefs["asked:a"] = opt.corrected(beliefs["asked:a"], np.array(prior["asked:a"]))
        mix = opt.mixed(beliefs, weights)
        assert [c.combined for c in round_.candidates] == pytest.approx(list(mix))
        assert [c.shares["asked:a"] for c in round_.candidates] == pytest.approx(list(beliefs["asked:a"]))
        assert final.confidence == pytest.approx(mix.max())


def test_without_weights_for_the_task_it_takes_the_choices_weights_then_counts_every_source_equally():
    with pets() as ensemble:
        start, round_, _ = events(ensemble, task="unseen")
        assert "uniform" in start.notes[0] and start.weights == pytest.approx({"a": 0.5, "b": 0.5})
        assert start.weights_origin == "every source equally (no weights kept for the task)"
        assert round_.runner_up != round_.text and round_.margin == 0.0  # a tie: the runner-up is the other one
        lean(ensemble, "choices", "b")
        start, _, final = events(ensemble, task="unseen")
        assert final.parsed == "dog" and start.weights["b"] == pytest.approx(0.9)
        assert task_weights(ensemble.members, "unseen").task == "choices"


def test_weights_kept_without_labelled_items_are_the_tasks_not_uniform():
    with pets() as ensemble:  # demo-1.5b's choices: its members' weights, no choice task's labels
        keep_task_weights(ensemble.members, TaskWeights("choices", {"asked:b": 3.0, "scored:b": 3.0}, {}, 0, "members"))
        start, _, final = events(ensemble)
        assert final.parsed == "dog" and start.weights_from == "task" and start.calibrated_items == 0
        assert start.weights_origin == "the task's weights (no labels)"


def test_what_is_not_a_choice_or_turns_it_off_is_drafted_and_asked_to_think_it_thinks_first_then_drafts():
    with pets() as ensemble:
        lean(ensemble, "choices", "b")
        for options in ({"score_options": False}, {"schema": {"type": "string"}}):
            asked = {"schema": PETS, **options}
            rounds = [e for e in ensemble.stream("Which pet?", **asked) if isinstance(e, RoundEvent)]
            assert rounds and all(r.decision != "options" for r in rounds), options
        rounds = [e for e in ensemble.stream("Which pet?", schema=PETS, think=True) if isinstance(e, RoundEvent)]
        assert rounds and all(r.decision != "options" for r in rounds)  # thought, then drafted (choice points off)
        asked = {"schema": PETS, "think": True, "choice_points": True}
        rounds = [e for e in ensemble.stream("Which pet?", **asked) if isinstance(e, RoundEvent)]
        thought = [r for r in rounds if r.phase == "reasoning"]
        assert thought and all(r.decision != "options" for r in thought)  # the thinking is drafted
        forced, chosen = [r for r in rounds if r.phase == "answer"]  # then the options scored in its context
        assert (forced.decision, forced.text) == ("forced", '"')  # the quote both options begin with
        assert (
            chosen.decision == "options"
            and chosen.text == 'dog"'
            and set(chosen.candidates[0].scores) == {"asked:a", "asked:b"}
        )
        continued = [{"role": "user", "content": "Which pet?"}, {"role": "assistant", "content": '"d'}]
        rounds = [e for e in ensemble.stream(continued, schema=PETS) if isinstance(e, RoundEvent)]
        assert all(r.decision != "options" for r in rounds)


def test_a_bad_task_name_is_a_setting_error_and_the_next_answer_is_given():
    with pets() as ensemble:
        with pytest.raises(SettingError) as caught:
            ensemble.prepare("Which pet?", schema=PETS, task="no spaces")
        assert caught.value.field == "task" and "letters, digits" in str(caught.value)
        assert ensemble.generate("Which pet?", schema=PETS).parsed in ("cat", "dog")


def test_a_prompt_that_leaves_no_room_for_the_longest_option_is_refused_before_it_runs():
    """It passes the rounds' check (a round of 2-token segments fits); a whole option does not."""
    long_words = {"enum": ["x" * 150, "y" * 150]}
    with fake_ensemble(fake_member("a", '"x"', n_ctx=2000), fake_member("b", '"y"', n_ctx=2000)) as ensemble:
        listed = len(ensemble.prepare("Which?", schema=long_words, segment_tokens=2).prompts["a"])
        longest = len(ensemble.members[0].model.tokenize('"' + "x" * 150 + '"'))
        for member in ensemble.members:
            member.model.n_ctx = listed + 60
        with pytest.raises(PromptTooLong, match=r"with the options listed .* no room for its longest option") as caught:
            ensemble.prepare("Which?", schema=long_words, max_tokens=8, segment_tokens=2)
        assert str(caught.value).endswith("raise n_ctx in models.toml or shorten the conversation or the options")
        for member in ensemble.members:
            member.model.n_ctx = listed + longest  # exactly room for it
        assert ensemble.prepare("Which?", schema=long_words, max_tokens=8, segment_tokens=2).options is not None
        assert ensemble.generate("Which?", schema={"enum": ["x", "y"]}, max_tokens=8).parsed in ("x", "y")


def test_a_cancelled_answer_among_options_ends_cancelled_with_no_text():
    with pets() as ensemble:
        stream = ensemble.stream("Which pet?", schema=PETS)
        stream.cancel()
        final = stream.final()
        assert final.finish_reason == "cancelled" and final.text == "" and final.confidence is None


def test_a_member_lost_while_scoring_is_left_out_and_the_others_choose():
    def lost_after_the_prompt(model, _rows):
        if model.decodes == 2:  # its prompt is read; the options' scoring finds it gone
            model.lose("its worker process ended")

    members = fake_member("a", '"cat"', on_decode=lost_after_the_prompt), fake_member("b", '"dog"')
    with fake_ensemble(*members) as ensemble:
        lean(ensemble, "choices", "a")
        _, round_, final = events(ensemble)
        assert final.parsed == "dog" and "a" in final.lost and "a" in round_.lost
        assert set(round_.candidates[0].scores) == {"asked:b", "scored:b"}


def test_task_weights_are_kept_per_ensemble_and_task_and_a_damaged_file_is_one_line(tmp_path):
    with pets() as ensemble:
        lean(ensemble, "t1", "a")
        lean(ensemble, "t2", "b")
        lean(ensemble, "t1", "b")  # replaces the first
        kept = task_weights(ensemble.members, "t1")
        assert kept is not None and kept.weights["asked:b"] == 9.0 and task_weights(ensemble.members, "t2")
        text = (tmp_path / "data" / "option_weights.json").read_text()
        assert key_of(ensemble.members) in text and text.startswith('[\n {\n  "key"')  # a file a person can read
        (tmp_path / "data" / "option_weights.json").write_text('[{"key": 1}]')
        with pytest.raises(SpecemError, match=r"task weights in .*option_weights.json are damaged .* delete it"):
            task_weights(ensemble.members, "t1")


# -- specem run --choices -------------------------------------------------------------------------
@pytest.fixture
def cli_members(monkeypatch):
    """The ensemble ``specem run`` loads: ``a`` would answer "cat", ``b`` "dog", ``b`` believed."""

    def from_config(cls, config=None, **overrides):
        ensemble = fake_ensemble(fake_member("a", '"cat"'), fake_member("b", '"dog"'))
        lean(ensemble, "choices", "b")
        return ensemble

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))


def test_run_choices_prints_the_option_itself_and_how_sure(cli_members, capsys):
    code = main(["run", "--choices", "cat, dog", "Which pet?"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == "dog\n" and "[confidence 0." in err


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--choices", "cat"], "give two or more options"),
        (["--choices", "cat,,dog"], "give two or more options"),
        (["--choices", "cat,cat"], "an option is given twice"),
        (["--choices", "cat,dog", "--schema", "SCHEMA"], "give --choices or --schema, not both"),
        (["--choices", "cat,dog", "--format", "json"], "give --choices or --format json, not both"),
        (["--choices", "cat,dog", "--regex", "cat|dog"], "give --choices or --regex, not both"),
        (["--choices", "cat,dog", "--grammar", "SCHEMA"], "give --choices or --grammar, not both"),
        (["--choices", "cat,dog", "--tools", "SCHEMA"], "give --choices or --tools, not both"),
    ],
)
def test_bad_choices_are_one_line_before_any_model_loads(cli_members, capsys, monkeypatch, tmp_path, arguments, said):
    (tmp_path / "schema.json").write_text('{"type": "string"}')
    arguments = [str(tmp_path / "schema.json") if a == "SCHEMA" else a for a in arguments]
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda *_, **__: pytest.fail("a model was loaded")))
    code = main(["run", *arguments, "Which pet?"])
    _, err = capsys.readouterr()
    assert code == 2 and said in err and err.count("\n") == 1


def test_calibrate_task_fits_the_weights_that_the_next_answer_of_the_task_uses(monkeypatch, capsys, tmp_path):
    """``a`` says cat, ``b`` dog; the labels say dog: the fit believes ``b``, the task's answers follow."""
    ensembles = []

    def from_config(cls, config=None, **overrides):
        members = fake_member("a", '"cat"', n_params=5000), fake_member("b", '"dog"')
        ensembles.append(fake_ensemble(*members, **{k: v for k, v in overrides.items() if v is not None}))
        return ensembles[-1]

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))
    items = tmp_path / "pets.jsonl"
    both_orders = '{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}\n'
    both_orders += '{"question": "Which pet?", "choices": ["dog", "cat"], "answer": "A"}\n'
    items.write_text(both_orders * 4)  # the same options in both orders: no source leans to a position
    assert main(["calibrate", str(items), "--task", "pets", "--limit", "8"]) == 0
    out, err = capsys.readouterr()
    assert "task 'pets': weights fitted on 8 items" in out and "8/8 right on these items" in out
    table = [line.split() for line in out.splitlines() if line.startswith(("SOURCE", "asked:", "scored:"))]
    assert table == [  # each source alone on the items, the heaviest first
        ["SOURCE", "(WAY:MODEL)", "RIGHT", "ALONE", "WEIGHT"],
        ["asked:b", "8/8", "0.623"], ["scored:a", "4/8", "0.147"], ["scored:b", "4/8", "0.147"],
        ["asked:a", "0/8", "0.083"],
    ]  # fmt: skip
    assert "warning" not in err  # 8 of 8: guessing does it 1 time in 256
    kept = task_weights(ensembles[0].members, "pets")
    assert kept is not None and kept.items == 8 and kept.weights["asked:b"] > kept.weights["asked:a"]
    assert kept.fitted_on == "8 labelled items of pets.jsonl"
    assert main(["run", "--choices", "cat,dog", "--task", "pets", "Which pet?"]) == 0
    assert capsys.readouterr().out == "dog\n"
    assert main(["run", "--choices", "cat,dog", "Which pet?"]) == 0  # another task: the uniform mix, a tie
    assert capsys.readouterr().out == "cat\n"


def test_calibrate_task_says_when_the_fit_is_no_better_than_guessing(monkeypatch, capsys, tmp_path):
    """``a`` always says cat, ``b`` dog, and the labels are half cat, half dog in the same order:
    no source knows, the fit is right 4 of 8, as guessing is more often than not."""
    members = fake_member("a", '"cat"'), fake_member("b", '"dog"')
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda *_, **__: fake_ensemble(*members)))
    items = tmp_path / "coins.jsonl"
    half = '{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "A"}\n'
    half += '{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}\n'
    items.write_text(half * 4)
    assert main(["calibrate", str(items), "--task", "coins", "--limit", "8"]) == 0
    out, err = capsys.readouterr()
    assert "4/8 right on these items" in out
    assert "guessing gets 4.0 of these 8 right on average, and 4 or more 64% of the time" in err
    said = "no member is shown to know this task, so these weights are fitted to chance "
    said += "(give more items, or other models)\n"
    assert err.endswith(said)


def test_calibrate_task_warns_below_one_chance_in_twenty_not_only_near_a_coin(monkeypatch, capsys, tmp_path):
    """``b`` says dog and dog is right on 6 of 8: guessing does as well 14% of the time, which is
    still no evidence (the warning's line is 5%, not 50%)."""
    members = fake_member("a", '"cat"'), fake_member("b", '"dog"')
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda *_, **__: fake_ensemble(*members)))
    items = tmp_path / "mostly.jsonl"
    dog = '{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "B"}\n'
    dog += '{"question": "Which pet?", "choices": ["dog", "cat"], "answer": "A"}\n'
    cat = '{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "A"}\n'
    items.write_text(dog * 3 + cat * 2)
    assert main(["calibrate", str(items), "--task", "mostly", "--limit", "8"]) == 0
    out, err = capsys.readouterr()
    assert "6/8 right on these items" in out and "and 6 or more 14% of the time" in err


def test_calibrate_task_refuses_an_item_whose_options_repeat_before_any_model_loads(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda *_, **__: pytest.fail("a model was loaded")))
    items = tmp_path / "twice.jsonl"
    items.write_text('{"question": "Which pet?", "choices": ["cat", "dog"], "answer": "A"}\n'
                     '{"question": "Which pet?", "choices": ["cat", "cat"], "answer": "A"}\n')  # fmt: skip
    assert main(["calibrate", str(items), "--task", "twice"]) == 1
    assert "--task twice: item 2's choices are not options every member can score" in capsys.readouterr().err


def test_calibrate_task_needs_items_with_choices(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda *_, **__: pytest.fail("a model was loaded")))
    items = tmp_path / "sums.jsonl"
    items.write_text('{"question": "2+2?", "answer": "4"}\n')
    assert main(["calibrate", str(items), "--task", "sums"]) == 1
    assert "fitted on items with choices and a letter answer" in capsys.readouterr().err


def test_every_member_lost_while_scoring_is_no_member_left_and_the_next_answer_brings_them_back():
    def lost_after_the_prompt(model, _rows):
        if model.decodes == 2:
            model.lose("its worker process ended")

    members = [fake_member(n, f'"{w}"', on_decode=lost_after_the_prompt) for n, w in (("a", "cat"), ("b", "dog"))]
    with fake_ensemble(*members) as ensemble:
        with pytest.raises(NoMemberLeft, match=r"every member was lost .*a: its worker process ended"):
            ensemble.generate("Which pet?", schema=PETS)
        assert ensemble.generate("Which pet?", schema=PETS).parsed in ("cat", "dog")


def test_without_reusing_the_prompt_each_option_is_scored_from_a_cleared_memory_and_the_same(monkeypatch):
    with pets() as ensemble:
        cleared = []
        for member in ensemble.members:
            clear = member.model.clear
            monkeypatch.setattr(member.model, "clear", lambda clear=clear: (cleared.append(1), clear())[1])
        _, reused, _ = events(ensemble)
        _, again, _ = events(ensemble)
        assert cleared == []  # the same prompt again: its cells are reused
        _, fresh, _ = events(ensemble, reuse_prompt=False)
        assert len(cleared) == 4  # each member's memory cleared before each of its two prompts
    assert (
        [c.scores for c in fresh.candidates]
        == [c.scores for c in reused.candidates]
        == [c.scores for c in again.candidates]
    )


def test_only_an_answer_asked_with_a_schema_of_a_few_values_is_a_choice():
    settings = EnsembleSettings()
    assert choice_among(None, settings, False, False) is None
    assert choice_among(output_format_from(json_object=True), settings, False, False) is None
    assert choice_among(output_format_from(PETS), settings, False, False).texts == ('"cat"', '"dog"')


def test_a_step_abandoned_while_scoring_ends_the_answer_cancelled_and_the_next_is_answered():
    def abandoned_after_the_prompt(model, _rows):
        if model.decodes == 2:  # a cancel stopped waiting for a remote member's step
            raise StepAbandoned("stopped waiting for a on 127.0.0.1")

    members = fake_member("a", '"cat"', on_decode=abandoned_after_the_prompt), fake_member("b", '"dog"')
    with fake_ensemble(*members) as ensemble:
        final = ensemble.stream("Which pet?", schema=PETS).final()
        assert final.finish_reason == "cancelled" and final.text == "" and final.confidence is None
        assert final.rounds == 0 and final.tokens == 0 and final.wins == {} and final.first_segment_seconds is None
        assert ensemble.generate("Which pet?", schema=PETS).parsed in ("cat", "dog")


def test_what_the_request_serves_only_approximately_is_said_before_the_options_note():
    with pets() as ensemble:
        start, _, final = events(ensemble, stop=["a"])
        assert len(start.notes) == 2 and "stop" in start.notes[0] and start.notes[1].startswith("every member scored")
        assert final.text in ('"cat"', '"dog"')  # the stop string never cuts an option


def test_the_options_round_and_the_final_say_what_was_done_and_how_long_it_took():
    with pets() as ensemble:
        lean(ensemble, "choices", "b")
        _, round_, final = events(ensemble)
        assert round_.drafters == () and round_.draft_seconds == {} and round_.draft_tokens == {}
        assert round_.verify_seconds == {"a": 0.0, "b": 0.0} and round_.logprobs == ()  # not asked
        assert 0 <= round_.seconds <= final.seconds < 60 and final.first_segment_seconds == round_.seconds
        combined = [c.combined for c in round_.candidates]
        assert round_.runner_up == '"cat"' and round_.sure == final.confidence == combined[1]
        assert round_.margin == pytest.approx(combined[1] - combined[0])
        assert round_.answer_tokens == final.tokens == len(ensemble.members[1].model.tokenize('"dog"')) > 1
        assert final.wins == {"b": 1} and final.rounds == 1 and final.plain_generation is False
        assert final.unsure is False and final.confidence_from == CONFIDENCE_FROM
        assert events(ensemble, abstain_below=final.confidence)[-1].unsure is False  # unsure only below it
        assert events(ensemble, abstain_below=min(final.confidence + 0.01, 1.0))[-1].unsure is True
    with fake_ensemble(fake_member("a", '"cat"')) as alone:
        _, round_, final = list(alone.stream("Which pet?", schema=PETS))
        assert round_.decision == "options" and final.plain_generation is True


def test_an_answer_left_after_its_options_round_ends_cancelled_saying_what_was_done_and_nothing_sure():
    with pets() as ensemble:
        lean(ensemble, "choices", "b")
        stream = ensemble.stream("Which pet?", schema=PETS, abstain_below=1.0)
        round_ = next(e for e in stream if isinstance(e, RoundEvent))
        stream.close()  # the reader left before the final event
        final = stream.final()
        assert final.finish_reason == "cancelled" and final.text == "" and final.rounds == 1
        assert final.confidence is None and final.confidence_from == "" and final.unsure is False
        assert final.wins == {"b": 1} and final.tokens == round_.answer_tokens
        assert final.first_segment_seconds == round_.seconds


def test_the_option_vote_credits_each_option_to_the_member_whose_weighted_belief_argued_most_for_it():
    scores = {"asked:a": [-1.0, -2.0], "asked:b": [-9.0, -0.1], "scored:c": [-5.0, -0.1]}
    chosen = option_vote(('"x"', '"y"'), scores, {}, {"asked:a": 1.0, "asked:b": 0.5})  # c has no weight
    assert [c.model for c in chosen.candidates] == ["a", "b"] and chosen.author == "b"
    assert chosen.ranked_first_by == ("b", "c") and chosen.agreement == pytest.approx(2 / 3)


def test_a_member_scores_each_continuation_as_the_sum_of_its_tokens_log_probabilities():
    with pets() as ensemble:
        member = ensemble.members[0]
        member.start(member.model.tokenize("Which pet? "))
        summed, lengths, scored = scored_here(member, ('"cat"', '"dog"'))
        assert (
            lengths == [len(member.model.tokenize('"cat"')), len(member.model.tokenize('"dog"'))] and min(lengths) > 1
        )
        assert summed == pytest.approx([scored.scores[0] * lengths[0], scored.scores[1] * lengths[1]])
        assert scored.candidate_tokens[0] == member.model.tokenize('"cat"')


def test_the_sources_weights_are_the_tasks_for_the_ways_asked_uniform_when_none_and_only_their_priors():
    with pets() as ensemble:
        options = opt.options_in(PETS)
        weights, priors, said, items = source_weights(ensemble.members, "unseen", options, ("asked",))
        assert weights == {"asked:a": 0.5, "asked:b": 0.5} and priors == {} and "uniform" in said and items is None
        kept = {opt.LABELS: [0.6, 0.4], "asked:a": [0.7, 0.3], "asked:zz": [0.5, 0.5]}
        keep_task_weights(ensemble.members, TaskWeights("t", {"asked:a": 2.0}, {options.key: kept}, 9, "nine"))
        weights, priors, said, items = source_weights(ensemble.members, "t", options, ("asked",))
        assert weights == {"asked:a": 2.0, "asked:b": 0.0} and "nine" in said and items == 9
        assert set(priors) == {opt.LABELS, "asked:a"}  # a member not in the answer keeps its prior to itself
        keep_task_weights(ensemble.members, TaskWeights("z", {"asked:zz": 2.0, "asked:a": 0.0}, {}, 9, "nine"))
        weights, _, said, _ = source_weights(ensemble.members, "z", options, ("asked", "scored"))
        assert weights == {name: 0.25 for name in ("asked:a", "scored:a", "asked:b", "scored:b")} and "uniform" in said


def test_an_answer_among_options_reserves_the_cells_its_scoring_takes_not_max_tokens():
    with pets() as ensemble:
        request = ensemble.prepare("Which pet?", schema=PETS, max_tokens=100_000)
        plan = request.options
        assert plan is not None
        options = [len(ensemble.members[0].model.tokenize(text)) for text in plan.options.texts]
        longer = max(len(request.prompts["a"]), len(plan.plain["a"]))
        assert request.cells == plan.cells == longer + sum(options) < 1_000  # every option at once on the prompt
        drafted = ensemble.prepare("Which pet?", schema={"type": "string"}, max_tokens=300)
        assert drafted.options is None and drafted.cells > 300  # a drafted answer reserves its max_tokens


def test_logprobs_asked_of_an_answer_among_options_are_the_option_whole_and_the_likeliest_beside_it():
    with pets() as ensemble:
        lean(ensemble, "choices", "b")
        _, round_, _ = events(ensemble, logprobs=1)
        combined = {c.text: c.combined for c in round_.candidates}
        [entry] = round_.logprobs
        assert entry.token == '"dog"' and entry.bytes == tuple(b'"dog"')
        assert entry.logprob == pytest.approx(math.log(combined['"dog"'])) and combined['"dog"'] > combined['"cat"']
        assert entry.top == (('"dog"', entry.logprob, tuple(b'"dog"')),)  # top 1: the likeliest only
        _, round_, _ = events(ensemble, logprobs=5)
        top = round_.logprobs[0].top  # every option, likeliest first, as many as there are
        assert [t[0] for t in top] == ['"dog"', '"cat"']
        assert [t[1] for t in top] == pytest.approx([math.log(combined['"dog"']), math.log(combined['"cat"'])])
        assert events(ensemble, logprobs=0)[1].logprobs[0].top == ()


def test_the_start_of_an_answer_among_options_says_who_answers_and_a_cancel_before_scoring_ends_it():
    import threading

    from specem_local.engine.option_answers import OptionsLoop
    from specem_local.events import FinalEvent, StartEvent

    with pets() as ensemble:
        request = ensemble.prepare("Which pet?", schema=PETS)
        start = events(ensemble)[0]
        assert isinstance(start, StartEvent) and start.models == ("a", "b") and start.drafters == ()
        assert start.prompt_tokens == {name: len(request.prompts[name]) for name in ("a", "b")}
        assert start.plain_generation is False and start.absent == {}
        alone = ensemble.prepare("Which pet?", schema=PETS, models=["a"])
        assert next(iter(ensemble.stream(alone))).plain_generation is True
        cancel = threading.Event()
        cancel.set()
        loop = OptionsLoop(request, ensemble.members, cancel, lambda settings, f, items: [f(i) for i in items],
                           {"c": "gone"})  # fmt: skip
        begun, final = list(loop.run())
        assert isinstance(begun, StartEvent) and begun.absent == {"c": "gone"}
        assert isinstance(final, FinalEvent) and final.finish_reason == "cancelled" and final.text == ""
