"""Property tests (Hypothesis) of everything that reads what a user or a file hands us: the
config parser, the GGUF header reader, the text post-processing and the chat-file upgrade.
Each either works or says what is wrong in one line; no other exception, ever."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specem_local.engine.segments import find_stop, incomplete_utf8_tail, trim_to_word_boundary
from specem_local.errors import SpecemError
from specem_local.models.config import parse_config
from specem_local.models.gguf import read_header
from specem_local.storage.chat_files import chat_from_json, chat_to_json
from specem_local.storage.history import History
from tests.conftest import write_gguf

QUICK = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- models.toml ------------------------------------------------------------------------------------
KEYS = [
    "name",
    "path",
    "demo",
    "hf",
    "file",
    "ollama",
    "lmstudio",
    "n_ctx",
    "role",
    "color",
    "chat_template",
    "n_gpu_layers",
    "temperature",
    "segment_tokens",
    "stop",
    "greedy",
    "scoring",
    "threads_per_model",
    "x",
]
SCALARS = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=12),
    st.lists(st.text(max_size=4), max_size=3),
)
TABLES = st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=6)


def one_line(error: SpecemError) -> None:
    assert str(error) and "\n" not in str(error)


@QUICK
@given(
    ensemble=TABLES,
    models=st.lists(TABLES, max_size=3),
    extra=st.dictionaries(st.text(max_size=5), SCALARS, max_size=2),
)
def test_any_models_toml_parses_or_is_one_line(ensemble, models, extra):
    document = {"ensemble": ensemble, "models": models, **extra}
    try:
        text = tomlkit.dumps(document)
    except Exception:
        return
    try:
        parse_config(text, "models.toml", Path("/configs"))
    except SpecemError as error:
        one_line(error)


@QUICK
@given(st.text(max_size=200))
def test_any_text_as_models_toml_parses_or_is_one_line(text):
    try:
        parse_config(text, "models.toml", Path("/configs"))
    except SpecemError as error:
        assert str(error).startswith("models.toml")


# -- GGUF headers -----------------------------------------------------------------------------------
def valid_gguf() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = write_gguf(
            Path(folder) / "m.gguf",
            {"general.architecture": "llama", "llama.block_count": 2, "tokenizer.ggml.tokens": ["a", "b"]},
            [("token_embd.weight", (4, 2), 0), ("output.weight", (4, 2), 0)],
        )
        return path.read_bytes()


VALID = valid_gguf()


@QUICK
@given(
    st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=200).map(lambda tail: b"GGUF" + tail),
        st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6).map(
            lambda edits: bytes(dict(edits).get(i, b) for i, b in enumerate(VALID))
        ),
        st.integers(0, len(VALID)).map(lambda cut: VALID[:cut]),
    )
)
def test_any_file_is_read_as_gguf_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.gguf"
        path.write_bytes(data)
        try:
            header = read_header(path)
        except SpecemError as error:
            one_line(error)
            return
        assert header.architecture is None or isinstance(header.architecture, str)


# -- text post-processing ---------------------------------------------------------------------------
@QUICK
@given(st.text(), st.integers(0, 400))
def test_a_split_anywhere_leaves_only_a_finishable_utf8_tail(text, split):
    data = text.encode("utf-8")
    head = data[: min(split, len(data))]
    tail = incomplete_utf8_tail(head)
    assert 0 <= tail <= 3
    head[: len(head) - tail].decode("utf-8")  # what is kept is always whole characters
    assert incomplete_utf8_tail(data) == 0


@QUICK
@given(st.text())
def test_trimming_to_a_word_boundary_keeps_a_prefix(text):
    trimmed = trim_to_word_boundary(text)
    assert text.startswith(trimmed) and (trimmed or not text)


@QUICK
@given(st.text(), st.lists(st.text(max_size=4), max_size=3), st.integers(-5, 50))
def test_a_stop_found_is_really_there_and_the_earliest(text, stops, start):
    index = find_stop(text, tuple(stops), start)
    hits = [i for i in range(max(0, start), len(text) + 1) for s in stops if s and text.startswith(s, i)]
    assert index == (min(hits) if hits else None)


# -- chat files and the history's import ------------------------------------------------------------
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
CHATISH = st.fixed_dictionaries(
    {
        "version": st.one_of(st.integers(0, 3), JSONISH),
        "id": st.one_of(st.text(max_size=8), JSONISH),
        "turns": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "role": st.sampled_from(["user", "assistant", "system", 3]),
                        "content": st.one_of(st.text(), JSONISH),
                        "rounds": st.one_of(st.lists(JSONISH, max_size=2), JSONISH),
                        "final": JSONISH,
                    }
                ),
                max_size=3,
            ),
            JSONISH,
        ),
    },
    optional={"created": JSONISH, "updated": JSONISH, "title": JSONISH},
)


@QUICK
@given(st.one_of(JSONISH, CHATISH))
def test_any_chat_file_upgrades_or_is_refused_and_a_good_one_round_trips(data):
    try:
        chat = chat_from_json(data)
    except ValueError as error:
        assert str(error) and "\n" not in str(error)
        return
    again = chat_from_json(json.loads(json.dumps(chat_to_json(chat))))
    assert again.turns == chat.turns and again.id == chat.id


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(JSONISH, CHATISH), max_size=4))
def test_importing_any_chat_files_never_fails_and_is_idempotent(files):
    with tempfile.TemporaryDirectory() as folder:
        chats = Path(folder) / "chats"
        chats.mkdir()
        for index, data in enumerate(files):
            (chats / f"{index}.json").write_text(json.dumps(data))
        first = History(Path(folder) / "specem.db", chat_files=chats).chats()
        second = History(Path(folder) / "specem.db", chat_files=chats).chats()
        assert [c.id for c in first] == [c.id for c in second]
