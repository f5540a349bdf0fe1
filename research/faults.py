"""Fault injection: ``specem run`` (demo trio, a real process each time) interrupted and starved
in the ways a desktop user's machine does it, then the history checked.

- SIGINT at random moments (while the models load, draft or verify): rc 130 (or 0 if the
  answer had finished), "[stopped]", no traceback, no "Exception ignored".
- ``kill -9`` at random moments while answering: the history opens, its integrity check
  passes, the killed answer is marked interrupted and keeps the text written so far.
- A full disk (a 256 KiB tmpfs when this runs as root, else a file-size limit): the answer
  still arrives, one warning says it is not recorded, earlier messages are intact.
- A read-only data dir (a read-only tmpfs as root, else a folder without write permission):
  the same.
- A model file removed while loaded: that answer completes (the weights are mapped); the next
  run says which file is missing, in one line.

    python -m specem_research.faults [--sigint 12] [--kill 6] [--output faults.json]

Starts at least 1 s after a process starts (Python's own start-up, before specem's code runs,
is Python's to interrupt). Linux or macOS; the tmpfs cases need root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specem_local.models import DEMO_MODELS, assemble_demo
from specem_local.storage import History

PROMPT = "Write a short story about a lighthouse keeper and a storm."
AT_A_TERMINAL = (  # SIGINT as at a terminal, even when started from a background job
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, '-m', 'specem_local', *sys.argv[1:]])"
)


def start(data: Path, *args: str, limit_file_bytes: int | None = None) -> subprocess.Popen[bytes]:
    def limits() -> None:
        if limit_file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    return subprocess.Popen(
        [sys.executable, "-c", AT_A_TERMINAL, "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "SPECEM_DATA_DIR": str(data)},
        preexec_fn=limits,
    )


def finish(process: subprocess.Popen[bytes], timeout: float = 300) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def database_state(data: Path) -> dict[str, Any]:
    """Integrity, and the messages by state, as a new process finds them."""
    path = data / "specem.db"
    if not path.exists():
        return {"integrity": "no database", "states": {}}
    History(path, chat_files=data / "none").chats()  # opening marks dead writers' answers
    with contextlib.closing(sqlite3.connect(path)) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        states = dict(db.execute("SELECT state, COUNT(*) FROM messages GROUP BY state").fetchall())
    return {"integrity": integrity, "states": states}


def clean(stderr: str) -> bool:
    return "Traceback" not in stderr and "Exception ignored" not in stderr


def sigint_case(runs: int, rng: random.Random, workdir: Path) -> dict[str, Any]:
    data = workdir / "sigint"
    outcomes = []
    for run in range(runs):
        delay = rng.uniform(1.0, 2.5) if run % 2 == 0 else rng.uniform(2.5, 8.0)  # half while loading / drafting
        process = start(data, "--max-tokens", "120", PROMPT)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        code, out, err = finish(process)
        ok = clean(err) and ((code == 130 and "[stopped]" in err) or code == 0)
        phase = "finished" if code == 0 else "answering" if out.strip() else "before the first segment"
        outcomes.append({"delay_s": round(delay, 2), "rc": code, "phase": phase, "ok": ok})
    state = database_state(data)
    ok = all(o["ok"] for o in outcomes) and state["integrity"] == "ok" and "streaming" not in state["states"]
    return {"ok": ok, "runs": outcomes, "database": state}


def kill_case(runs: int, rng: random.Random, workdir: Path) -> dict[str, Any]:
    data = workdir / "kill"
    outcomes = []
    for _ in range(runs):
        process = start(data, "--max-tokens", "300", "--ignore-eos", PROMPT)
        first = process.stdout.read(1) if process.stdout else b""  # the answer is under way
        delay = rng.uniform(0.0, 4.0)
        time.sleep(delay)
        process.kill()
        process.communicate()
        outcomes.append({"after_first_segment_s": round(delay, 2), "had_output": bool(first)})
    state = database_state(data)
    history = History(data / "specem.db", chat_files=data / "none")
    answers = [history.load(c.id).turns[-1] for c in history.chats()]
    kept = [len(a.content) for a in answers]
    ok = (
        state["integrity"] == "ok"
        and state["states"].get("interrupted", 0) == runs
        and all(a.error and a.error.startswith("interrupted") for a in answers)
    )
    return {"ok": ok, "runs": outcomes, "database": state, "characters_kept": kept}


@contextlib.contextmanager
def small_disk(path: Path, size: str, read_only: bool = False) -> Iterator[bool]:
    """A tmpfs at ``path`` (root only); yields whether it is mounted."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield False
        return
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    try:
        yield mounted.returncode == 0
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def starved_case(name: str, workdir: Path) -> dict[str, Any]:
    """A first answer recorded, then the disk fills up or turns read-only; answers go on."""
    data = workdir / name
    first_code, _, first_err = finish(start(data, "--max-tokens", "16", "Say hello."))
    before = database_state(data)
    if name == "full-disk":
        with small_disk(workdir / "tiny", "256k") as mounted:
            if mounted:
                shutil.copytree(data, workdir / "tiny" / "data")
                filler = workdir / "tiny" / "filler"
                with contextlib.suppress(OSError):
                    filler.write_bytes(b"\0" * 2**20)  # fill what is left
                code, out, err = finish(start(workdir / "tiny" / "data", "--max-tokens", "40", PROMPT))
                filler.unlink(missing_ok=True)  # room again: what did the history keep?
                after = database_state(workdir / "tiny" / "data")
                method = "256 KiB tmpfs, filled"
            else:
                size = (data / "specem.db").stat().st_size
                code, out, err = finish(start(data, "--max-tokens", "40", PROMPT, limit_file_bytes=size))
                after = database_state(data)
                method = "file-size limit at the database's size"
    else:
        with small_disk(workdir / "ro", "1m", read_only=True) as mounted:
            if mounted:
                code, out, err = finish(start(workdir / "ro", "--max-tokens", "40", PROMPT))
                after = {"integrity": "n/a (nothing could be written)", "states": {}}
                method = "read-only tmpfs"
            else:
                (data / "specem.db").chmod(0o400)
                data.chmod(0o500)
                try:
                    code, out, err = finish(start(data, "--max-tokens", "40", PROMPT))
                finally:
                    data.chmod(0o700)
                    (data / "specem.db").chmod(0o600)
                after = database_state(data)
                method = "data dir without write permission"
    warned = "not recorded in the history" in err or "stopped recording" in err
    kept = after["states"] == before["states"] or not after["states"]
    ok = first_code == 0 and code == 0 and bool(out.strip()) and warned and clean(err) and kept
    ok = ok and after["integrity"] in ("ok", "n/a (nothing could be written)")
    return {
        "ok": ok,
        "method": method,
        "rc": code,
        "answered": bool(out.strip()),
        "warning": err.strip()[-300:],
        "before": before,
        "after": after,
        "first_run_error": first_err.strip()[-200:],
    }


