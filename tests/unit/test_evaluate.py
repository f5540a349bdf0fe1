import pytest

from specem_local.errors import SpecemError
from specem_local.evaluate import member_systems, parse_variant, summarise


def test_variant_values_are_typed_like_models_toml():
    name, overrides = parse_variant("mix:scoring=logit,feedback=false,learning_rate=0.5,segment_tokens=6")
    assert name == "mix"
    assert overrides == {"scoring": "logit", "feedback": False, "learning_rate": 0.5, "segment_tokens": 6}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("noassignments", "expected NAME:key=value"),
        ("x:segment_token=4", "did you mean 'segment_tokens'?"),
        ("x:seed=abc", "seed must be an integer, got string 'abc'"),
        ("x:feedback=maybe", "feedback must be true or false"),
    ],
)
def test_bad_variants_are_one_line_errors(text, message):
    with pytest.raises(SpecemError, match=message):
        parse_variant(text)


def _record(ensemble: bool, qwen: bool, smol: bool) -> dict:
    def result(correct: bool) -> dict:
        return {"correct": correct, "tokens": 10, "seconds": 1.0, "finish_reason": "eos", "wins": {}}

    return {"systems": {"ensemble": result(ensemble), "qwen": result(qwen), "smol": result(smol)}}


def test_summary_pairs_each_ensemble_with_the_best_member():
    records = [_record(True, False, False)] * 3 + [_record(False, True, False)] * 5 + [_record(True, True, True)] * 2
    report = summarise(records, ["ensemble", "qwen", "smol"], ["qwen", "smol"])
    assert report["qwen"]["correct"] == 7 and report["ensemble"]["correct"] == 5
    assert "vs_best_member" not in report["qwen"]
    paired = report["ensemble"]["vs_best_member"]
    assert paired["baseline"] == "qwen" and paired["items"] == 10
    assert (paired["only_system_correct"], paired["only_baseline_correct"]) == (3, 5)
    assert paired["p_value"] == pytest.approx(0.7265625)


def test_members_are_the_systems_where_only_that_model_won():
    records = [
        {
            "systems": {
                "ensemble": {"wins": {"qwen": 3, "smol": 0}},
                "qwen": {"wins": {"qwen": 5}},
                "smol": {"wins": {}},
            }
        },
        {"systems": {"ensemble": {"wins": {"qwen": 1, "smol": 1}}, "qwen": {"wins": {"qwen": 2}}}},
    ]
    assert member_systems(records) == ["qwen", "smol"]
