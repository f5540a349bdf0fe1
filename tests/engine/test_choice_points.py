"""Choice points inside a larger answer (issue 56): where the JSON being written reaches a value
its schema allows only a few of, every member scores every option in context and the task's
weights pick it; the rest is drafted as before."""

from __future__ import annotations

import json
import math

import pytest

from specem_local.engine import options as opt
from specem_local.engine.choice_points import (
    Place,
    allowed_options,
    choice_point,
    has_choices,
    schema_at,
    value_path,
)
from specem_local.engine.formats import output_format_from
from specem_local.engine.learned import calibrate
from specem_local.engine.phases import Writing
from specem_local.engine.task_weights import TaskWeights, keep_task_weights
from specem_local.events import RoundEvent
from specem_local.storage.weights import WeightStore
from tests.engine.conftest import fake_ensemble, fake_member

PET = {"enum": ["cat", "dog"]}
ADOPTION = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "pet": PET},
    "required": ["name", "pet"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ("", Place(())),
        ('{"a": ', Place(("a",))),
        ('{"a":', Place(("a",))),
        ('{"a": "x', Place(("a",), '"x')),
        ('{"a": "say \\"hi', Place(("a",), '"say \\"hi')),
        ('{"a": tr', Place(("a",), "tr")),
        ('{"a": {"b": ', Place(("a", "b"))),
        ('{"a": 1, "b": [', Place(("b", 0))),
        ('{"b": ["x", ', Place(("b", 1))),
        ('{"b": [1, 2, ', Place(("b", 2))),
        ('[{"a": 1}, {"c": ', Place((1, "c"))),
        ('{"a\\"b": ', Place(('a"b',))),
        ('{"": ', Place(("",))),
        ('[{"a": "x"}, ', Place((1,))),
        ("[{}, ", Place((1,))),
        ("[[], ", Place((1,))),
        ('{"a": 1 , "b": ', Place(("b",))),
    ],
)
def test_where_a_value_begins_or_is_under_way(text, place):
    assert value_path(text) == place


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "x"',
        '{"a": 1, ',
        '{"a',
        '{"a"',
        '{"a": 1 ',
        '{"a": []',
        '"a" "b"',
        '{"a": 1}}',
        "{:",
        '{"a": 1]x',
        '{"a": "x" y',
        '{"a": "x" y, "b": ',
        "{a",
    ],
)
def test_after_a_value_in_a_key_or_outside_json_no_value_begins(text):
    assert value_path(text) is None


def test_the_schema_of_a_value_is_found_through_properties_items_and_local_references():
    root = {
        "$defs": {"pet": {"$ref": "#/$defs/kind"}, "kind": PET, "loop": {"$ref": "#/$defs/loop"}},
        "properties": {
            "pet": {"$ref": "#/$defs/pet"},
            "pair": {"prefixItems": [{"type": "integer"}, PET], "items": {"type": "string"}},
            "tags": {"items": {"enum": ["x", "y"]}},
            "extra": {"additionalProperties": {"type": "boolean"}, "properties": {}},
            "loop": {"$ref": "#/$defs/loop"},
            "far": {"$ref": "other.json#/kind"},
            "odd": {"$ref": "#/$defs/~1missing"},
        },
    }
    assert schema_at(root, ("pet",)) == PET
    assert schema_at(root, ("pair", 1)) == PET and schema_at(root, ("pair", 0)) == {"type": "integer"}
    assert schema_at(root, ("pair", 2)) == schema_at(root, ("pair", 5)) == {"type": "string"}
    assert schema_at(root, ("tags", 3)) == {"enum": ["x", "y"]}
    assert schema_at(root, ("extra", "any")) == {"type": "boolean"}
    for path in (("loop",), ("far",), ("odd",), ("nowhere",), ("pet", "inside"), ("tags", "key")):
        assert schema_at(root, path) is None, path
    assert schema_at({"$ref": "#/$defs/a", "$defs": {"a": {"items": [PET]}}}, (0,)) is None  # old-style items: not one
    assert schema_at({"$ref": "#/$defs/a", "$defs": {"a": {"properties": {"p": PET}}}}, ("p",)) == PET


