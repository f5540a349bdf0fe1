from pathlib import Path

import pytest

from specem_local.errors import SpecemError
from specem_local.models.config import find_config_path, load_config, parse_config
from specem_local.settings import EnsembleSettings, with_overrides

GOOD = """
[ensemble]
segment_tokens = 8
temperature = 1
stop = ["\\n\\n"]

[[models]]
name = "a"
path = "models/a.gguf"

[[models]]
name = "b"
hf = "owner/repo"
file = "b.gguf"
role = "verify"
"""


def parse(text: str):
    return parse_config(text, "models.toml", Path("/configs"))


def test_full_config_parses_into_frozen_dataclasses():
    config = parse(GOOD)
    assert config.ensemble.segment_tokens == 8
    assert config.ensemble.temperature == 1.0 and isinstance(config.ensemble.temperature, float)
    assert config.ensemble.stop == ("\n\n",)
    assert [m.name for m in config.models] == ["a", "b"]
    assert config.resolve_path("models/a.gguf") == Path("/configs/models/a.gguf")
    assert not config.models[1].drafts and config.models[1].verifies
    with pytest.raises(AttributeError):
        config.ensemble.segment_tokens = 3  # frozen


def test_bundled_default_is_the_demo_trio():
    config = load_config(Path(__file__).resolve().parents[2] / "models.toml")
    assert [m.demo for m in config.models] == ["qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[ensemble\nx = 1", "models.toml: invalid TOML"),
        (
            '[ensemble]\ntemprature = 1\n[[models]]\nname="a"\npath="a"',
            "unknown key 'temprature'; did you mean 'temperature'?",
        ),
        (
            '[ensemble]\ntemperature = "hot"\n[[models]]\nname="a"\npath="a"',
            "temperature must be a number, got string 'hot'",
        ),
        ('[ensemble]\ngreedy = 1\n[[models]]\nname="a"\npath="a"', "greedy must be true or false"),
        ('[[models]]\nname="a"\npath="a"\n[[models]]\nname="a"\npath="b"', "duplicate model name 'a'"),
        ("[ensemble]\nsegment_tokens = 4\n", "no models configured"),
        ('[[models]]\nname="a"\n', "give exactly one source"),
        ('[[models]]\nname="a"\npath="x"\ndemo="y"', "give exactly one source"),
        ('[[models]]\nname="a"\nhf="o/r"', "needs file ="),
        ('[[models]]\nname="a"\npath="a"\nrole="judge"', "role must be one of both, draft, verify"),
        ('[ensemble]\nscoring="vibes"\n[[models]]\nname="a"\npath="a"', "scoring must be one of logit, logprob"),
        ('[[models]]\nname="a"\npath="a"\nn_ctxx=1', "did you mean 'n_ctx'?"),
        ('[[model]]\nname="a"', "unknown table 'model'; did you mean 'models'?"),
        ('[[models]]\nname="a"\npath="a"\nrole="verify"', "no model can draft"),
        ('[[models]]\nname="a"\npath="a"\ncolor="notacolour"', "color 'notacolour' is not a colour"),
        ('[[models]]\nname="a"\npath="a"\ncolor="Red"', "did you mean 'red'?"),
    ],
)
def test_bad_config_gives_one_clear_line(text, message):
    with pytest.raises(SpecemError) as caught:
        parse(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_invalid_toml_names_file_and_line():
    with pytest.raises(SpecemError, match=r"models.toml: invalid TOML: .*line 3"):
        parse("[ensemble]\nseed = 1\nseed = = 2\n")


def test_lookup_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_config_path() is None  # nothing anywhere: the built-in default
    (tmp_path / "models.toml").write_text(GOOD)
    assert find_config_path() == tmp_path / "models.toml"
    env_file = tmp_path / "env.toml"
    env_file.write_text(GOOD)
    monkeypatch.setenv("SPECEM_CONFIG", str(env_file))
    assert find_config_path() == env_file
    explicit = tmp_path / "explicit.toml"
    explicit.write_text(GOOD)
    assert find_config_path(explicit) == explicit
    with pytest.raises(SpecemError, match="--config points at"):
        find_config_path(tmp_path / "missing.toml")


def test_user_config_dir_is_used_before_the_bundled_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from specem_local.models.config import user_config_path

    user_config_path().parent.mkdir(parents=True, exist_ok=True)
    user_config_path().write_text(GOOD)
    assert find_config_path() == user_config_path()


def test_overrides_are_validated():
    settings = parse(GOOD).ensemble
    assert with_overrides(settings, temperature=0.2, seed=None).temperature == 0.2
    with pytest.raises(SpecemError, match="top_p"):
        with_overrides(settings, top_p=0)


def test_the_built_in_models_toml_lists_every_setting_at_its_default_in_its_group():
    from specem_local.models.config import tomllib
    from specem_local.setting_fields import describe
    from specem_local.settings import GROUPS, LoadSettings

    text = (Path(__file__).resolve().parents[2] / "specem_local" / "data" / "models.toml").read_text()
    config = parse(text)
    assert config.ensemble == EnsembleSettings() and config.load == LoadSettings()
    written = list(tomllib.loads(text)["ensemble"])
    described = [item for cls in (EnsembleSettings, LoadSettings) for item in describe(cls)]
    assert written == [item.name for group in GROUPS for item in described if item.group == group]
    assert all(f"# -- {title}" in text for title in GROUPS.values())


def test_built_in_ensembles_by_name():
    from specem_local.models.config import builtin_ensembles

    assert list(builtin_ensembles()) == ["demo", "demo-1.5b"]
    larger = load_config(ensemble="demo-1.5b")
    assert [m.demo for m in larger.models] == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma-3-270m"]
    assert larger.ensemble == EnsembleSettings()
    with pytest.raises(SpecemError, match=r"no built-in ensemble .nope.; the built-in ones are demo, demo-1\.5b"):
        load_config(ensemble="nope")
    with pytest.raises(SpecemError, match="give --config or --ensemble, not both"):
        load_config("models.toml", ensemble="demo")


@pytest.mark.parametrize("colour", ["magenta", "#ff8800", "rgb(10, 20, 30)", "ansi_bright_red"])
def test_colours_the_chat_app_can_draw_are_accepted(colour):
    assert parse(f'[[models]]\nname="a"\npath="a"\ncolor="{colour}"').models[0].color == colour
