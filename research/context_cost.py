"""What a larger context costs the built-in ensembles (issue 43: real schemas need room): for
each ``n_ctx``, in a fresh process, the memory after loading, the speed of a short plain
answer, and a structured answer to a Kubernetes-sized schema (the members are told an outline
of it; the prompt's length in tokens is reported).

    python -m specem_research.context_cost [--ensemble NAME] [--contexts 2048,4096,8192]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import dataclasses, json, sys, time
from specem_local import Ensemble
from specem_local.backend import rss_bytes
from specem_local.models.config import load_config
import os
n_ctx, ensemble, schema_path = int(sys.argv[1]), sys.argv[2] or None, sys.argv[3]
config = load_config(ensemble=ensemble)
config = dataclasses.replace(config, models=tuple(dataclasses.replace(m, n_ctx=n_ctx) for m in config.models))
with Ensemble.from_config(config) as e:
    loaded = rss_bytes(os.getpid())
    e.generate("Say hi.", max_tokens=8, greedy=True)
    plain = e.generate("Why is the sky blue?", max_tokens=96, greedy=True, ignore_eos=True)
    schema = json.loads(open(schema_path).read())
    started = time.perf_counter()
    shaped = e.generate("Write one realistic example of this data.", schema=schema, max_tokens=256, greedy=True)
    took = time.perf_counter() - started
    after = rss_bytes(os.getpid())
    print(json.dumps({"n_ctx": n_ctx, "rss_mib_loaded": round(loaded / 2**20), "rss_mib_after": round(after / 2**20),
                      "plain_tok_s": round(plain.tokens_per_second, 2), "schema_finish": shaped.finish_reason,
                      "schema_tokens": shaped.tokens, "schema_seconds": round(took, 2)}))
"""


def main() -> None:
    about = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m specem_research.context_cost", description=about)
    parser.add_argument("--ensemble", default="")
    parser.add_argument("--contexts", default="2048,4096,8192")
    schema = "research/data/kubernetes_deployment.json"
    parser.add_argument("--schema", default=schema, help="a Kubernetes-sized schema")
    parser.add_argument("--output", default="research/results/issue43-context-cost.json")
    args = parser.parse_args()
    rows = []
    for n_ctx in map(int, args.contexts.split(",")):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(n_ctx), args.ensemble, args.schema], capture_output=True, text=True
        )
        if done.returncode != 0:
            rows.append({"n_ctx": n_ctx, "error": done.stderr.strip().splitlines()[-1:]})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    Path(args.output).write_text(json.dumps({"ensemble": args.ensemble or "demo", "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
