import pytest

from specem_local.errors import SpecemError
from specem_local.evaluate import parse_variant


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
