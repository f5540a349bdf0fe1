"""``specem run``: one prompt answered on the terminal, streamed (segments coloured by their
authors with ``--authors``), or as JSON events (``--json``); with a format, the parsed answer
alone on stdout once it is whole; with ``--functions`` or ``--mcp``, a whole agent loop (the calls
and their results on stderr, the final answer on stdout). Recorded in the history unless told not to.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specem_local.commands.answer_printer import AnswerPrinter
from specem_local.commands.batch import BatchLine, check_batch_arguments, read_lines, run_batch
from specem_local.commands.functions import call_runner, load_functions, terminal_asker
from specem_local.commands.history import probability
from specem_local.commands.terminal import (
    add_mcp_flags,
    add_settings_flags,
    config_from_args,
    printable,
    recording_off,
    settings_overrides,
    stopping_cleanly,
    whole_number,
)
from specem_local.dirs import read_text
from specem_local.errors import SettingError, SpecemError
from specem_local.models.config import model_colours

if TYPE_CHECKING:
    from specem_local.engine import AnswerStream, OutputFormat
    from specem_local.mcp import McpTools
    from specem_local.storage.history import AnswerRecord


def read_prompt(prompt: str) -> str:
    """The prompt from the argument or stdin, as text. Bytes that are not UTF-8 become U+FFFD
    (with a warning) rather than an error after the models have loaded."""
    if prompt == "-":
        data = sys.stdin.buffer.read()
    else:
        data = prompt.encode("utf-8", "surrogateescape")  # undecodable argv bytes come back as they were
    text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > data.count("\ufffd".encode()):
        warnings.warn("the prompt is not valid UTF-8; its undecodable bytes became U+FFFD", stacklevel=2)
    if not text.strip():
        raise SpecemError("the prompt is empty; give it as an argument, or '-' to read it from stdin")
    return text


def cmd_run(args: argparse.Namespace) -> int:
    """``specem run``; with ``--mcp``, the config's servers run for the whole command: started
    before any model loads (one that fails is said once, and its tools left out), all ended
    when it ends."""
    if args.mcp is None:
        return run_prompt(args, None)
    from specem_local.mcp import McpTools, read_config

    servers = read_config(args.mcp)  # a bad file is said before anything starts
    if args.batch is not None:
        raise SettingError("--mcp runs one agent loop; give each batch line its own tools instead", "tools")
    if args.tools is not None:
        raise SettingError("give --tools or --mcp, not both", "tools")
    with McpTools.start(servers, start_seconds=args.mcp_timeout, call_seconds=args.mcp_timeout) as mcp:
        for problem in mcp.problems:
            print(f"specem: warning: {printable(problem)}", file=sys.stderr, flush=True)
        return run_prompt(args, mcp)


def run_prompt(args: argparse.Namespace, mcp: McpTools | None) -> int:
    from specem_local.engine import Ask, Ensemble, FormatAsk, think_plan
    from specem_local.settings import with_overrides

    check_batch_arguments(args.prompt, args.batch, args.output)
    if args.min_confidence is not None and args.batch is None:
        raise SettingError("--min-confidence goes with --batch (for one answer: --abstain-below)", "min_confidence")
    prompt = read_prompt(args.prompt) if args.batch is None else ""
    functions = load_functions(args.functions) if args.functions else []
    offered: list[Any] = [*functions, *(mcp.specs if mcp is not None else [])]  # the loop's tools, both sources
    if args.approve and not (functions or mcp):
        raise SettingError("--approve asks before each call of --functions or --mcp; give either", "tools")
    if mcp is not None and not offered:
        raise SettingError(f"--mcp {args.mcp}: no tools to offer (no server started, or none lists a tool)", "mcp")
    approve = terminal_asker() if args.approve else None  # no terminal is said before any model loads
    run_call = call_runner(functions, mcp, approve)
    output = format_arguments(args, offered)  # a bad schema is said before any model loads
    config = config_from_args(args)
    think = think_argument(args)
    settings = with_overrides(config.ensemble, **settings_overrides(args))
    think_plan(think, settings.max_tokens, settings.reasoning_budget, output is not None)  # and a bad --think
    if args.batch is not None:
        if functions:
            raise SettingError("--functions runs one agent loop; give each batch line its own tools instead", "tools")
        defaults: dict[str, Any] = {"output_format": output} if output is not None else {}
        if think is not None:  # a line with its own format thinks as the command says too
            defaults["think"] = think
        lines = read_lines(Path(args.batch), defaults)  # a missing file is said before any model loads
        recorder = None if recording_off(args.no_log) else batch_recorder()
        with Ensemble.from_config(config, **settings_overrides(args)) as ensemble, stopping_cleanly():
            return run_batch(
                ensemble, lines, Path(args.output), args.in_order, recorder, args.min_confidence, Path(args.batch)
            )
    with Ensemble.from_config(config, **settings_overrides(args)) as ensemble, stopping_cleanly():
        if ensemble.plain_generation and not args.json:
            print(f"[one model ({ensemble.model_names[0]}): plain generation, no ensembling]", file=sys.stderr)
        advice = ensemble.mix_advice()
        if advice:
            print(f"specem: note: {advice}", file=sys.stderr)
        escalating = bool(ensemble.reserve) and ensemble.settings.escalate_below > 0
        show = AnswerPrinter(args, model_colours(config), output is not None, ensemble.settings.max_tokens, escalating)
        recorded = None if recording_off(args.no_log) else start_record(prompt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        answering, rounds = output, 0
        while True:
            stream = ensemble.stream(Ask(list(messages), output=answering, think=think))
            if recorded is not None:
                stream.log_to(recorded, lambda said: print(f"specem: warning: {said}", file=sys.stderr))
            final, code = show.answer(stream, last=not offered)
            if final is None:
                return code
            calls = final.parsed.calls if offered and final.parsed is not None else ()
            if not calls:
                show.parsed(final) if offered else None
                return 0
            results = [(call, run_call(call)) for call in calls]
            for call, result in results:
                said = f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)}) → {result}"
                print(f"[{printable(said)}]", file=sys.stderr, flush=True)
            messages += called_and_answered(results)
            recorded = recorded and next_record(recorded, [result for _, result in results], prompt)
            rounds += 1
            if rounds == args.chain_limit:  # the last results: the next answer is a message that reads them
                answering = FormatAsk(tools=offered, tool_choice="none").compiled()


def called_and_answered(results: list[tuple[Any, str]]) -> list[dict[str, Any]]:
    """The calls the models made and each one's result, as the next answer reads them."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c, _ in results
    ]
    answered = [{"role": "tool", "tool_call_id": c.id, "content": result} for c, result in results]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *answered]


