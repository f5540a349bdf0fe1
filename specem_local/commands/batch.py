"""``specem run --batch IN.jsonl -o OUT.jsonl``: many requests, up to ``parallel`` answered at
once, one result per line of OUT as each finishes (``--in-order``: in the order of IN).

A line of IN is a JSON object: ``prompt`` (text) or ``messages`` (a conversation), an optional
``id``, and optionally its own ``schema``, ``json``, ``grammar``, ``regex``, ``tools``,
``tool_choice``, ``think`` and ``[ensemble]`` settings (``max_tokens``, ``temperature``, ...)
over the command's, and ``label``: the right option of an answer among options, which the
batch learns from (``batch_learning.py``). A line of OUT is ``{"id", "line", "text", "parsed",
"finish_reason", "tokens", "seconds"}`` (``reasoning`` when it thought first; ``predicted_tokens``
and ``unpredicted_tokens`` when a ``prediction`` was read ahead; ``label``, ``right``,
``option_scores`` and ``options`` when it had a label), or ``{"id", "line", "error"}``.

Resuming keys on the id: a line's own ``id``, else one made from its content (``#`` and 12 hex
digits of its SHA-256; a repeat of the same line gets ``-2``, ``-3``...), so editing IN never
moves an answer to another line. A rerun skips the ids OUT holds an answer for; the error
records of IN's ids are dropped from OUT and those lines run again (a fixed line is answered).
OUT only ever holds whole lines. A bad line is said with its number, and the others run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from specem_local.commands.batch_learning import BatchLearning, label_index
from specem_local.commands.terminal import printable
from specem_local.errors import SettingError, SpecemError
from specem_local.events import FinalEvent

if TYPE_CHECKING:  # the engine loads when a batch runs, not with the command line
    from specem_local.engine import Ask

OWN_FORMAT = ("schema", "json", "grammar", "regex", "tools")  # a line with one of these overrides the command's
BOM = "\ufeff"


@dataclass(frozen=True)
class BatchLine:
    """One request of IN: its id, where it is, and its ask (or why it is bad); ``label``: which
    of its options is right, when the line says."""

    id: str
    number: int
    ask: Ask | None
    error: str | None = None
    label: int | None = None


def read_lines(path: Path, defaults: dict[str, Any]) -> list[BatchLine]:
    """Every line of IN, checked for what can be checked without the models. Lines end at
    ``\\n`` only: JSON strings may hold U+2028 or U+0085, which ``str.splitlines`` would split at."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise SettingError(f"--batch {path}: {error.strerror or error}", "batch") from None
    lines, seen = [], set()
    repeats: dict[str, int] = {}
    for number, raw in enumerate(text.removeprefix(BOM).split("\n"), start=1):
        if not raw.strip():
            continue
        line = parse_line(raw, number, defaults)
        if line.id.startswith("#") and line.ask is not None:  # an id made from the content
            repeats[line.id] = repeats.get(line.id, 0) + 1
            if repeats[line.id] > 1:
                line = BatchLine(f"{line.id}-{repeats[line.id]}", number, line.ask, label=line.label)
        if line.id in seen:
            line = BatchLine(line.id, number, None, f"the id {line.id!r} is used by an earlier line")
        seen.add(line.id)
        lines.append(line)
    return lines


def parse_line(raw: str, number: int, defaults: dict[str, Any]) -> BatchLine:
    try:
        item = json.loads(raw)
    except (ValueError, RecursionError) as error:
        return BatchLine(f"line {number}", number, None, f"not JSON ({str(error)[:80]})")
    if not isinstance(item, dict):
        return BatchLine(f"line {number}", number, None, 'a line must be a JSON object with a "prompt" or "messages"')
    given_id = item.pop("id", None)
    if given_id is None:
        line_id = "#" + hashlib.sha256(json.dumps(item, sort_keys=True).encode("utf-8", "replace")).hexdigest()[:12]
    elif not isinstance(given_id, (str, int)) or isinstance(given_id, bool) or not _unicode(str(given_id)):
        return BatchLine(f"line {number}", number, None, '"id" must be text (valid Unicode) or a whole number')
    else:
        line_id = str(given_id)
    prompt = item.pop("prompt", None) if "prompt" in item else item.pop("messages", None)
    if "messages" in item:
        return BatchLine(line_id, number, None, 'give "prompt" or "messages", not both')
    if not (isinstance(prompt, str) and prompt.strip()) and not (isinstance(prompt, list) and prompt):
        return BatchLine(line_id, number, None, 'needs a "prompt" (text) or "messages" (a conversation)')
    from specem_local.engine import ask_from

    labelled, label = "label" in item, item.pop("label", None)
    own_format = any(key in item for key in OWN_FORMAT)
    base = {k: v for k, v in defaults.items() if not (own_format and k == "output_format")}
    try:
        ask = ask_from(prompt, {**base, **item})
        return BatchLine(line_id, number, ask, label=label_index(ask, label) if labelled else None)
    except SettingError as error:  # a key that is neither the ask's nor a setting, a label of no option
        return BatchLine(line_id, number, None, str(error))


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON can hold one, no file can
        return False
    return True


