"""``specem run --batch IN.jsonl -o OUT.jsonl``: many requests, up to ``parallel`` answered at
once, one result per line of OUT as each finishes (``--in-order``: in the order of IN).

A line of IN is a JSON object: ``prompt`` (text) or ``messages`` (a conversation), an optional
``id`` (else its line number), and optionally its own ``schema``, ``json``, ``grammar``,
``regex``, ``tools``, ``tool_choice``, ``think`` and ``[ensemble]`` settings (``max_tokens``,
``temperature``, ...) over the command's. A line of OUT is ``{"id", "text", "parsed",
"finish_reason", "tokens", "seconds"}`` (``reasoning`` when it thought first), or ``{"id",
"error"}``. A rerun skips the ids OUT already holds, so an interrupted batch goes on where it
stopped; OUT only ever holds whole lines. A bad line is said with its number, and the others run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from specem_local.commands.terminal import printable
from specem_local.errors import SettingError, SpecemError
from specem_local.events import FinalEvent
from specem_local.settings import EnsembleSettings, describe

FORMAT_KEYS = ("schema", "json", "grammar", "regex", "tools", "tool_choice", "parallel_tool_calls", "think", "models")
SETTING_KEYS = frozenset(item.name for item in describe(EnsembleSettings))


@dataclass(frozen=True)
class BatchLine:
    """One request of IN: its id, where it is, and ``prepare``'s keywords (or why it is bad)."""

    id: str
    number: int
    request: dict[str, Any] | None
    error: str | None = None


