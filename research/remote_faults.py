"""What a remote member's failures cost (issue 40), over loopback with real ``specem rpc-serve``
servers and a real ``specem run``: a server stopped mid-answer (``kill -STOP``: a laptop that
sleeps, Wi-Fi that drops without a reset), one killed mid-answer (``kill -9``), one that answers
the greeting and then stalls at load, and Ctrl-C while a remote step is stuck. Then what the
worker process costs: seconds per round with the remote member in a worker against in this
process (the demo trio, SmolLM2 remote), and the same for a local member (``isolate = true``).

    python -m specem_research.remote_faults [--output research/results/issue40-remote-faults.json]

The ensemble: Gemma 3 270M here and SmolLM2 135M on the server, greedy, model exit off,
``ignore_eos`` (every answer runs to ``max_tokens``), so the remote member is asked at every
round. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from specem_local.models import CONNECTION_CAPS, PROTOCOL
from specem_research.faults import AT_A_TERMINAL
from specem_research.rpc_cost import start_rpc_server

SPECEM = [sys.executable, "-c", AT_A_TERMINAL]  # Ctrl-C as at a terminal, even from a background job
QUESTION = "Write a short story about a lighthouse keeper."


def config_text(endpoint: str, **ensemble: object) -> str:
    """models.toml: Gemma here, SmolLM2 on the server at ``endpoint``."""
    settings = {"greedy": True, "model_exit": False, "ignore_eos": True, "segment_tokens": 8, **ensemble}
    lines = ["[ensemble]", *(f"{key} = {json.dumps(value)}" for key, value in settings.items())]
    lines += ["[[models]]", 'name = "gemma"', 'demo = "gemma-3-270m"']
    lines += ["[[models]]", 'name = "smol"', 'demo = "smollm2-135m"', f'rpc = ["{endpoint}"]']
    return "\n".join(lines) + "\n"


def run_with_fault(fault: str, folder: Path, max_tokens: int = 64) -> dict[str, Any]:
    """``specem run --json`` with the remote member's server stopped (``stop``) or killed
    (``kill``) after the second round, or interrupted by Ctrl-C while its step is stuck
    (``ctrl-c``: the server stopped, then SIGINT to ``specem run``)."""
    server, endpoint = start_rpc_server(threads=1)
    config = folder / f"models-{fault}.toml"
    config.write_text(config_text(endpoint))
    command = [*SPECEM, "run", "--config", str(config), "--json", "--max-tokens", str(max_tokens), QUESTION]
    env = {**os.environ, "SPECEM_DATA_DIR": str(folder / "data")}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    faulted = ended = lost = None
    try:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if faulted is not None and lost is None and '"lost": {"' in line:
                lost = time.monotonic()
            if faulted is None and sum('"type": "round"' in seen for seen in lines) == 2:
                os.kill(server.pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
                faulted = time.monotonic()
                if fault == "ctrl-c":
                    time.sleep(0.5)  # the next remote step is under way, and stuck
                    faulted = time.monotonic()
                    run.send_signal(signal.SIGINT)
        run.wait(300)
        ended = time.monotonic()
    finally:
        if run.poll() is None:
            run.kill()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGCONT)
            server.kill()
        server.wait(10)
    events = [json.loads(line) for line in lines if line.startswith("{")]
    final = next((e for e in events if e.get("type") == "final"), None)
    stderr = run.stderr.read() if run.stderr is not None else ""
    return {
        "fault": fault,
        "returncode": run.returncode,
        "seconds_from_fault_to_exit": round(ended - faulted, 2) if faulted and ended else None,
        "seconds_from_fault_to_lost": round(lost - faulted, 2) if faulted and lost else None,
        "stdout_lines": len(lines),
        "stdout_lines_not_json": sum(not _is_json(line) for line in lines),
        "rounds": sum(e.get("type") == "round" for e in events),
        "finish_reason": final["finish_reason"] if final else None,
        "answer_tokens": final["tokens"] if final else None,
        "lost": final["lost"] if final else None,
        "stderr": stderr.strip().splitlines()[-3:],
    }


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


class StallingServer:
    """Answers ggml-rpc's greeting, then nothing, holding each connection open: a server that
    passes the probe and then goes silent."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.socket.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        reply = (4 + CONNECTION_CAPS).to_bytes(8, "little") + bytes([*PROTOCOL, 0]) + bytes(CONNECTION_CAPS)
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection)
            connection.recv(9 + CONNECTION_CAPS)
            connection.sendall(reply)

    def close(self) -> None:
        self.socket.close()
        for connection in self.connections:
            connection.close()