def check_output(path: Path) -> None:
    """OUT, checked before any model loads: a regular file (or none yet) that can be written.
    A folder, a device or a pipe (``/dev/stdout``, ``/dev/full``) is refused: OUT is read back
    to resume, and written whole lines at a time."""
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise SettingError(f"-o {path}: {what}; give the path of a file for the results", "output")
    if not path.parent.is_dir():
        raise SettingError(f"-o {path}: the folder {path.parent} does not exist", "output")
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as error:
        raise SettingError(f"-o {path}: cannot be written ({error.strerror or error})", "output") from None


def answered_records(path: Path, asked: set[str]) -> dict[str, dict[str, Any]]:
    """The answers OUT holds, by id. OUT is made whole first: a last line cut short by a
    crash is dropped (kept, with its newline, if it is a whole record), and the error records of
    ``asked`` ids are dropped, so those lines run again."""
    data = path.read_bytes() if path.exists() else b""
    records = []
    for raw in data.decode("utf-8", errors="replace").split("\n"):
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            continue  # a blank line, or one a crash cut short
        if isinstance(record, dict) and "id" in record:
            records.append((raw, record))
    kept = [(raw, r) for raw, r in records if not ("error" in r and str(r["id"]) in asked)]
    whole = "".join(raw + "\n" for raw, _ in kept).encode("utf-8")
    if whole != data:
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(whole)
        os.replace(partial, path)
    return {str(r["id"]): r for _, r in kept if "error" not in r}


def result_of(
    line: BatchLine, final: FinalEvent | None, error: str | None, learned: dict[str, Any] | None = None
) -> dict[str, Any]:
    if final is None:
        return {"id": line.id, "line": line.number, "error": error}
    record: dict[str, Any] = {"id": line.id, "line": line.number, "text": final.text, "parsed": plain(final.parsed)}
    if final.reasoning:
        record["reasoning"] = final.reasoning
    record.update(finish_reason=final.finish_reason, tokens=final.tokens, seconds=round(final.seconds, 3))
    if final.confidence is not None:
        record.update(confidence=round(final.confidence, 4), unsure=final.unsure)
    if final.escalated:  # the reserve member's answer is the text: say so, and keep the ensemble's
        record.update(escalated=final.escalated, ensemble_text=final.ensemble_text)
    if final.predicted_tokens or final.unpredicted_tokens:  # a prediction was read ahead
        record.update(predicted_tokens=final.predicted_tokens, unpredicted_tokens=final.unpredicted_tokens)
    return {**record, **(learned or {})}


def plain(parsed: Any) -> Any:
    """A parsed answer as JSON: a tool reply as its calls or its message (a line's format is
    JSON, so anything else already is)."""
    from specem_local.engine import ToolReply

    if isinstance(parsed, ToolReply):
        if parsed.calls:
            return {"tool_calls": [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]}
        return {"content": parsed.content}
    return parsed


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


Recorder = Callable[[BatchLine, Any], None]  # (line, its answer's stream): records it in the history