def next_record(record: AnswerRecord, results: list[str], prompt: str) -> AnswerRecord | None:
    """The loop's next answer in the same chat of the history, after the results."""
    from specem_local.storage.chats import Chat, Turn, title_for

    chat = Chat(id=record.chat_id, title=title_for(prompt), origin="run")
    try:
        return record.history.start_answer(chat, Turn("assistant", ""), [Turn("tool", r) for r in results])
    except SpecemError as error:
        print(f"specem: warning: the rest of the loop is not recorded in the history: {error}", file=sys.stderr)
        return None


def think_argument(args: argparse.Namespace) -> Any:
    """``--think[=LEVEL]`` / ``--no-think`` as ``think=`` takes it (None: the default)."""
    if args.no_think:
        if args.think is not None:
            raise SettingError("give --think or --no-think, not both", "think")
        return False
    if args.think is None or args.think == "true":
        return None if args.think is None else True
    return int(args.think) if args.think.isdigit() else args.think


def format_arguments(args: argparse.Namespace, functions: list[Any]) -> OutputFormat | None:
    """``--schema FILE``, ``--format json``, ``--grammar FILE`` (Lark or GBNF), ``--regex``,
    ``--tools FILE``, or the agent loop's tools (``functions``: ``--functions FILE.py``'s, loaded,
    and ``--mcp``'s specs): the answer's format, checked and compiled once, before any model loads
    (a ``SettingError`` names what is wrong)."""
    from specem_local.engine import FormatAsk

    if args.tools is not None and functions:
        raise SettingError("give --tools or --functions, not both", "tools")
    tools: Any = functions or None
    if args.tools is not None:
        try:
            tools = json.loads(read_text(Path(args.tools), "--tools", pipes=True))
        except (ValueError, RecursionError):
            raise SettingError(f"--tools {args.tools}: not JSON; give a JSON list of functions", "tools") from None
    schema: Any = read_text(Path(args.schema), "--schema", pipes=True) if args.schema is not None else None
    if args.choices is not None:
        given = {"--schema": schema is not None, "--format json": args.format == "json", "--tools": tools is not None,
                 "--grammar": args.grammar is not None, "--regex": args.regex is not None}  # fmt: skip
        clash = next((flag for flag, there in given.items() if there), None)
        if clash is not None:
            raise SettingError(f"give --choices or {clash}, not both", "schema")
        schema = {"enum": choices_argument(args.choices)}
    return FormatAsk(
        schema=schema,
        json=args.format == "json",
        grammar=read_text(Path(args.grammar), "--grammar", pipes=True) if args.grammar is not None else None,
        regex=args.regex,
        tools=tools,
    ).compiled()


