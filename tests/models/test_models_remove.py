"""``specem models remove``: a model taken out of models.toml with the comment lines above it, the
rest of the file byte for byte; what is refused, the file untouched. (Apart from test_scan.py,
which mutation runs leave out: its ``models add`` would edit their copy's ./models.toml.)"""

from __future__ import annotations

import pytest

from specem_local.commands import cli
from specem_local.errors import SpecemError
from specem_local.models.config import load_config
from specem_local.models.models_file import add_model, remove_model
from tests.conftest import ROOT
from tests.models.test_scan import USER_TOML

THREE_MODELS = """# my ensemble
[ensemble]
segment_tokens = 12   # shorter

# the first one
[[models]]
name = "mine"
path = "/models/mine.gguf"   # keep this comment

# the second, which goes
[[models]]
name = "two"   # two's comment
ollama = "llama3.2:1b"

# the third stays
[[ models ]]  # a header written with spaces
name = "three"
path = "/y.gguf"
"""


def test_remove_takes_out_the_entry_with_the_comments_above_it_and_keeps_the_rest(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text(THREE_MODELS)
    assert remove_model(config, "two") == (False, {"ollama": "llama3.2:1b"})
    assert config.read_text() == THREE_MODELS.replace(
        '# the second, which goes\n[[models]]\nname = "two"   # two\'s comment\nollama = "llama3.2:1b"\n\n', ""
    )
    assert remove_model(config, "three") == (False, {"path": "/y.gguf"})
    assert config.read_text() == THREE_MODELS.split("\n# the second")[0] + "\n"
    assert [m.name for m in load_config(config).models] == ["mine"]


def test_remove_refuses_a_name_not_there_and_the_last_model_leaving_the_file_as_it_was(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text(USER_TOML)
    with pytest.raises(SpecemError, match=r"has no model named 'min'; it has 'mine'$"):
        remove_model(config, "min")
    with pytest.raises(SpecemError, match=r"no models configured; .*\(not removed\)$"):
        remove_model(config, "mine")
    assert config.read_text() == USER_TOML
    assert add_model(config, "two", {"ollama": "llama3.2:1b"}) is False  # the next good change is made
    assert remove_model(config, "mine")[1] == {"path": "/models/mine.gguf"}
    assert [m.name for m in load_config(config).models] == ["two"]


def test_remove_of_an_entry_written_inline_still_takes_it_out(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('models = [{name = "a", path = "/a.gguf"}, {name = "b", path = "/b.gguf"}]  # two\n')
    assert remove_model(config, "a") == (False, {"path": "/a.gguf"})
    assert [m.name for m in load_config(config).models] == ["b"]


def test_remove_from_the_command_line_creates_the_user_file_from_the_built_in_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECEM_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    built_in = [m.name for m in load_config(ROOT / "specem_local/data/models.toml").models]
    assert cli.main(["models", "remove", built_in[-1]]) == 0
    target = tmp_path / "config" / "specem-local" / "models.toml"
    said = capsys.readouterr().out
    assert f"created {target}: [[models]] name = {built_in[-1]!r} (demo = " in said and "never deletes" in said
    assert [m.name for m in load_config(target).models] == built_in[:-1]
    assert cli.main(["models", "remove", built_in[-1]]) == 1
    assert f"has no model named {built_in[-1]!r}" in capsys.readouterr().err


def test_remove_names_every_model_there_and_the_file_at_fault(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text(THREE_MODELS)
    with pytest.raises(SpecemError, match=r"has no model named 'four'; it has 'mine', 'two', 'three'$"):
        remove_model(config, "four")
    config.write_text(THREE_MODELS + "tempreature = 1\n")  # a key models.toml does not have
    with pytest.raises(SpecemError) as caught:
        remove_model(config, "two")
    assert str(caught.value).startswith(str(config)) and "tempreature" in str(caught.value)


def test_remove_where_the_folder_cannot_be_made_says_so_and_writes_nothing(tmp_path, monkeypatch):
    blocker = tmp_path / "config"
    blocker.write_text("a file where the folder would be")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECEM_CONFIG", raising=False)
    target = blocker / "specem-local" / "models.toml"
    built_in = [m.name for m in load_config(ROOT / "specem_local/data/models.toml").models]
    with pytest.raises(SpecemError, match=rf"^cannot create {blocker / 'specem-local'}: "):
        remove_model(target, built_in[-1])
    assert blocker.read_text() == "a file where the folder would be"


def test_remove_says_what_it_took_out_of_which_file(tmp_path, capsys):
    config = tmp_path / "models.toml"
    config.write_text(USER_TOML + '\n[[models]]\nname = "tiny"\nhf = "someone/Tiny-GGUF"\nfile = "tiny-Q8_0.gguf"\n')
    assert cli.main(["models", "remove", "tiny", "--config", str(config)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said == [f"updated {config}: [[models]] name = 'tiny' (hf = 'someone/Tiny-GGUF', file = 'tiny-Q8_0.gguf') "
                    "removed", "its file, if any, is where it was: specem never deletes a model file"]  # fmt: skip