def test_a_reference_is_a_json_pointer_with_its_escapes_and_array_indices():
    defs = {"a/b": PET, "c~d": {"enum": [1, 2]}, "list": [{"type": "string"}, {"enum": [True, None]}]}
    root = {"$defs": defs, "properties": {name: {"$ref": ref} for name, ref in (
        ("slash", "#/$defs/a~1b"), ("tilde", "#/$defs/c~0d"), ("second", "#/$defs/list/1"),
        ("past", "#/$defs/list/2"), ("word", "#/$defs/list/x"),
    )}}  # fmt: skip
    assert schema_at(root, ("slash",)) == PET and schema_at(root, ("tilde",)) == {"enum": [1, 2]}
    assert schema_at(root, ("second",)) == {"enum": [True, None]}
    assert schema_at(root, ("past",)) is None and schema_at(root, ("word",)) is None


def test_a_choice_point_is_a_value_of_a_few_options_that_begin_with_what_is_written():
    point = choice_point(ADOPTION, '{"name": "Rex", "pet": ')
    assert point is not None and point.options.texts == ('"cat"', '"dog"') and point.rests == ('"cat"', '"dog"')
    point = choice_point(ADOPTION, '{"pet": "')
    assert point is not None and point.begun == '"' and point.rests == ('cat"', 'dog"')
    three = {"properties": {"size": {"enum": ["small", "smaller", "large"]}}}
    point = choice_point(three, '{"size": "sm')
    assert point is not None and point.rests == ('all"', 'aller"')  # "large" cannot be written any more
    assert choice_point(ADOPTION, '{"pet": "d') is None  # only one is left: the format forces it
    assert choice_point(ADOPTION, '{"name": ') is None  # a string of any text
    assert choice_point({"properties": {"n": {"enum": [1, 12]}}}, '{"n": ') is None  # "1" begins "12"
    assert choice_point({"properties": {"n": {"anyOf": [PET, {"type": "null"}]}}}, '{"n": ') is None
    assert choice_point(ADOPTION, '{"pet": "cat"') is None


def test_a_schema_has_choices_where_any_part_of_it_allows_only_a_few_values():
    assert has_choices(ADOPTION) and has_choices({"prefixItems": [{"type": "string"}, PET]})
    assert has_choices({"anyOf": [{"type": "null"}, {"type": "boolean"}]})  # a boolean is two values
    assert not has_choices({"prefixItems": [{"type": "string"}, {"type": "integer"}]})
    assert not has_choices({"type": "object", "properties": {"name": {"type": "string"}}}) and not has_choices(None)


def test_only_the_options_allowed_are_kept_and_one_left_is_no_choice():
    options = opt.options_in({"enum": ["a", "b", "c"]})
    kept = allowed_options(options, lambda text: text != '"b"')
    assert kept is not None and kept.values == ("a", "c") and kept.texts == ('"a"', '"c"') and kept.words == ("a", "c")
    assert allowed_options(options, lambda text: text == '"a"') is None


@pytest.fixture(autouse=True)
def own_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))


def adopters():
    """``a`` would write the cat, ``b`` the dog; both name it Rex."""
    return fake_ensemble(
        fake_member("a", '{"name": "Rex", "pet": "cat"}'),
        fake_member("b", '{"name": "Rex", "pet": "dog"}'),
        choice_points=True,
    )


def lean(ensemble, toward, task="choices", way="asked"):
    weights = {opt.source(m, w): 9.0 if m == toward and w == way else 1.0 for m in ("a", "b") for w in opt.WAYS}
    keep_task_weights(ensemble.members, TaskWeights(task, weights, {}, 20, "twenty labelled items"))


def rounds_of(ensemble, **asked):
    events = list(ensemble.stream("Which pet, and its name?", **asked))
    return [e for e in events if isinstance(e, RoundEvent)], events[-1]


