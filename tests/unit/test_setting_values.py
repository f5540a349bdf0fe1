"""Every setting refuses what it cannot take where the value enters (models.toml, a flag, the
API, a request), with one line naming the setting and its range: NaN and infinities (TOML and
JSON have them, and NaN passes every range comparison), seeds below 0 or past 2^64, numbers
too large for a float, lone surrogates and empty stop strings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specem_local.errors import SettingError, SpecemError
from specem_local.models.config import parse_config
from specem_local.setting_fields import describe
from specem_local.settings import EnsembleSettings, LoadSettings, with_overrides

FLOATS = [item.name for item in describe(EnsembleSettings) if item.kind == "float"]
INTS = [item.name for item in [*describe(EnsembleSettings), *describe(LoadSettings)] if item.kind == "int"]


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400])
def test_no_float_setting_takes_a_non_finite_value(name, value):
    with pytest.raises(SettingError, match=rf"^{name} must be a finite number") as caught:
        with_overrides(EnsembleSettings(), **{name: value})
    assert caught.value.field == name and "\n" not in str(caught.value)
    with pytest.raises(SettingError):
        EnsembleSettings(**{name: value})  # built in Python, as the API does


@pytest.mark.parametrize("name", INTS)
def test_every_integer_setting_has_an_upper_bound(name):
    cls = EnsembleSettings if name in {i.name for i in describe(EnsembleSettings)} else LoadSettings
    with pytest.raises(SettingError, match=rf"{name} must be"):
        cls(**{name: 10**30})


@pytest.mark.parametrize("seed", [-1, -5, 2**64, 2**80])
def test_a_seed_is_a_non_negative_integer_below_two_to_the_64(seed):
    with pytest.raises(SettingError, match=r"seed must be in \[0, 2\^64\); got") as caught:
        with_overrides(EnsembleSettings(), seed=seed)
    assert caught.value.field == "seed"


def test_the_largest_seeds_are_taken():
    assert with_overrides(EnsembleSettings(), seed=2**64 - 1).seed == 2**64 - 1
    assert EnsembleSettings(seed=0).seed == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+inf"])
def test_models_toml_nan_and_inf_are_one_line_errors(value):
    text = f'[ensemble]\ntemperature = {value}\n[[models]]\nname = "a"\npath = "a.gguf"\n'
    message = r"^models.toml \[ensemble\]: temperature must be a finite number in \[0, 100\]"
    with pytest.raises(SettingError, match=message):
        parse_config(text, "models.toml", Path("/configs"))


def test_a_seed_below_zero_in_models_toml_is_refused_before_anything_loads():
    text = '[ensemble]\nseed = -1\n[[models]]\nname = "a"\npath = "a.gguf"\n'
    with pytest.raises(SettingError, match=r"seed must be in \[0, 2\^64\); got -1"):
        parse_config(text, "models.toml", Path("/configs"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"stop": [""]}, "stop cannot hold an empty string"),
        ({"stop": ["ok", "\ud800"]}, "stop is not valid Unicode"),
        ({"system_prompt": "hi \udc00"}, "system_prompt is not valid Unicode"),
        ({"segment_tokens": 0}, r"segment_tokens must be in \[1, 4096\]; got 0"),
        ({"max_tokens": 10**7}, r"max_tokens must be in \[1, 1000000\]"),
        ({"temperature": -0.5}, r"temperature must be in \[0, 100\]"),
        ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
    ],
)
def test_other_values_no_model_can_take(overrides, message):
    with pytest.raises(SettingError, match=message):
        with_overrides(EnsembleSettings(), **overrides)


def test_a_long_value_is_cut_short_in_the_message():
    with pytest.raises(SpecemError) as caught:
        with_overrides(EnsembleSettings(), temperature="x" * 10_000)
    assert len(str(caught.value)) < 200


def test_the_boundaries_themselves_are_taken():
    settings = with_overrides(EnsembleSettings(), temperature=100, segment_tokens=4096, max_tokens=1_000_000, top_p=1)
    assert settings.temperature == 100.0 and settings.segment_tokens == 4096
