"""What a member on another machine costs (issue 28), measured over loopback with real
``specem rpc-serve`` processes:

    python -m specem_research.rpc_cost [--model qwen2.5-coder-0.5b] [--repeats 30]

For one demo model, loaded here and through a server (every layer there, and every layer but
the output one, whose logits then never cross the network): the load time, this process's
resident memory after loading, one decode step (one token with its logits), a verification
batch (3 candidates of 10 tokens, every row's logits), and the bytes that cross per row. Run
it with nothing else busy: the server and this process share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from specem_local.errors import SpecemError
from specem_local.models import Endpoint, RpcUnavailable, probe

CANDIDATES, SEGMENT = 3, 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_rpc_server(threads: int = 1, *extra: str) -> tuple[subprocess.Popen, str]:
    """A ``specem rpc-serve`` process on a free loopback port, once it answers the greeting."""
    port = free_port()
    command = [sys.executable, "-m", "specem_local", "rpc-serve", "--port", str(port), "--threads", str(threads)]
    process = subprocess.Popen([*command, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            probe(Endpoint("127.0.0.1", port), timeout=2)
            return process, f"127.0.0.1:{port}"
        except RpcUnavailable:
            if process.poll() is not None:
                raise SpecemError(
                    f"specem rpc-serve ended: {process.stderr.read() if process.stderr else ''}"
                ) from None
            time.sleep(0.2)
    process.kill()
    raise SpecemError("specem rpc-serve did not start within 60 s")


def resident_bytes() -> int:
    """This process's resident memory now (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(path: Path, rpc: list[str], layers: int, repeats: int) -> dict[str, float]:
    """Load, decode one token ``repeats`` times, verify a batch ``repeats`` times."""
    from specem_local.backend import BatchRow, LlamaModel

    started = time.perf_counter()
    model = LlamaModel(path, n_ctx=512, n_seq_max=4, n_threads=1, n_gpu_layers=layers, rpc=rpc)
    loaded = time.perf_counter() - started
    rss = resident_bytes()
    prompt = model.tokenize("Explain in a few sentences why the sky is blue, for a child.")
    model.decode([BatchRow(token, i, 0, i == len(prompt) - 1) for i, token in enumerate(prompt)])
    step = []
    for _ in range(repeats):
        started = time.perf_counter()
        model.decode([BatchRow(prompt[-1], len(prompt), 0, True)])
        step.append(time.perf_counter() - started)
        model.seq_remove(0, len(prompt))
    batch = []
    for _ in range(repeats):
        rows = [
            BatchRow(prompt[j % len(prompt)], len(prompt) + j, 1 + c, True)
            for c in range(CANDIDATES)
            for j in range(SEGMENT)
        ]
        for c in range(CANDIDATES):
            model.seq_copy(0, 1 + c, 0, len(prompt))
        started = time.perf_counter()
        model.decode(rows)
        batch.append(time.perf_counter() - started)
        for c in range(CANDIDATES):
            model.seq_remove(1 + c)
    result = {
        "placement": model.placement,
        "load_seconds": round(loaded, 3),
        "resident_mib": round(rss / 2**20, 1),
        "decode_step_ms": round(1000 * sorted(step)[len(step) // 2], 2),
        "verify_batch_ms": round(1000 * sorted(batch)[len(batch) // 2], 2),
        "logits_bytes_per_row": model.n_vocab * 4,
    }
    model.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="a demo model name")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--where", choices=("local", "rpc", "rpc-output-here"), help="one case, in this process")
    parser.add_argument("--rpc", default="", help="the server, for --where rpc*")
    args = parser.parse_args()
    from specem_local.models import DEMO_MODELS, demo_path, read_model_header

    path = demo_path(DEMO_MODELS[args.model])
    if args.where:  # one case per process, so its resident memory is its own
        layers = read_model_header(path).layers
        rpc = [args.rpc] if args.where != "local" else []
        gpu_layers = layers - 1 if args.where == "rpc-output-here" else -1
        print(json.dumps({"case": args.where, **measure(path, rpc, gpu_layers, args.repeats)}))
        return
    for case in ("local", "rpc", "rpc-output-here"):
        server, endpoint = start_rpc_server(threads=1) if case != "local" else (None, "")
        try:
            command = [sys.executable, "-m", "specem_research.rpc_cost", "--model", args.model, "--where", case]
            output = subprocess.run(
                [*command, "--rpc", endpoint, "--repeats", str(args.repeats)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            print(output.strip().splitlines()[-1], flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)


if __name__ == "__main__":
    main()
