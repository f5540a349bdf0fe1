import os
import re
from pathlib import Path

import pytest

from specem_local.errors import SpecemError
from specem_local.models.gguf import read_header, read_model_header
from tests.conftest import write_gguf


def test_header_fields(tmp_path):
    path = write_gguf(
        tmp_path / "m.gguf",
        {
            "general.architecture": "llama",
            "llama.context_length": 4096,
            "general.file_type": 0,
            "tokenizer.ggml.tokens": ["a", "b", "c"],
            "tokenizer.chat_template": "{{ x }}",
        },
        [("w", (4, 8), 0), ("b", (8,), 0)],
    )
    header = read_header(path)
    assert header.architecture == "llama"
    assert header.parameter_count == 40
    assert header.quantization == "F32"
    assert header.vocab_size == 3
    assert header.context_length == 4096
    assert header.chat_template == "{{ x }}"
    assert header.required_size == header.file_size


def test_not_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(SpecemError, match="not a GGUF file"):
        read_header(path)


def test_truncated_data_is_detected(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama"}, [("w", (64, 64), 0)])
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(SpecemError, match="truncated GGUF"):
        read_header(path)


def test_truncated_header_is_detected(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama", "x": "y" * 50}, [("w", (4,), 0)])
    path.write_bytes(path.read_bytes()[:60])
    with pytest.raises(SpecemError, match="cut short"):
        read_header(path)


def test_tiny_file(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    with pytest.raises(SpecemError, match="not a GGUF file"):
        read_header(path)


def _header_claiming(path, tensors: int, pairs: int, size: int):
    """A sparse file of ``size`` bytes whose header claims these counts (the rest zeros)."""
    import struct

    with open(path, "wb") as handle:
        handle.write(b"GGUF" + struct.pack("<IQQ", 3, tensors, pairs))
        handle.truncate(size)
    return path


@pytest.mark.parametrize(("tensors", "pairs", "what"), [(1 << 40, 1, "tensors"), (1, 1 << 40, "metadata entries")])
def test_impossible_counts_are_refused_at_once(tmp_path, tensors, pairs, what):
    """Checked against 38f6557: a 200 MB file claiming 2^40 entries took 23 s and 252 MB; 2 GB
    ran until killed. Now the claim is checked against the file's size before any entry is read."""
    import time

    path = _header_claiming(tmp_path / "m.gguf", tensors, pairs, 2 << 30)
    started = time.perf_counter()
    with pytest.raises(SpecemError, match=f"corrupt GGUF header: it claims 1,099,511,627,776 {what}"):
        read_header(path)
    assert time.perf_counter() - started < 1.0


def test_a_file_without_tensors_is_not_a_model(tmp_path):
    path = write_gguf(tmp_path / "vocab.gguf", {"general.architecture": "llama"}, [])
    assert read_header(path).tensors == ()  # a header-only listing may show it
    with pytest.raises(SpecemError, match=r"without tensors .* not a model llama\.cpp can run"):
        read_model_header(path)


def test_a_zero_alignment_is_a_corrupt_header(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"general.alignment": 0}, [("w", (4,), 0)])
    with pytest.raises(SpecemError, match=r"general\.alignment = 0"):
        read_header(path)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.mkdir(), "a folder, not a file"),
        (lambda p: os.mkfifo(p), "a named pipe (FIFO), not a file"),
        (lambda p: (p.symlink_to(p.with_name("loop2")), p.with_name("loop2").symlink_to(p)), "a symlink loop"),
        (lambda p: p.symlink_to(p.with_name("gone")), "a broken symlink"),
        (lambda p: None, "no such file"),
    ],
)
def test_what_is_there_instead_of_a_model_is_named(tmp_path, make, words):
    path = tmp_path / "model.gguf"
    make(path)
    with pytest.raises(SpecemError, match=re.escape(f"{path}: {words}")):
        read_header(path)
    with pytest.raises(SpecemError, match="a device, not a file"):
        read_header(Path("/dev/zero"))