def choices_argument(text: str) -> list[str]:
    """``--choices a,b,c``: the options, each once, none empty."""
    choices = [choice.strip() for choice in text.split(",")]
    if len(choices) < 2 or not all(choices):
        raise SettingError(f"--choices {text[:60]!r}: give two or more options, separated by commas", "choices")
    if len(set(choices)) < len(choices):
        raise SettingError(f"--choices {text[:60]!r}: an option is given twice", "choices")
    return choices


def batch_recorder() -> Callable[[BatchLine, AnswerStream], None] | None:
    """Each batch answer in the history as it streams, a chat of its own (as the server records
    each request); a history that cannot be written is said once and the batch goes on."""
    from specem_local.engine import recorded_turns
    from specem_local.storage.chats import Turn
    from specem_local.storage.history import History

    said: list[str] = []

    def warn(message: str) -> None:
        if not said:
            said.append(message)
            print(f"specem: warning: {message} (--no-log skips the history)", file=sys.stderr)

    try:
        history = History()
    except SpecemError as error:
        warn(f"the batch is not recorded in the history: {error}")
        return None

    def record(line: BatchLine, stream: AnswerStream) -> None:
        assert line.ask is not None
        asked = [Turn(role, text) for role, text in recorded_turns(line.ask.prompt)]
        try:
            stream.log_to(history.start_new_chat("run", asked), warn)
        except SpecemError as error:
            warn(f"a batch answer is not recorded in the history: {error}")

    return record


def start_record(prompt: str) -> AnswerRecord | None:
    """Record this answer in the history (as it streams); a history that cannot be written is
    said once and the answer goes on."""
    from specem_local.storage.chats import Turn
    from specem_local.storage.history import History

    try:
        return History().start_new_chat("run", [Turn("user", prompt)])
    except SpecemError as error:
        print(f"specem: warning: not recorded in the history: {error} (--no-log skips it)", file=sys.stderr)
        return None


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    run = commands.add_parser("run", parents=[common], help="answer one prompt with the ensemble")
    run.add_argument("prompt", nargs="?", help="the prompt, or - to read it from stdin")
    run.add_argument("--authors", action="store_true", help="colour each segment by the model that wrote it")
    run.add_argument("--json", action="store_true", help="write the events as JSON lines")
    run.add_argument(
        "--no-log", action="store_true", help="do not record this answer in the history (or set SPECEM_NO_LOG=1)"
    )
    many = run.add_argument_group("many requests (docs/api.md#many-answers-at-once)")
    many.add_argument("--batch", metavar="IN.jsonl", help="one request per line, up to --parallel answered at once")
    many.add_argument("-o", "--output", metavar="OUT.jsonl", help="with --batch: the results, one per line (resumable)")
    many.add_argument("--in-order", action="store_true", help="with --batch: write the results in the order of IN")
    many.add_argument(
        "--min-confidence",
        type=probability,
        metavar="P",
        help="with --batch: answers less sure than P are also written to OUT.review.jsonl, for a person to check",
    )
    shape = run.add_argument_group("an answer a program can parse (printed alone, once whole)")
    shape.add_argument("--schema", metavar="FILE", help="a JSON Schema the answer must match")
    shape.add_argument("--format", choices=("json",), help="json: any JSON object")
    shape.add_argument("--grammar", metavar="FILE", help="a Lark or GBNF grammar the answer must match")
    shape.add_argument("--regex", metavar="REGEX", help="a regular expression the whole answer must match")
    shape.add_argument(
        "--choices",
        metavar="A,B,...",
        help="the answer is one of these options (comma-separated): every member scores each, up to 20 (more are "
        "written in rounds; docs/choices.md)",
    )
    shape.add_argument(
        "--tools", metavar="FILE", help="functions the models may call (a JSON list): prints the calls, or the message"
    )
    shape.add_argument(
        "--functions",
        metavar="FILE.py",
        help="Python functions the models may call, run here: a whole agent loop, the final answer on stdout",
    )
    add_mcp_flags(shape, "the models may call them, run here: the same agent loop as --functions")
    shape.add_argument(
        "--chain-limit",
        type=whole_number(0, 100),
        default=5,
        help="with --functions or --mcp: rounds of results at most, then the models answer with a message "
        "(default 5; 0: no limit)",
    )
    shape.add_argument(
        "--approve",
        "--tools-approve",
        action="store_true",
        help="with --functions or --mcp: ask on the terminal before each call is run",
    )
    shape.add_argument(
        "--think",
        nargs="?",
        const="true",
        metavar="LEVEL",
        help="think first, then the format: low, medium, high or a number of tokens (default: reasoning_budget)",
    )
    shape.add_argument("--no-think", action="store_true", help="the format from the first token (no thinking)")
    shape.add_argument("--hide-thinking", action="store_true", help="do not show the thinking on stderr")
    add_settings_flags(run)
    run.set_defaults(handler=cmd_run)