class Results:
    """OUT, appended a whole line at a time: a write that fails (a full disk) is taken back to
    the last whole line and said in one line; the lines before it stand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path.open("ab", buffering=0)

    def add(self, record: dict[str, Any]) -> None:
        text = json.dumps(record, ensure_ascii=False)
        if not _unicode(text):  # text a user sent, quoted in an error (a lone surrogate): escaped, still JSON
            text = json.dumps(record)
        data, end = (text + "\n").encode("utf-8"), self.file.tell()
        try:
            written = 0
            while written < len(data):
                written += self.file.write(data[written:]) or 0
        except OSError as failure:
            with contextlib.suppress(OSError):
                self.file.truncate(end)
            raise SpecemError(f"-o {self.path}: the results cannot be written ({failure.strerror or failure}); "
                              "the lines before are whole, and a rerun goes on from them") from None  # fmt: skip

    def close(self) -> None:
        self.file.close()


def review_path(target: Path) -> Path:
    """Where ``--min-confidence`` writes the answers a person should look at: beside OUT."""
    return target.with_name(f"{target.stem}.review{target.suffix or '.jsonl'}")


def run_batch(
    ensemble: Any,
    lines: list[BatchLine],
    target: Path,
    in_order: bool,
    record: Recorder | None = None,
    min_confidence: float | None = None,
    source: Path | None = None,
) -> int:
    """Answer every line (``read_lines``) OUT holds no answer for; 0 when every line was
    answered. ``record``: called with each answer's stream as it starts (the history).
    ``min_confidence``: answers less sure than this are written to ``review_path`` too. Lines
    with a ``label`` teach their task's weights (``BatchLearning``; ``source``: IN)."""
    done = answered_records(target, {line.id for line in lines})
    todo = [line for line in lines if line.id not in done]
    learning = _learning(ensemble, lines, done, source or target)
    progress = Progress(len(todo), sys.stderr)
    failed = 0
    sink = Results(target)
    review = Results(review_path(target)) if min_confidence is not None else None
    try:
        bad = [line for line in todo if line.ask is None]  # in IN's order: each before the next answer, in order
        for line in bad if not in_order else ():
            failed += _write(sink, line, None, line.error, progress)
        ready = [line for line in todo if line.ask is not None]

        def started(index: int, stream: Any) -> None:
            if record is not None:
                record(ready[index], stream)
            line = ready[index]
            if learning is not None and line.ask is not None:
                learning.watch(index, line.ask, line.label, stream)

        answered: Generator[Any, None, None] = ensemble.answers(
            [line.ask for line in ready], ordered=in_order, started=started
        )
        try:
            for got in answered:
                error = _said(got.error) if got.error is not None else None
                while in_order and bad and bad[0].number < ready[got.index].number:
                    line = bad.pop(0)
                    failed += _write(sink, line, None, line.error, progress)
                line = ready[got.index]
                learned = learning.answered(got.index) if learning is not None else None
                failed += _write(sink, line, got.final, error, progress, learned)
                unsure = got.final is not None and (got.final.confidence or 0.0) < (min_confidence or 0.0)
                if review is not None and unsure and got.final.finish_reason != "cancelled":
                    review.add(result_of(line, got.final, None, learned))
        finally:
            answered.close()  # (Ctrl-C, a full disk) the answers still running are cancelled; OUT keeps whole lines
        for line in bad if in_order else ():  # those after the last answer
            failed += _write(sink, line, None, line.error, progress)
    finally:
        sink.close()
        if review is not None:
            review.close()
        progress.end()
        if learning is not None:
            learning.said()
    total = len(lines) - len(done.keys() & {line.id for line in lines})
    print(f"specem: {total - failed} of {total} answered into {target}" + (f"; {failed} failed" if failed else ""),
          file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


def _said(error: Exception) -> str:
    """An item's error in one line: a ``SpecemError`` as it is, anything else as the bug it is."""
    return str(error) if isinstance(error, SpecemError) else f"unexpected {type(error).__name__}: {error}"


def _learning(
    ensemble: Any, lines: list[BatchLine], done: dict[str, dict[str, Any]], source: Path
) -> BatchLearning | None:
    """What the labelled lines teach, when there are any: those OUT holds already first."""
    if all(line.label is None for line in lines):
        return None
    learning = BatchLearning(ensemble.members, ensemble.settings.task, source)
    for line in lines:
        if line.ask is not None and line.label is not None and line.id in done:
            learning.resumed(line.ask, line.label, done[line.id])
    learning.fit_all()
    return learning


def _write(
    sink: Results,
    line: BatchLine,
    final: FinalEvent | None,
    error: str | None,
    progress: Progress,
    learned: dict[str, Any] | None = None,
) -> int:
    """One result line; 1 if it is an error (said on stderr with the line's number)."""
    if final is not None and final.finish_reason == "cancelled":
        return 0  # stopped by Ctrl-C: not written, so a rerun answers it
    if error is not None:
        print("\r\x1b[K" if progress.shown else "", end="", file=sys.stderr)
        print(f"specem: line {line.number} (id {printable(line.id)}): {printable(error)}", file=sys.stderr)
    sink.add(result_of(line, final, error, learned))
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
    check_output(Path(output))