def removed_model_case(workdir: Path) -> dict[str, Any]:
    data, model = workdir / "removed", workdir / "removed" / "smollm2.gguf"
    model.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(assemble_demo(DEMO_MODELS["smollm2-135m"]), model)
    config = workdir / "removed" / "models.toml"
    config.write_text(f'[[models]]\nname = "smol"\npath = "{model}"\n')
    process = start(data, "--config", str(config), "--max-tokens", "200", "--ignore-eos", PROMPT)
    first = process.stdout.read(1) if process.stdout else b""
    model.unlink()
    code, out, _ = finish(process)
    again, _, again_err = finish(start(data, "--config", str(config), "Hi"))
    last = again_err.strip().splitlines()[-1] if again_err.strip() else ""
    ok = code == 0 and bool(first + out.encode()) and again == 1 and "no file at" in last and clean(again_err)
    return {"ok": ok, "rc_while_loaded": code, "rc_after": again, "message_after": last}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sigint", type=int, default=12, help="SIGINT runs (default 12)")
    parser.add_argument("--kill", type=int, default=6, help="kill -9 runs (default 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the results as JSON here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specem-faults-") as folder:
        workdir = Path(folder)
        results = {
            "sigint": sigint_case(args.sigint, rng, workdir),
            "kill -9": kill_case(args.kill, rng, workdir),
            "full disk": starved_case("full-disk", workdir),
            "read-only data dir": starved_case("read-only", workdir),
            "model file removed": removed_model_case(workdir),
        }
    results["seconds"] = round(time.perf_counter() - started, 1)
    for name, result in results.items():
        if isinstance(result, dict):
            print(f"{name:20} {'ok' if result['ok'] else 'FAILED'}")
    print(f"{results['seconds']} s")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results.values() if isinstance(r, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
