"""A bounded load test of ``specem serve``: N requests from M clients on loopback, a fixed count
and a time limit, each client retrying a refused request after its ``Retry-After``. Reports
answered / refused (429, before a retry) / failed, latency percentiles of the answered ones, and
the server's memory (RSS) before and after. Starts its own server on a free port unless
``--url`` points at one.

    python -m specem_research.load [--requests 200] [--clients 6] [--max-tokens 16] [--output load.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from specem_local.backend import rss_bytes

QUESTIONS = ("What is six times seven?", "Name a planet.", "Write one line about rain.", "What is 2 + 2?")


def start_server(
    *options: str, env: dict[str, str] | None = None, log: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``specem serve`` on a free loopback port; returns once it answers HTTP (any status: a
    server with --api-key answers /health with 401). ``log``: a file for its output (else a
    pipe, for servers that say little)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("wb") if log is not None else contextlib.nullcontext(subprocess.PIPE) as output:
        command = [sys.executable, "-m", "specem_local", "serve", "--port", str(port), "--log-level", "warning"]
        process = subprocess.Popen(
            [*command, *options],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Ctrl-C even from a background job
        )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if process.poll() is not None:
            break
        try:
            httpx.get(url + "/health")
            return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    output = process.stdout.read().decode(errors="replace") if process.stdout else log.read_text() if log else ""
    raise RuntimeError(f"specem serve did not start: {output[-2000:]}")


def client(
    url: str, jobs: list[int], results: list[dict[str, Any]], lock: threading.Lock, max_tokens: int, deadline: float
) -> None:
    with httpx.Client(timeout=600) as http:
        while time.monotonic() < deadline:
            with lock:
                if not jobs:
                    return
                job = jobs.pop()
            body = {
                "model": "specem",
                "messages": [{"role": "user", "content": QUESTIONS[job % len(QUESTIONS)]}],
                "max_tokens": max_tokens,
                "stream": job % 2 == 0,
            }
            refusals, started = 0, time.monotonic()
            while True:
                try:
                    response = http.post(url + "/v1/chat/completions", json=body)
                except httpx.HTTPError as error:
                    outcome = {"job": job, "status": "failed", "error": str(error)}
                    break
                if response.status_code == 429:
                    refusals += 1
                    time.sleep(float(response.headers.get("retry-after", "1")))
                    continue
                ok = response.status_code == 200 and (
                    "[DONE]" in response.text
                    if body["stream"]
                    else bool(response.json()["choices"][0]["message"]["content"])
                )
                outcome = {"job": job, "status": "answered" if ok else "failed", "http": response.status_code}
                break
            outcome.update(refusals=refusals, seconds=time.monotonic() - started)
            with lock:
                results.append(outcome)


def run(url: str, pid: int | None, requests: int, clients: int, max_tokens: int, limit: float) -> dict[str, Any]:
    before = rss_bytes(pid) if pid else None
    jobs, results, lock = list(range(requests)), [], threading.Lock()
    deadline = time.monotonic() + limit
    started = time.monotonic()
    threads = [
        threading.Thread(target=client, args=(url, jobs, results, lock, max_tokens, deadline)) for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies = sorted(r["seconds"] for r in results if r["status"] == "answered")

    def percentile(p: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 2) if latencies else None

    after = rss_bytes(pid) if pid else None
    health = httpx.get(url + "/health").json()
    return {
        "requests": requests,
        "clients": clients,
        "max_tokens": max_tokens,
        "answered": sum(r["status"] == "answered" for r in results),
        "failed": sum(r["status"] == "failed" for r in results),
        "not_sent_before_the_time_limit": requests - len(results),
        "refused_then_retried": sum(r["refusals"] for r in results),
        "latency_seconds": {
            "p50": percentile(0.5),
            "p90": percentile(0.9),
            "max": percentile(1.0),
            "mean": round(statistics.fmean(latencies), 2) if latencies else None,
        },
        "seconds": round(time.monotonic() - started, 1),
        "server_rss_bytes": {"before": before, "after": after},
        "server_counters": {key: health[key] for key in ("answered", "cancelled")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--queue", type=int, default=2, help="the server's --queue when this starts it")
    parser.add_argument("--time-limit", type=float, default=1200, help="seconds before no new request is sent")
    parser.add_argument("--url", help="an already running server (loopback)")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    process, url = (None, args.url) if args.url else start_server("--queue", str(args.queue), "--no-log")
    try:
        if process is not None:  # one warm-up answer, so "before" is the loaded server's memory
            httpx.post(
                url + "/v1/chat/completions",
                timeout=600,
                json={"model": "specem", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            )
        result = run(
            url, process.pid if process else None, args.requests, args.clients, args.max_tokens, args.time_limit
        )
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)  # as a user stops it: Ctrl-C
            result_code = process.wait(timeout=60)
    result["server_exit"] = result_code if process is not None else None
    print(json.dumps(result, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))
    return 0 if result["failed"] == 0 and result["answered"] == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
