"""Where llguidance's compiler breaks: the limits ``engine/schemas.py`` and
``engine/formats.py`` put on a format, found by bisection (docs/structured-output.md).

Each probe compiles a family of formats growing with ``n`` in a fresh process, on a thread with
a given stack, and reports the smallest ``n`` that crashes it (or passes a time bound):

- ``chain``: a schema whose ``$defs`` form a chain of ``n`` references (issue 43's segfault);
- ``lark``: a Lark grammar of ``n`` rules, each using the next;
- ``gbnf``: the same as GBNF, converted to Lark first (seconds, not a crash);
- ``properties``: an object of ``n`` properties (seconds).

    python -m specem_research.format_limits [--output research/results/issue43-format-limits.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

STACKS = {"child (2 MiB)": 2 << 20, "a thread (8 MiB)": 8 << 20}
SECONDS = 10.0

PROBE = r"""
import json, sys, threading
from specem_local.engine.format_compiler import compile_format
from specem_local.engine import schemas
kind, n, stack = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def chain(n):
    link = lambda i: {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i+1}"}}, "required": ["n"]}
    defs = {f"d{i}": link(i) for i in range(n)}
    return {"$defs": {**defs, f"d{n}": {"type": "string"}}, "$ref": "#/$defs/d0"}
if kind == "chain":
    source, what = json.dumps(chain(n)), "schema"
elif kind == "properties":
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}
    source, what = json.dumps(wide), "schema"
elif kind == "lark":
    source = "start: r0\n" + "".join(f"r{i}: \"a\" r{i+1}?\n" for i in range(n)) + f"r{n}: \"b\"\n"
    what = "grammar"
else:
    source = "root ::= r0\n" + "".join(f"r{i} ::= \"a\" r{i+1}?\n" for i in range(n)) + f"r{n} ::= \"b\"\n"
    what = "grammar"
done = []
threading.stack_size(stack)
t = threading.Thread(target=lambda: done.append(compile_format(what, source, what)))
t.start(); t.join()
print("depth", schemas.depth_followed(chain(n)) if kind == "chain" else 0)
"""


def probe(kind: str, n: int, stack: int) -> tuple[str, float, int]:
    """("ok" | "crash" | "slow" | "error", seconds, depth followed)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, kind, str(n), str(stack)], capture_output=True, text=True, timeout=SECONDS
        )
    except subprocess.TimeoutExpired:
        return "slow", SECONDS, 0
    took = time.perf_counter() - started
    if done.returncode < 0:
        return "crash", took, 0
    if done.returncode != 0:
        return "error", took, 0
    return "ok", took, int(done.stdout.split()[-1])


def bisect(kind: str, stack: int, low: int, high: int) -> dict[str, object]:
    """The smallest n in (low, high] that does not pass, with what happened there."""
    outcome, _, _ = probe(kind, high, stack)
    if outcome == "ok":
        return {"breaks_at": None, "passes_at": high}
    while high - low > max(1, low // 50):
        middle = (low + high) // 2
        outcome, _, _ = probe(kind, middle, stack)
        if outcome == "ok":
            low = middle
        else:
            high = middle
    outcome, _, _ = probe(kind, high, stack)
    _, _, depth = probe(kind, low, stack)
    return {"breaks_at": high, "how": outcome, "passes_at": low, "depth_followed_at_pass": depth}


def timings(kind: str, sizes: list[int]) -> dict[int, float | str]:
    out: dict[int, float | str] = {}
    for n in sizes:
        outcome, seconds, _ = probe(kind, n, 8 << 20)
        out[n] = round(seconds, 2) if outcome == "ok" else outcome
        print(f"{kind} {n}: {out[n]}", flush=True)
    return out


def main() -> None:
    about = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m specem_research.format_limits", description=about)
    parser.add_argument("--output", default="research/results/issue43-format-limits.json")
    args = parser.parse_args()
    result: dict[str, object] = {}
    for kind, high in (("chain", 8000), ("lark", 16000)):
        for label, stack in STACKS.items():
            found = bisect(kind, stack, 10, high)
            result[f"{kind}, {label}"] = found
            print(f"{kind}, {label}: {found}", flush=True)
    result["gbnf seconds"] = timings("gbnf", [250, 500, 1000, 2000])
    result["lark seconds"] = timings("lark", [250, 500, 1000, 2000])
    result["properties seconds"] = timings("properties", [1000, 5000, 20000])
    Path(args.output).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