def read_lines(path: Path, defaults: dict[str, Any]) -> list[BatchLine]:
    """Every line of IN, checked for what can be checked without the models."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise SettingError(f"--batch {path}: {error.strerror or error}", "batch") from None
    lines, seen = [], set()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        line = parse_line(raw, number, defaults)
        if line.id in seen:
            line = BatchLine(line.id, number, None, f"the id {line.id!r} is used by an earlier line")
        seen.add(line.id)
        lines.append(line)
    return lines


def parse_line(raw: str, number: int, defaults: dict[str, Any]) -> BatchLine:
    try:
        item = json.loads(raw)
    except (ValueError, RecursionError) as error:
        return BatchLine(str(number), number, None, f"not JSON ({str(error)[:80]})")
    if not isinstance(item, dict):
        return BatchLine(str(number), number, None, 'a line must be a JSON object with a "prompt" or "messages"')
    given_id = item.pop("id", number)
    if not isinstance(given_id, (str, int)) or isinstance(given_id, bool):
        return BatchLine(str(number), number, None, '"id" must be text or a whole number')
    line_id = str(given_id)
    prompt = item.pop("prompt", None) if "prompt" in item else item.pop("messages", None)
    if "messages" in item:
        return BatchLine(line_id, number, None, 'give "prompt" or "messages", not both')
    if not (isinstance(prompt, str) and prompt.strip()) and not (isinstance(prompt, list) and prompt):
        return BatchLine(line_id, number, None, 'needs a "prompt" (text) or "messages" (a conversation)')
    unknown = sorted(set(item) - set(FORMAT_KEYS) - SETTING_KEYS)
    if unknown:
        return BatchLine(line_id, number, None, f"unknown key {unknown[0]!r}")
    own_format = any(key in item for key in ("schema", "json", "grammar", "regex", "tools"))
    base = {k: v for k, v in defaults.items() if not (own_format and k == "output_format")}
    return BatchLine(line_id, number, {**base, **item, "prompt": prompt})


def done_ids(path: Path) -> set[str]:
    """The ids OUT already holds (a last line cut short by a crash is dropped from the file)."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        whole = data[: data.rfind(b"\n") + 1]
        path.write_bytes(whole)
        data = whole
    ids = set()
    for raw in data.decode("utf-8", errors="replace").splitlines():
        try:
            ids.add(str(json.loads(raw)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def result_of(line: BatchLine, final: FinalEvent | None, error: str | None) -> dict[str, Any]:
    if final is None:
        return {"id": line.id, "line": line.number, "error": error}
    record: dict[str, Any] = {"id": line.id, "text": final.text, "parsed": plain(final.parsed)}
    if final.reasoning:
        record["reasoning"] = final.reasoning
    return {**record, "finish_reason": final.finish_reason, "tokens": final.tokens, "seconds": round(final.seconds, 3)}


def plain(parsed: Any) -> Any:
    """A parsed answer as JSON: a tool reply as its calls or its message."""
    from specem_local.engine.tools import ToolReply

    if isinstance(parsed, ToolReply):
        if parsed.calls:
            return {"tool_calls": [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]}
        return {"content": parsed.content}
    return parsed.model_dump(mode="json") if hasattr(parsed, "model_dump") else parsed


class Progress:
    """``[12/500] 3.4 answers/min, ETA 2h13m`` on a terminal's stderr; nothing elsewhere."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.shown = stream.isatty()
        self.started = time.monotonic()

    def tick(self) -> None:
        self.done += 1
        if not self.shown:
            return
        minutes = (time.monotonic() - self.started) / 60
        rate = self.done / minutes if minutes > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        eta = f"{int(left // 60)}h{int(left % 60):02d}m" if left >= 60 else f"{left:.1f} min"
        self.stream.write(f"\r\x1b[K[{self.done}/{self.total}] {rate:.1f} answers/min, ETA {eta}")
        self.stream.flush()

    def end(self) -> None:
        if self.shown:
            self.stream.write("\n")


def run_batch(ensemble: Any, lines: list[BatchLine], target: Path, in_order: bool) -> int:
    """Answer every line (``read_lines``) not in ``target`` yet; 0 when every line was answered."""
    skipped = done_ids(target)
    todo = [line for line in lines if line.id not in skipped]
    progress = Progress(len(todo), sys.stderr)
    failed = 0
    with target.open("a", encoding="utf-8") as sink:
        for line in [line for line in todo if line.request is None]:
            failed += _write(sink, line, None, line.error, progress)
        ready = [line for line in todo if line.request is not None]
        answered: Generator[Any, None, None] = ensemble.answers([line.request for line in ready], ordered=in_order)
        try:
            for got in answered:
                error = str(got.error) if got.error is not None else None
                failed += _write(sink, ready[got.index], got.final, error, progress)
        finally:
            answered.close()  # (Ctrl-C) the answers still running are cancelled; OUT keeps whole lines
            progress.end()
    total = len(lines) - len(skipped & {line.id for line in lines})
    print(f"specem: {total - failed} of {total} answered into {target}" + (f"; {failed} failed" if failed else ""),
          file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


def _write(sink: TextIO, line: BatchLine, final: FinalEvent | None, error: str | None, progress: Progress) -> int:
    """One result line (whole, flushed); 1 if it is an error (said on stderr with the line's number)."""
    if final is not None and final.finish_reason == "cancelled":
        return 0  # stopped by Ctrl-C: not written, so a rerun answers it
    if error is not None:
        print("\r\x1b[K" if progress.shown else "", end="", file=sys.stderr)
        print(f"specem: line {line.number} (id {printable(line.id)}): {printable(error)}", file=sys.stderr)
    sink.write(json.dumps(result_of(line, final, error), ensure_ascii=False) + "\n")
    sink.flush()
    progress.tick()
    return 1 if error is not None else 0


def check_batch_arguments(prompt: str | None, batch: str | None, output: str | None) -> None:
    if batch is None:
        if prompt is None:
            raise SettingError("give a prompt (or - to read it from stdin), or --batch IN.jsonl -o OUT.jsonl", "prompt")
        if output is not None:
            raise SettingError("-o/--output goes with --batch", "output")
        return
    if prompt is not None:
        raise SettingError("give a prompt or --batch, not both", "prompt")
    if output is None:
        raise SettingError("--batch needs -o OUT.jsonl: where the results go (a rerun skips what it holds)", "output")
    if Path(output).resolve() == Path(batch).resolve():
        raise SpecemError("--batch and -o name the same file; the results need a file of their own")
