"""Issue 43: nothing left behind. ``specem serve`` and ``specem run`` with an isolated member
(its worker process and its files in /dev/shm), stopped by SIGTERM (``kill``, systemd, ``docker
stop``), SIGHUP, or killed outright."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specem_research.load import start_server
from tests.conftest import poll_until

pytestmark = pytest.mark.models

SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
CONFIG = """
[ensemble]
greedy = true
[[models]]
name = "qwen"
demo = "qwen2.5-coder-0.5b"
[[models]]
name = "smol"
demo = "smollm2-135m"
isolate = true
"""


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(CONFIG)
    return path


def folders(pid: int) -> list[Path]:
    return sorted(SHM.glob(f"specem-worker-{pid}-*")) if SHM else []


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def worker_of(pid: int) -> int:
    """The isolated member's worker process (a python -m specem_local.backend.worker child)."""
    for child in children(pid):
        if "specem_local.backend.worker" in Path(f"/proc/{child}/cmdline").read_text().replace("\0", " "):
            return child
    raise AssertionError("no worker process")


@pytest.mark.skipif(SHM is None, reason="the workers' files live in /dev/shm on Linux only")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_mid_stream_ends_the_stream_closes_the_members_and_exits_0(config, how):
    process, base = start_server("--config", str(config), "--no-log")
    try:
        worker = worker_of(process.pid)
        assert folders(process.pid), "the isolated member keeps its rows in /dev/shm"
        body = {"model": "specem", "messages": [{"role": "user", "content": "Count to a thousand."}],
                "max_tokens": 400, "ignore_eos": True, "stream": True}  # fmt: skip
        lines = []
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as response:
            for line in filter(None, response.iter_lines()):
                lines.append(line)
                if len(lines) == 2:  # a round has streamed: stop the server mid-answer
                    process.send_signal(how)
                    stopped = time.monotonic()
        chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        assert lines[-1] == "data: [DONE]" and chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert chunks[-1]["x_specem"]["specem_finish_reason"] == "cancelled"  # ended at once, not run out
        assert process.wait(30) == 0
        assert time.monotonic() - stopped < 15
        assert folders(process.pid) == [] and not alive(worker)
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.skipif(SHM is None, reason="the workers' files live in /dev/shm on Linux only")
def test_a_killed_server_leaves_no_worker_even_a_stopped_one_and_the_next_start_removes_its_files(config):
    process, _ = start_server("--config", str(config), "--no-log")
    worker = worker_of(process.pid)
    left = folders(process.pid)
    os.kill(worker, signal.SIGSTOP)  # its own watch thread cannot run now: only the kernel can end it
    process.kill()
    process.wait(30)
    poll_until(lambda: not alive(worker), 10, "the stopped worker outlived its killed parent")
    assert left and all(folder.exists() for folder in left)  # SIGKILL: nothing could clean up
    again, _ = start_server("--config", str(config), "--no-log")
    try:
        assert not any(folder.exists() for folder in left)  # removed at the next start
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(30) == 0
    assert folders(again.pid) == []


@pytest.mark.skipif(SHM is None, reason="the workers' files live in /dev/shm on Linux only")
def test_specem_run_stopped_by_sigterm_records_the_answer_and_leaves_nothing(config, tmp_path):
    data = tmp_path / "data"
    run = subprocess.Popen(
        [sys.executable, "-m", "specem_local", "run", "--config", str(config), "--max-tokens", "400",
         "--ignore-eos", "Count to a thousand."],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "SPECEM_DATA_DIR": str(data)},
    )  # fmt: skip
    try:
        assert run.stdout is not None
        run.stdout.read(20)  # it has begun to answer
        worker = worker_of(run.pid)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
        assert run.returncode == 128 + signal.SIGTERM and b"[stopped]" in err and b"Traceback" not in err
        assert folders(run.pid) == [] and not alive(worker)
        env = {**os.environ, "SPECEM_DATA_DIR": str(data)}

        def history(*args: str) -> object:
            done = subprocess.run([sys.executable, "-m", "specem_local", "history", *args, "--json"],
                                  capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
            return json.loads(done.stdout)

        [chat] = history("list")
        answer = history("show", chat["id"])["turns"][1]  # type: ignore[index]
        assert answer["content"] and answer["final"]["finish_reason"] == "cancelled"
    finally:
        if run.poll() is None:
            run.kill()


def test_a_killed_workers_reason_is_its_signal_not_a_python_warning(config):
    from specem_local import Ensemble
    from specem_local.models.config import load_config

    with Ensemble.from_config(load_config(str(config))) as ensemble:
        smol = next(m for m in ensemble.members if m.name == "smol")
        stream = ensemble.stream("Count to a hundred.", max_tokens=120, ignore_eos=True)
        next(stream)
        os.kill(smol.model._process.pid, signal.SIGKILL)
        final = stream.final()
        assert final.lost == {"smol": "its worker was ended by SIGKILL"}
        assert ensemble.generate("Count to ten.", max_tokens=8).lost == {}  # back for the next answer
