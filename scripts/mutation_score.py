"""The score of one module's mutation run (``scripts/mutation.sh``): mutmut's results counted,
the mutants marked equivalent left out, the survivors written with their diffs.

    python scripts/mutation_score.py MODULE RESULTS EQUIVALENTS [--diffs-from DIR --mutmut PATH] --report FILE

A mutant a test caught is killed (a crash under the mutant counts too); one whose tests only hang
(mutmut's timeout, or a test stopped by pytest-timeout: ``tests/conftest.py`` exits with
mutmut's timeout code then) is a timeout, reported apart and not a kill; one no test caught, or
no test ran, survived. ``EQUIVALENTS`` lists mutants that change no behaviour, one per
line, ``NAME  # why``: they are left out of the score, each with its reason.
"""

from __future__ import annotations

import argparse
import collections
import math
import subprocess
from pathlib import Path

CAUGHT = {"killed", "segfault", "caught by type check", "suspicious"}
HUNG = "timeout"
NOT_RUN = "not checked"  # outside a sample (MUTATION_SAMPLE): not counted


def interval(killed: int, counted: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95% interval for a score measured on a sample."""
    if not counted:
        return 0.0, 1.0
    share = killed / counted
    centre = (share + z * z / (2 * counted)) / (1 + z * z / counted)
    half = z * math.sqrt(share * (1 - share) / counted + z * z / (4 * counted * counted)) / (1 + z * z / counted)
    return centre - half, centre + half


def equivalents(path: Path) -> dict[str, str]:
    """Mutant name -> why it changes nothing."""
    marked = {}
    for line in path.read_text("utf-8").splitlines() if path.exists() else []:
        name, _, why = line.partition("#")
        if name.strip():
            marked[name.strip()] = why.strip()
    return marked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module")
    parser.add_argument("results")
    parser.add_argument("equivalents")
    parser.add_argument("--diffs-from")
    parser.add_argument("--mutmut")
    parser.add_argument("--report", required=True)
    args = parser.parse_args()
    prefix = "specem_local." + args.module.removesuffix(".py").replace("/", ".") + "."
    statuses, generated = {}, 0
    for line in Path(args.results).read_text("utf-8").splitlines():
        name, _, status = line.strip().partition(": ")
        if name.startswith(prefix):
            generated += 1
            if status != NOT_RUN:
                statuses[name] = status
    marked = {name: why for name, why in equivalents(Path(args.equivalents)).items() if name in statuses}
    counted = {name: status for name, status in statuses.items() if name not in marked}
    killed = sum(status in CAUGHT for status in counted.values())
    hung = sum(status == HUNG for status in counted.values())
    survivors = sorted(name for name, status in counted.items() if status not in CAUGHT and status != HUNG)
    score = killed / len(counted) if counted else 0.0
    by_status = collections.Counter(statuses.values())
    summary = (
        f"{args.module}: {len(statuses)} mutants, {killed} killed, {hung} timed out (not kills), "
        f"{len(survivors)} survived, {len(marked)} equivalent (left out): {score:.1%} killed"
    )
    if len(statuses) < generated:
        low, high = interval(killed, len(counted))
        summary += f" (a random sample of {len(statuses)} of {generated}: 95% interval {low:.1%}-{high:.1%})"
    print(summary, flush=True)
    lines = [summary, f"by status: {dict(by_status)}", ""]
    lines += [f"equivalent: {name}  # {why}" for name, why in sorted(marked.items())]
    hung_names = [name for name, status in sorted(counted.items()) if status == HUNG]
    for name in [*hung_names, *survivors]:  # a mutant that only hangs is no kill either: its diff is shown too
        diff = ""
        if args.diffs_from and args.mutmut:
            shown = subprocess.run([args.mutmut, "show", name], cwd=args.diffs_from, capture_output=True, text=True)
            diff = shown.stdout.strip()
        said = "timed out" if statuses[name] == HUNG else "survived"
        lines += ["", f"{said}: {name} ({statuses[name]})", diff]
    Path(args.report).write_text("\n".join(lines) + "\n", "utf-8")


if __name__ == "__main__":
    main()