def stall_at_load(folder: Path, remote_timeout: float) -> dict[str, Any]:
    """``specem run`` against a server that stalls after the greeting: one line, rc 1."""
    server = StallingServer()
    config = folder / "models-stall.toml"
    config.write_text(config_text(server.endpoint, remote_timeout=remote_timeout))
    env = {**os.environ, "SPECEM_DATA_DIR": str(folder / "data")}
    started = time.monotonic()
    try:
        result = subprocess.run(
            [*SPECEM, "run", "--config", str(config), "Hi."], capture_output=True, text=True, env=env, timeout=600
        )
    finally:
        server.close()
    return {
        "remote_timeout": remote_timeout,
        "returncode": result.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "stderr_lines": result.stderr.strip().splitlines(),
    }


def ensemble_with(isolated: bool, endpoint: str | None) -> Any:
    """The demo trio, greedy, model exit off, every answer 64 tokens: SmolLM2 in a worker
    (``isolated``) or in this process, on the server at ``endpoint`` or here."""
    from specem_local.backend import LlamaModel, WorkerModel
    from specem_local.engine import Ensemble, Member, prompt_format_for
    from specem_local.models import DEMO_MODELS, ModelSpec, demo_path
    from specem_local.settings import EnsembleSettings

    members = []
    for demo in ("qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"):
        rpc = (endpoint,) if endpoint and demo == "smollm2-135m" else ()
        spec = ModelSpec(name=demo, demo=demo, rpc=rpc)
        kind = WorkerModel if isolated and demo == "smollm2-135m" else LlamaModel
        model = kind(demo_path(DEMO_MODELS[demo]), n_ctx=1024, n_seq_max=4, n_threads=1, rpc=rpc)
        members.append(Member(spec, model, prompt_format_for(spec, model)))
    settings = EnsembleSettings(greedy=True, model_exit=False, ignore_eos=True, segment_tokens=8, max_tokens=64)
    return Ensemble(members, settings)


def round_cost(endpoints: tuple[str | None, str | None], answers: int) -> dict[str, float]:
    """Seconds per round, SmolLM2 in this process against in a worker, answer by answer in
    turn (so both arms meet the same machine), each arm on its own server when remote."""
    from specem_local.events import RoundEvent

    arms = {"in_process": ensemble_with(False, endpoints[0]), "in_worker": ensemble_with(True, endpoints[1])}
    rounds: dict[str, list[float]] = {name: [] for name in arms}
    try:
        for ensemble in arms.values():
            ensemble.generate(QUESTION)  # warm up
        for answer in range(answers):
            for name in sorted(arms, reverse=answer % 2 == 1):
                rounds[name] += [e.seconds for e in arms[name].stream(QUESTION) if isinstance(e, RoundEvent)]
    finally:
        for ensemble in arms.values():
            ensemble.close()
    means = {name: sum(seconds) / len(seconds) for name, seconds in rounds.items()}
    return {
        **{name: round(mean, 4) for name, mean in means.items()},
        "ratio": round(means["in_worker"] / means["in_process"], 3),
    }


def costs(answers: int) -> dict[str, Any]:
    servers = [start_rpc_server(threads=1) for _ in range(2)]
    try:
        remote = round_cost((servers[0][1], servers[1][1]), answers)
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(10)
    return {"remote_member": remote, "local_member_isolated": round_cost((None, None), answers), "answers": answers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specem_research.remote_faults", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--answers", type=int, default=5, help="answers per arm of the cost measurement")
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        result = {
            "stop": run_with_fault("stop", folder),
            "kill": run_with_fault("kill", folder),
            "ctrl_c": run_with_fault("ctrl-c", folder),
            "stall_at_load": stall_at_load(folder, remote_timeout=10),
            "cost": costs(args.answers),
        }
    text = json.dumps(result, indent=1)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
