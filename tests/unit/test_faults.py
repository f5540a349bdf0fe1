"""Small pure checks behind the hostile tester's findings (issue 17): what is said, not done."""

from __future__ import annotations

from specem_local.engine.loading import same_file_warnings
from specem_local.events import FinalEvent, finish_note


def final(text: str, reason: str) -> FinalEvent:
    return FinalEvent(text, reason, 1, 1, 1.0, 1.0, {}, 1.0, {}, False)


def test_the_same_gguf_under_two_names_is_a_warning(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    (tmp_path / "link.gguf").symlink_to(model)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    [warning] = same_file_warnings({"a": model, "b": tmp_path / "link.gguf", "c": other})
    assert warning.startswith(f"a and b are the same file ({model})") and "remove all but one" in warning
    assert same_file_warnings({"a": model, "c": other}) == []


def test_a_reader_is_told_why_an_answer_stopped_when_it_is_not_obvious():
    assert "raise n_ctx" in finish_note(final("Some text", "context"))
    assert finish_note(final("", "eos")) == "the models ended the answer without writing anything"
    assert finish_note(final("Done.", "eos")) is None
    assert finish_note(final("Cut", "length")) is None
