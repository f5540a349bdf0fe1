"""Several answers at once (issue 48): 16 requests of about 100 answer tokens (GSM8K dev items),
sent 1, 2, 4 and 8 at a time to a real ``specem serve`` (the demo trio, ``--parallel 8``,
greedy), then the same through ``specem run --batch`` at ``--parallel`` 1, 2, 4 and 8: answers
per minute, answer tokens per second, the first token's latency (streamed requests), the
server's memory, and how many answers differ from the ones given one at a time (llama.cpp's
batched arithmetic can turn a near-tie). Run it with nothing else running.

    python -m specem_research.throughput [--ensemble NAME | --config FILE] [--requests 16] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

DATA = Path(__file__).parent / "data" / "gsm8k_train_dev120.jsonl"
MAX_TOKENS = 100
AT_ONCE = (1, 2, 4, 8)


def questions(count: int) -> list[str]:
    lines = DATA.read_text().splitlines()[:count]
    return [json.loads(line)["question"] for line in lines]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ask(base: str, question: str) -> dict[str, Any]:
    """One streamed request: its text, answer tokens, first token's latency and total time."""
    body = {
        "model": "specem",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first, text, tokens = None, "", 0
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece and first is None:
                    first = time.perf_counter() - started
                text += piece
    return {"text": text, "tokens": tokens, "first_token": first, "seconds": time.perf_counter() - started}


def chosen(args: argparse.Namespace) -> list[str]:
    """The ensemble's flags for the commands run here."""
    named = ["--ensemble", args.ensemble] if args.ensemble else []
    return [*named, *(["--config", args.config] if args.config else [])]


def serve_rounds(asked: list[str], models: list[str]) -> tuple[list[dict[str, Any]], int]:
    """The requests sent ``at_once`` at a time to one server; its memory (RSS, MiB) at the end."""
    port = free_port()
    command = [sys.executable, "-m", "specem_local", "serve", "--port", str(port), "--parallel", str(max(AT_ONCE)),
               "--no-log", "--log-level", "warning", *models]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        ask(base, "Say hi.")  # warm: the first answer builds what later ones reuse
        rounds = []
        for at_once in AT_ONCE:
            started = time.perf_counter()
            with ThreadPoolExecutor(at_once) as pool:
                answers = list(pool.map(lambda q: ask(base, q), asked))
            rounds.append(summary("serve", at_once, answers, time.perf_counter() - started))
            print(json.dumps({k: v for k, v in rounds[-1].items() if k != "answers"}), flush=True)
        memory = rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(60)
    return rounds, memory


def batch_rounds(asked: list[str], models: list[str]) -> list[dict[str, Any]]:
    """The same requests through ``specem run --batch`` at each ``--parallel``."""
    rounds = []
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "in.jsonl"
        source.write_text("".join(json.dumps({"id": i, "prompt": q}) + "\n" for i, q in enumerate(asked)))
        for at_once in AT_ONCE:
            target = Path(folder) / f"out-{at_once}.jsonl"
            command = [sys.executable, "-m", "specem_local", "run", "--batch", str(source), "-o", str(target),
                       "--parallel", str(at_once), "--max-tokens", str(MAX_TOKENS), "--greedy", "--no-log",
                       *models]  # fmt: skip
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            took = time.perf_counter() - started  # loading included: said beside it
            records = sorted(map(json.loads, target.read_text().splitlines()), key=lambda r: int(r["id"]))
            answers = [{"text": r["text"], "tokens": r["tokens"], "first_token": None, "seconds": r["seconds"]}
                       for r in records]  # fmt: skip
            rounds.append(summary("batch", at_once, answers, took))
            print(json.dumps({k: v for k, v in rounds[-1].items() if k != "answers"}), flush=True)
    return rounds


def summary(route: str, at_once: int, answers: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    tokens = sum(a["tokens"] for a in answers)
    firsts = sorted(a["first_token"] for a in answers if a["first_token"] is not None)
    return {
        "route": route,
        "at_once": at_once,
        "seconds": round(seconds, 2),
        "answers_per_minute": round(60 * len(answers) / seconds, 2),
        "tokens_per_second": round(tokens / seconds, 2),
        "first_token_median": round(firsts[len(firsts) // 2], 2) if firsts else None,
        "answers": [a["text"] for a in answers],
    }


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def compared(rounds: list[dict[str, Any]]) -> None:
    """Each round's gain over one at a time on its route, and its answers that differ from those."""
    for entry in rounds:
        alone = next(r for r in rounds if r["route"] == entry["route"] and r["at_once"] == 1)
        entry["speedup"] = round(entry["tokens_per_second"] / alone["tokens_per_second"], 2)
        entry["differ_from_alone"] = sum(a != b for a, b in zip(entry["answers"], alone["answers"]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m specem_research.throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ensemble")
    parser.add_argument("--config")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--output", default="research/results/issue48-throughput.json")
    parser.add_argument("--skip-batch", action="store_true")
    args = parser.parse_args()
    asked = questions(args.requests)
    rounds, memory = serve_rounds(asked, chosen(args))
    if not args.skip_batch:
        rounds += batch_rounds(asked, chosen(args))
    compared(rounds)
    report = {"requests": len(asked), "max_tokens": MAX_TOKENS, "server_rss_mib": memory, "cores": os.cpu_count(),
              "rounds": rounds}  # fmt: skip
    Path(args.output).write_text(json.dumps(report, indent=2))
    for entry in rounds:
        rate = f"{entry['answers_per_minute']:6.2f} answers/min, {entry['tokens_per_second']:6.2f} tok/s"
        print(f"{entry['route']:5} x{entry['at_once']}: {rate} ({entry['speedup']}x), "
              f"first token {entry['first_token_median']} s, {entry['differ_from_alone']} answers differ")  # fmt: skip


if __name__ == "__main__":
    main()
