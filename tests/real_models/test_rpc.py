"""Members on other machines (issue 28), over loopback with two real ``specem rpc-serve``
servers: the same logits and answers as a local load, an ensemble with one remote and two
local members through ``specem run`` and the chat app, memory, and every failure ggml-rpc
would turn into an abort or a hang as one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from specem_local.backend import LlamaModel
from specem_local.backend.protocol import BatchRow
from specem_local.engine import Ensemble
from specem_local.models.config import load_config
from specem_local.models.demo_models import DEMO_MODELS, demo_path
from specem_research.rpc_cost import free_port, start_rpc_server
from tests.conftest import ROOT, stop_process
from tests.models.test_rpc import FakeServer, hello_reply

SPECEM = [sys.executable, "-m", "specem_local"]
SMOL = demo_path(DEMO_MODELS["smollm2-135m"])


@pytest.fixture(scope="module")
def servers():
    started = [start_rpc_server(threads=1) for _ in range(2)]
    yield [endpoint for _, endpoint in started]
    for process, _ in started:
        stop_process(process, 10)


def config_file(tmp_path, *models: tuple[str, str, str | None], **ensemble: object):
    """models.toml of (name, demo, rpc endpoint or None) members."""
    lines = ["[ensemble]", *(f"{key} = {json.dumps(value)}" for key, value in ensemble.items())]
    for name, demo, endpoint in models:
        lines += ["[[models]]", f'name = "{name}"', f'demo = "{demo}"']
        lines += [f'rpc = ["{endpoint}"]'] if endpoint else []
    path = tmp_path / "models.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def specem(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*SPECEM, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_a_remote_member_gives_the_local_logits_and_the_same_greedy_answer(servers, tmp_path):
    local = LlamaModel(SMOL, n_ctx=256, n_seq_max=2, n_threads=1)
    remote = LlamaModel(SMOL, n_ctx=256, n_seq_max=2, n_threads=1, rpc=[servers[0]])
    try:
        assert remote.placement == f"RPC {servers[0]}" and local.placement == "CPU"
        tokens = local.tokenize("The capital of France is")
        rows = [BatchRow(token, i, 0, True) for i, token in enumerate(tokens)]
        assert np.abs(local.decode(rows) - remote.decode(rows)).max() <= 1e-3  # measured: 0.0 (both CPU)
    finally:
        remote.close()
        local.close()
    answers = []
    for endpoint in (None, servers[0]):
        config = load_config(config_file(tmp_path, ("smol", "smollm2-135m", endpoint)))
        with Ensemble.from_config(config, fresh_weights=True) as ensemble:
            answers.append(ensemble.generate("Name three planets.", greedy=True, max_tokens=24).text)
    assert answers[0] == answers[1] and answers[0]


def test_one_remote_and_two_local_members_answer_through_specem_run(servers, tmp_path):
    config = config_file(
        tmp_path,
        ("qwen", "qwen2.5-coder-0.5b", None),
        ("gemma", "gemma-3-270m", None),
        ("smol", "smollm2-135m", servers[1]),
    )
    listed = specem("models", "list", "--config", str(config))
    assert listed.returncode == 0 and f"RPC {servers[1]}" in listed.stdout
    result = specem(
        "run", "--config", str(config), "--greedy", "--max-tokens", "24", "--no-model-exit", "--json", "What is 2 + 3?"
    )
    assert result.returncode == 0, result.stderr
    rounds = [e for e in map(json.loads, result.stdout.splitlines()) if e["type"] == "round"]
    assert rounds and "Traceback" not in result.stderr
    assert any("smol" in e["drafters"] for e in rounds)  # the remote member drafted
    voted = [e for e in rounds if len(e["candidates"]) > 1]
    assert voted and all("smol" in e["verify_seconds"] for e in voted)  # and verified


async def test_the_chat_app_answers_with_one_remote_and_two_local_members(servers, tmp_path, monkeypatch):
    from specem_tui.app import SpecemChatApp
    from tests.tui.pilot import answered, ask, wait_until

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    config = config_file(
        tmp_path,
        ("qwen", "qwen2.5-coder-0.5b", None),
        ("gemma", "gemma-3-270m", None),
        ("smol", "smollm2-135m", servers[1]),
        max_tokens=16,
        model_exit=False,
    )
    app = SpecemChatApp(load_config(config))
    async with app.run_test(size=(80, 24)) as pilot:
        await ask(pilot, app, "Say hello.")
        await wait_until(pilot, lambda: answered(app), 120)
        assert app.screen.chat.turns[-1].content
        assert any("smol" in event.drafters for event in app.screen.chat.turns[-1].rounds)  # the remote drafted
        status = str(app.screen.query_one("#status").render())
        assert f"smol: RPC {servers[1]}" in status


def test_this_process_holds_far_less_memory_for_a_remote_member(servers):
    measured = {}
    for case, endpoint in (("local", ""), ("rpc", servers[0])):
        command = [
            sys.executable,
            "-m",
            "specem_research.rpc_cost",
            "--where",
            case,
            "--rpc",
            endpoint,
            "--repeats",
            "2",
        ]
        output = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT, timeout=300).stdout
        measured[case] = json.loads(output.strip().splitlines()[-1])["resident_mib"]
    assert measured["rpc"] < 0.5 * measured["local"], measured  # measured: 181 MiB against 590 (Qwen 0.5B)


def one_line_failure(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)  # never 134 (abort)
    lines = [line for line in result.stderr.splitlines() if line.startswith("specem: error")]
    assert len(lines) == 1 and all(text in lines[0] for text in expected), result.stderr
    assert "Traceback" not in result.stderr and "GGML_ABORT" not in result.stderr


def test_a_closed_port_a_busy_server_and_another_version_are_one_line_each(servers, tmp_path):
    closed = f"127.0.0.1:{free_port()}"
    config = config_file(tmp_path, ("qwen", "qwen2.5-coder-0.5b", None), ("smol", "smollm2-135m", closed))
    one_line_failure(specem("run", "--config", str(config), "hi"), closed, "nothing is listening")

    holder = LlamaModel(SMOL, n_ctx=128, n_seq_max=1, n_threads=1, rpc=[servers[0]])  # the server's one client
    try:
        config = config_file(tmp_path, ("qwen", "qwen2.5-coder-0.5b", None), ("smol", "smollm2-135m", servers[0]))
        started = time.monotonic()
        one_line_failure(specem("run", "--config", str(config), "hi"), servers[0], "busy with another client")
        assert time.monotonic() - started < 60  # the probe's 5 s, and loading the local member
    finally:
        holder.close()

    other = FakeServer(hello_reply(8, 0, 0))
    try:
        endpoint = f"127.0.0.1:{other.endpoint.port}"
        config = config_file(tmp_path, ("qwen", "qwen2.5-coder-0.5b", None), ("smol", "smollm2-135m", endpoint))
        one_line_failure(specem("run", "--config", str(config), "hi"), endpoint, "protocol 8.0.0")
    finally:
        other.close()
    # and the server that was busy takes the next client
    config = config_file(tmp_path, ("smol", "smollm2-135m", servers[0]))
    assert specem("run", "--config", str(config), "--max-tokens", "8", "hi").returncode == 0


def test_bench_quick_runs_with_a_remote_member_and_says_where(servers, tmp_path):
    config = config_file(tmp_path, ("qwen", "qwen2.5-coder-0.5b", None), ("smol", "smollm2-135m", servers[1]))
    result = specem("bench", "--plan", "tiny", "--config", str(config), "--output", str(tmp_path / "bench.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"smol RPC {servers[1]}" in result.stdout


def test_rpc_serve_listens_on_a_name_such_as_localhost():
    """Issue 36: ``--host localhost`` passed the check, then ggml could not listen (it takes an
    address, not a name)."""
    process, endpoint = start_rpc_server(1, "--host", "localhost")
    try:
        assert endpoint.startswith("127.0.0.1:")  # it answers the greeting there
    finally:
        stop_process(process, 10)
    result = specem("rpc-serve", "--host", "no-such-host.invalid", "--port", str(free_port()), timeout=60)
    assert result.returncode == 1 and result.stderr.strip() == (
        "specem: error: --host no-such-host.invalid: no such name here; give an IPv4 address such as 127.0.0.1"
    )
