import pytest

from specem_local.errors import SpecemError
from specem_local.gguf import read_header
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