def test_an_enum_field_among_others_is_scored_by_every_member_and_the_rest_drafted():
    with adopters() as ensemble:
        for toward, pet in (("b", "dog"), ("a", "cat")):
            lean(ensemble, toward)
            rounds, final = rounds_of(ensemble, schema=ADOPTION)
            [chosen] = [r for r in rounds if r.decision == "options"]
            assert chosen.text == f'{pet}"' and chosen.author == toward
            assert [c.text for c in chosen.candidates] == ['cat"', 'dog"'] and all(c.option for c in chosen.candidates)
            assert set(chosen.candidates[0].scores) == {"asked:a", "asked:b"}  # in context: the asked way only
            combined = [c.combined for c in chosen.candidates]
            assert sum(combined) == pytest.approx(1.0) and chosen.sure == pytest.approx(max(combined))
            assert chosen.runner_up == ('cat"' if pet == "dog" else 'dog"') and chosen.ranked_first_by == (toward,)
            assert chosen.margin == pytest.approx(abs(combined[0] - combined[1]))
            assert any(r.decision not in ("options", "forced") for r in rounds)  # the name was drafted
            assert json.loads(final.text) == {"name": "Rex", "pet": pet} and final.finish_reason == "eos"
            assert final.rounds == len(rounds) and final.wins[toward] >= 1
            assert [r.index for r in rounds] == list(range(1, len(rounds) + 1))


def test_the_tasks_weights_decide_and_without_any_each_member_counts_equally():
    with adopters() as ensemble:
        lean(ensemble, "b", task="shelter")
        lean(ensemble, "a", task="cattery")
        assert json.loads(rounds_of(ensemble, schema=ADOPTION, task="shelter")[1].text)["pet"] == "dog"
        assert json.loads(rounds_of(ensemble, schema=ADOPTION, task="cattery")[1].text)["pet"] == "cat"
        lean(ensemble, "b", task="scorers", way="scored")  # b's weight is for the other way: the asked count equally
        rounds, _ = rounds_of(ensemble, schema=ADOPTION, task="scorers")
        [chosen] = [r for r in rounds if r.decision == "options"]
        assert [c.combined for c in chosen.candidates] == pytest.approx([0.5, 0.5])


def test_turned_off_or_free_text_the_value_is_drafted():
    with adopters() as ensemble:
        lean(ensemble, "b")
        for off in ({"score_options": False}, {"choice_points": False}):
            rounds, final = rounds_of(ensemble, schema=ADOPTION, **off)
            assert all(r.decision != "options" for r in rounds) and json.loads(final.text)["pet"] == "cat", off
        rounds, _ = rounds_of(ensemble, schema={"type": "object"})
        assert all(r.decision != "options" for r in rounds)


def test_each_label_of_an_array_is_a_choice_point():
    labels = {"type": "array", "items": PET, "minItems": 2, "maxItems": 2}
    members = fake_member("a", '["cat", "cat"]'), fake_member("b", '["dog", "dog"]')
    with fake_ensemble(*members, choice_points=True) as ensemble:
        lean(ensemble, "b")
        rounds, final = rounds_of(ensemble, schema=labels)
        assert [r.text for r in rounds if r.decision == "options"] == ['dog"', 'dog"']
        assert (
            json.loads(final.text) == ["dog", "dog"] and final.rounds == len(rounds) and final.wins == {"a": 0, "b": 2}
        )


def test_a_member_lost_while_scoring_the_options_leaves_and_the_choice_is_made_without_it():
    with adopters() as ensemble:
        lean(ensemble, "a")
        model = ensemble.members[0].model
        score = model.seq_copy

        def lose_at_the_choice(*args, **kwargs):
            if b"".join(model.pieces[t] for t in model.sequence(0)).endswith(b'"pet": "'):  # at the choice
                model.lose("127.0.0.1:50052 stopped answering")
            return score(*args, **kwargs)

        model.seq_copy = lose_at_the_choice
        rounds, final = rounds_of(ensemble, schema=ADOPTION)
        [chosen] = [r for r in rounds if r.decision == "options"]
        assert set(chosen.candidates[0].scores) == {"asked:b"} and chosen.text == 'dog"'  # a's lean went with it
        assert final.lost == {"a": "127.0.0.1:50052 stopped answering"} and json.loads(final.text)["pet"] == "dog"


