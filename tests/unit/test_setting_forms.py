"""A setting as a person types it in a form (the chat app's settings screen: ``Setting.parse``),
a mistyped setting's name in a request (``with_overrides``), every setting's help (what
``--help`` and the settings screen show), a record built in Python and how a range is said, to
the letter."""

from __future__ import annotations

import re

import pytest

from specem_local.errors import SettingError, SpecemError
from specem_local.setting_fields import MAX_DIGITS, Limits, describe
from specem_local.settings import EnsembleSettings, LoadSettings, with_overrides

SETTINGS = {item.name: item for item in describe(EnsembleSettings)}


def test_a_typed_number_is_read_as_the_settings_type_or_refused_in_one_line_naming_the_form():
    assert SETTINGS["max_tokens"].parse(" 42 ", "the form") == 42
    assert SETTINGS["temperature"].parse("0.5", "the form") == 0.5
    assert SETTINGS["pooling"].parse("log", "the form") == "log"
    refusals = [
        ("max_tokens", "1.5", "the form: max_tokens must be a whole number, got '1.5'"),
        ("temperature", "abc", "the form: temperature must be a number, got 'abc'"),
        ("pooling", "bogus", "the form: pooling must be one of linear, log; got 'bogus'"),
    ]
    for name, text, said in refusals:
        with pytest.raises(SettingError, match=f"^{re.escape(said)}$"):
            SETTINGS[name].parse(text, "the form")


def test_a_number_of_exactly_the_longest_length_is_read_and_one_character_more_is_out_of_range():
    longest = "0." + "0" * (MAX_DIGITS - 3) + "1"
    assert len(longest) == MAX_DIGITS and 0 < SETTINGS["temperature"].parse(longest, "the form") < 1e-30
    with pytest.raises(SettingError, match=r"^the form: temperature must be"):
        SETTINGS["temperature"].parse(longest + "1", "the form")


def test_a_mistyped_setting_in_a_request_is_an_unknown_setting_with_the_name_it_meant():
    with pytest.raises(SpecemError, match=r"^unknown setting 'poolng'; did you mean 'pooling'\?$"):
        with_overrides(EnsembleSettings(), poolng="log")
    assert with_overrides(EnsembleSettings(), pooling="log").pooling == "log"  # the next one works


def test_every_setting_says_what_it_does():
    assert all(item.help for item in SETTINGS.values())
    assert "in context" in SETTINGS["choice_points"].help


def test_a_record_built_in_python_names_its_table_in_every_refusal():
    refusals = [
        (lambda: EnsembleSettings(stop="END"), "[ensemble]: stop must be an array of strings, got string 'END'"),
        (lambda: EnsembleSettings(stop=("\ud800",)), "[ensemble]: stop is not valid Unicode"),
        (lambda: LoadSettings(parallel=0), "[ensemble]: parallel must be in [1, 16]; got 0"),
    ]
    for build, said in refusals:
        with pytest.raises(SettingError, match=f"^{re.escape(said)}"):
            build()


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        (Limits(low=0, open_low=True), "above 0"),
        (Limits(low=1), "at least 1"),
        (Limits(high=1, open_high=True), "below 1"),
        (Limits(high=2.5), "at most 2.5"),
        (Limits(low=0, high=1, open_high=True), "in [0, 1)"),
        (Limits(low=1, high=1 << 64, open_low=True), "in (1, 2^64]"),
        (Limits(), ""),
    ],
)
def test_a_range_is_said_as_people_write_it(limits, said):
    assert limits.describe() == said