def test_a_member_that_only_drafts_does_not_score_the_options_yet_follows_the_choice():
    members = (
        fake_member("a", '{"name": "Rex", "pet": "cat"}'),
        fake_member("b", '{"name": "Rex", "pet": "dog"}'),
        fake_member("c", '{"name": "Rex", "pet": "cat"}', role="draft"),
    )
    with fake_ensemble(*members, choice_points=True) as ensemble:
        lean(ensemble, "b")
        rounds, final = rounds_of(ensemble, schema=ADOPTION)
        [chosen] = [r for r in rounds if r.decision == "options"]
        assert set(chosen.candidates[0].scores) == {"asked:a", "asked:b"} and chosen.text == 'dog"'
        assert json.loads(final.text)["pet"] == "dog" and final.finish_reason == "eos"
        committed = ensemble.members[2].model.tokenize(final.text)
        assert ensemble.members[2].tokens[-len(committed) :] == committed  # the drafter holds the answer as chosen


PET_ONLY = {"type": "object", "properties": {"pet": PET}, "required": ["pet"], "additionalProperties": False}


def pet_owners():
    return fake_ensemble(fake_member("a", '{"pet": "cat"}'), fake_member("b", '{"pet": "dog"}'), choice_points=True)


def test_the_choice_rounds_event_and_final_say_what_it_was_and_how_sure_and_count_its_tokens_and_wins():
    with pet_owners() as ensemble:
        lean(ensemble, "b")
        rounds, final = rounds_of(ensemble, schema=PET_ONLY)
        assert [r.decision for r in rounds] == ["forced", "options", "forced"]
        chosen = rounds[1]
        assert chosen.drafters == () and chosen.draft_seconds == {} and chosen.draft_tokens == {}
        assert set(chosen.verify_seconds) == {"a", "b"} and all(s >= 0 for s in chosen.verify_seconds.values())
        firsts = [max(range(2), key=lambda i: chosen.candidates[i].shares[n]) for n in ("asked:a", "asked:b")]
        assert chosen.agreement == pytest.approx(firsts.count(1) / 2)
        writer = ensemble.members[1].model
        assert chosen.answer_tokens - rounds[0].answer_tokens == len(writer.tokenize('dog"'))
        assert final.tokens == rounds[-1].answer_tokens and final.wins == {"a": 0, "b": 1}
        assert final.text == '{"pet": "dog"}' and final.confidence is not None  # the only evidence is the choice's
        assert final.evidence["least_margin"] == pytest.approx(chosen.margin)
        assert final.evidence["mean_agreement"] == pytest.approx(chosen.agreement)
        assert final.evidence["least_logprob"] == pytest.approx(math.log(chosen.sure))


def test_each_verifier_adopts_the_chosen_options_scored_cells_instead_of_decoding_it_again(monkeypatch):
    with pet_owners() as ensemble:
        lean(ensemble, "b")
        commits = []
        for member in ensemble.members:
            original = member.commit

            def spy(winner, text, own, scored, original=original, name=member.name):
                commits.append((name, winner, text, scored))
                return original(winner, text, own, scored)

            monkeypatch.setattr(member, "commit", spy)
        rounds_of(ensemble, schema=PET_ONLY)
        chosen = [(name, winner, scored) for name, winner, text, scored in commits if text == 'dog"']
        assert [name for name, _, _ in chosen] == ["a", "b"]
        assert all(winner == 1 and scored is not None and 1 in scored.seq_of for _, winner, scored in chosen)


def test_a_member_lost_while_committing_the_choice_leaves_and_the_answer_keeps_it_once(monkeypatch):
    with adopters() as ensemble:
        lean(ensemble, "b")
        first = ensemble.members[0]
        original = first.commit

        def lost_at_the_choice(winner, text, own, scored):
            if text == 'dog"':
                first.model.lose("127.0.0.1:50052 stopped answering")
            return original(winner, text, own, scored)

        monkeypatch.setattr(first, "commit", lost_at_the_choice)
        rounds, final = rounds_of(ensemble, schema=ADOPTION)
        assert [r.text for r in rounds if r.decision == "options"] == ['dog"']
        assert json.loads(final.text) == {"name": "Rex", "pet": "dog"} and final.lost == {
            "a": "127.0.0.1:50052 stopped answering"
        }


def test_the_answers_phase_offers_only_the_options_its_matcher_allows_and_no_choice_for_one(monkeypatch):
    three = {"type": "object", "properties": {"size": {"enum": ["s", "m", "l"]}}, "required": ["size"]}
    phase = Writing(output_format_from(three), "")
    assert phase.choices("") is None  # nothing written: the value that begins is the object
    phase.commit('{"size": ')
    point = phase.choices('{"size": ')
    assert point is not None and point.rests == ('"s"', '"m"', '"l"')
    allowed = {'"s"', '"l"'}
    monkeypatch.setattr(phase.matcher, "accepts", lambda text, ended: text in allowed and ended is False)
    point = phase.choices('{"size": ')
    assert point is not None and point.rests == ('"s"', '"l"') and point.begun == ""
    allowed = {'"m"'}
    assert phase.choices('{"size": ') is None
    assert Writing(output_format_from(json_object=True), "").choices("{") is None  # no schema: no options
    assert Writing(None, "").choices("{") is None  # no format at all


def test_with_model_exit_the_members_that_stopped_drafting_keep_up_and_score_the_choice(tmp_path):
    """Seen on the demo trio: only Qwen drafts from the first round, and the others, not keeping up
    with an answer no one would judge again, had nothing to score the options after."""
    store = WeightStore(tmp_path / "specem.db")
    members = fake_member("a", '{"name": "Rex", "pet": "cat"}'), fake_member("b", '{"name": "Rex", "pet": "dog"}')
    with fake_ensemble(*members, weight_store=store, model_exit=True, choice_points=True) as ensemble:
        calibrate(store, ensemble.members, ensemble.settings, {"a": 0, "b": 20}, 20)
        lean(ensemble, "b")
        events = list(ensemble.stream("Which pet, and its name?", schema=ADOPTION))
        [chosen] = [e for e in events if isinstance(e, RoundEvent) and e.decision == "options"]
        assert events[0].drafters == ("a",) and set(chosen.candidates[0].scores) == {"asked:a", "asked:b"}
        assert json.loads(events[-1].text) == {"name": "Rex", "pet": "dog"}
        before = ensemble.members[1].model.decodes
        final = ensemble.generate("Name a pet.", schema={"type": "object", "properties": {"name": {"type": "string"}}})
        assert final.finish_reason == "eos" and ensemble.members[1].model.decodes == before  # no choice: b sits out
        assert ensemble.generate("Which pet?", schema=ADOPTION, choice_points=False).finish_reason == "eos"
        assert ensemble.members[1].model.decodes == before  # choice points off: b sits out too


def test_a_format_that_is_no_schema_has_no_choice_points():
    with adopters() as ensemble:
        assert ensemble.generate("Which pet?", regex="(cat|dog)").text in ("cat", "dog")
        assert output_format_from(regex="(cat|dog)").schema is None
        assert output_format_from(json_object=True).schema is None
        assert output_format_from(schema=PET).schema == PET


def test_choice_points_are_off_by_default_and_the_value_is_drafted():
    """Measured worse than drafting the field (docs/choices.md): a request must ask for them."""
    with fake_ensemble(fake_member("a", '{"pet": "cat"}'), fake_member("b", '{"pet": "dog"}')) as ensemble:
        lean(ensemble, "b")
        rounds, final = rounds_of(ensemble, schema=PET_ONLY)
        assert rounds and all(r.decision != "options" for r in rounds)
        assert json.loads(final.text)["pet"] in ("cat", "dog")
