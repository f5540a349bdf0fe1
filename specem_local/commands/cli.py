"""The ``specem`` command line: ``models list|pull|verify``, ``run``, ``bench``, ``eval``.

A thin consumer of the library: every failure the user can fix arrives as a ``SpecemError``
and is printed as one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specem_local.commands import history as history_commands
from specem_local.commands import models as model_commands
from specem_local.commands import rpc as rpc_commands
from specem_local.commands import weights as weights_commands
from specem_local.commands.terminal import (
    add_settings_flags,
    check_port_free,
    config_from_args,
    interrupted_code,
    printable,
    recording_off,
    settings_overrides,
    stop_on_termination,
    whole_number,
)
from specem_local.dirs import read_text
from specem_local.errors import SettingError, SpecemError
from specem_local.events import FinalEvent, RoundEvent, StartEvent, finish_note, member_news
from specem_local.models.config import builtin_ensembles, model_colours

if TYPE_CHECKING:
    from specem_local.engine.formats import OutputFormat
    from specem_local.storage.history import AnswerRecord

ANSI_COLOURS = {
    "red": 31,
    "green": 32,
    "yellow": 33,
    "blue": 34,
    "magenta": 35,
    "cyan": 36,
    "white": 37,
    "bright_red": 91,
    "bright_green": 92,
    "bright_yellow": 93,
    "bright_blue": 94,
    "bright_magenta": 95,
    "bright_cyan": 96,
}


# -- specem run ------------------------------------------------------------------------------------
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
    from specem_local.engine import Ensemble
    from specem_local.engine.thinking import plan
    from specem_local.settings import with_overrides

    prompt = read_prompt(args.prompt)
    constraint = constraint_arguments(args)  # a bad schema is said before any model loads
    config = config_from_args(args)
    think = think_argument(args)
    settings = with_overrides(config.ensemble, **settings_overrides(args))
    plan(think, settings.max_tokens, settings.reasoning_budget, constraint is not None)  # and a bad --think
    colours = model_colours(config)
    with Ensemble.from_config(config, **settings_overrides(args)) as ensemble:
        if ensemble.plain_generation and not args.json:
            print(f"[one model ({ensemble.model_names[0]}): plain generation, no ensembling]", file=sys.stderr)
        advice = ensemble.mix_advice()
        if advice:
            print(f"specem: note: {advice}", file=sys.stderr)
        stream = ensemble.stream(prompt, output_format=constraint, think=think)
        record = None if recording_off(args.no_log) else start_record(prompt)
        if record is not None:
            stream.log_to(record, lambda said: print(f"specem: warning: {said}", file=sys.stderr))
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        previous_author: str | None = None
        origin = ""
        said: set[str] = set()  # members said to be out of the answer
        try:
            for event in stream:
                for line in [] if args.json else member_news(event, said):  # --json: the events carry it
                    print(f"\n[{printable(line)}]", file=sys.stderr, flush=True)
                if args.json:
                    print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)
                elif isinstance(event, StartEvent):
                    origin = event.weights_origin
                    for note in event.notes:
                        print(f"specem: note: {printable(note)}", file=sys.stderr, flush=True)
                elif isinstance(event, RoundEvent) and constraint:
                    if event.phase == "reasoning" and not args.hide_thinking:  # the thinking, on stderr
                        shown = printable(event.text)
                        sys.stderr.write(f"\x1b[2m{shown}\x1b[0m" if sys.stderr.isatty() else shown)
                        sys.stderr.flush()
                    continue  # the parsed answer alone is printed, once it is whole
                elif isinstance(event, RoundEvent):
                    if args.authors and colour:
                        code = ANSI_COLOURS.get(colours.get(event.author, ""), 0)
                        sys.stdout.write(f"\x1b[{code}m{printable(event.text)}\x1b[0m")
                    elif args.authors and event.author != previous_author:
                        sys.stdout.write(f"«{printable(event.author)}»{printable(event.text)}")
                    else:
                        sys.stdout.write(printable(event.text))
                    previous_author = event.author
                    sys.stdout.flush()
                elif isinstance(event, FinalEvent) and constraint:
                    if event.reasoning and not args.hide_thinking:
                        print(file=sys.stderr)  # the thinking's last line ends before the answer
                    print_parsed(event, ensemble.settings.max_tokens)
                elif isinstance(event, FinalEvent):
                    print()
                    ending = finish_note(event)
                    if ending:
                        print(f"[{ending}]", file=sys.stderr)
                    if args.authors:
                        print_legend(event, colours, colour, origin)
        except KeyboardInterrupt as stopped:  # Ctrl-C, or SIGTERM / SIGHUP (Terminated)
            stream.cancel()
            stream.final()  # what it wrote, recorded as stopped
            print("\n[stopped]", file=sys.stderr)
            return interrupted_code(stopped)
    return 0


def think_argument(args: argparse.Namespace) -> Any:
    """``--think[=LEVEL]`` / ``--no-think`` as ``think=`` takes it (None: the default)."""
    if args.no_think:
        if args.think is not None:
            raise SettingError("give --think or --no-think, not both", "think")
        return False
    if args.think is None or args.think == "true":
        return None if args.think is None else True
    return int(args.think) if args.think.isdigit() else args.think


def constraint_arguments(args: argparse.Namespace) -> OutputFormat | None:
    """``--schema FILE``, ``--format json``, ``--grammar FILE`` (Lark or GBNF), ``--regex``,
    ``--tools FILE``: the answer's format, checked and compiled once, before any model loads (a
    ``SettingError`` names what is wrong)."""
    from specem_local.engine.formats import output_format_from

    given: dict[str, Any] = {}
    if args.schema is not None:
        given["schema"] = read_text(Path(args.schema), "--schema", pipes=True)
    if args.format == "json":
        given["json"] = True
    if args.grammar is not None:
        given["grammar"] = read_text(Path(args.grammar), "--grammar", pipes=True)
    if args.regex is not None:
        given["regex"] = args.regex
    if args.tools is not None:
        try:
            given["tools"] = json.loads(read_text(Path(args.tools), "--tools", pipes=True))
        except (ValueError, RecursionError):
            raise SettingError(f"--tools {args.tools}: not JSON; give a JSON list of functions", "tools") from None
    names = {"json": "json_object", "tools": "offered"}
    return output_format_from(**{names.get(key, key): value for key, value in given.items()})


def print_parsed(final: FinalEvent, max_tokens: int) -> None:
    """A constrained answer on stdout, alone (for a script to read), once it is whole; with
    tools, the calls as a JSON list, or the message."""
    from specem_local.engine.tools import ToolReply

    if isinstance(final.parsed, ToolReply):
        reply = final.parsed
        calls = [{"name": call.name, "arguments": call.arguments} for call in reply.calls]
        text = json.dumps(calls, ensure_ascii=False) if calls else reply.content or ""
        print(printable(text) if sys.stdout.isatty() else text, flush=True)
        return
    if final.parsed is None:
        why = {
            "length": f"was cut at max_tokens ({max_tokens}) before it was whole; raise --max-tokens",
            "cancelled": "was stopped before it was whole",
        }.get(final.finish_reason, f"ended ({final.finish_reason}) before it was whole")
        raise SpecemError(f"the answer {why}")
    print(printable(final.text) if sys.stdout.isatty() else final.text, flush=True)


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


def cmd_serve(args: argparse.Namespace) -> int:
    from specem_local.engine import Ensemble
    from specem_local.server import EnsembleServer, GateRules, ServerOptions, check_binding, run_until_stopped
    from specem_local.server.gate import split_origins

    api_key = args.api_key or os.environ.get("SPECEM_API_KEY") or None
    check_binding(args.host, api_key)
    check_port_free(args.host, args.port, "is another server there?")  # before the models load, not after
    origins = split_origins([*args.allow_origin, os.environ.get("SPECEM_ORIGINS", "")])
    gate = GateRules(args.host, tuple(args.allowed_host), origins, api_key)
    options = ServerOptions(args.queue, args.max_body_bytes, not recording_off(args.no_log), gate)
    with Ensemble.from_config(config_from_args(args), **settings_overrides(args)) as ensemble:
        server = EnsembleServer(ensemble, options)
        where = f"http://{args.host}:{args.port}/v1"
        print(f"specem serve: {where} serves {', '.join(ensemble.model_names)} as model 'specem'", flush=True)
        run_until_stopped(server, args.host, args.port, args.log_level)
    return 0


def print_legend(final: FinalEvent, colours: dict[str, str], colour: bool, origin: str) -> None:
    parts = []
    for name, wins in final.wins.items():
        code = ANSI_COLOURS.get(colours.get(name, ""), 0)
        weight = final.weights.get(name)
        weight_text = f", weight {weight:.2f}" if weight is not None else ""
        label = f"\x1b[{code}m■ {printable(name)}\x1b[0m" if colour else f"«{printable(name)}»"
        parts.append(f"{label} ({wins} segments{weight_text})")
    print("  ".join(parts))
    print(
        f"{final.tokens} tokens in {final.seconds:.1f} s ({final.tokens_per_second:.1f} tok/s), "
        f"{final.rounds} rounds, {final.drafters_per_round:.1f} drafters/round, finish: {final.finish_reason}; "
        f"weights started from {origin}"
    )


# -- wiring ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specem", description="Several local LLMs answer together (SpecEM).")
    parser.add_argument("--version", action="version", version="specem-local 0.1.0")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        help="models.toml to use (default: $SPECEM_CONFIG, ./models.toml, "
        "the user config dir, the built-in demo ensemble)",
    )
    common.add_argument(
        "--ensemble", metavar="NAME", help=f"a built-in ensemble instead: {', '.join(builtin_ensembles())}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    model_commands.add_parser(commands, common)
    history_commands.add_parser(commands)

    weights_commands.add_parser(commands, common)
    rpc_commands.add_parser(commands)

    run = commands.add_parser("run", parents=[common], help="answer one prompt with the ensemble")
    run.add_argument("prompt", help="the prompt, or - to read it from stdin")
    run.add_argument("--authors", action="store_true", help="colour each segment by the model that wrote it")
    run.add_argument("--json", action="store_true", help="write the events as JSON lines")
    run.add_argument(
        "--no-log", action="store_true", help="do not record this answer in the history (or set SPECEM_NO_LOG=1)"
    )
    shape = run.add_argument_group("an answer a program can parse (printed alone, once whole)")
    shape.add_argument("--schema", metavar="FILE", help="a JSON Schema the answer must match")
    shape.add_argument("--format", choices=("json",), help="json: any JSON object")
    shape.add_argument("--grammar", metavar="FILE", help="a Lark or GBNF grammar the answer must match")
    shape.add_argument("--regex", metavar="REGEX", help="a regular expression the whole answer must match")
    shape.add_argument(
        "--tools", metavar="FILE", help="functions the models may call (a JSON list): prints the calls, or the message"
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

    serve = commands.add_parser("serve", parents=[common], help="an OpenAI-compatible endpoint on this machine")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    serve.add_argument("--port", type=whole_number(1, 65535), default=8080, help="port (default 8080)")
    serve.add_argument("--api-key", help="require Authorization: Bearer KEY on every route (or SPECEM_API_KEY)")
    serve.add_argument(
        "--queue", type=whole_number(0, 10_000), default=4, help="requests that may wait for the models (default 4)"
    )
    serve.add_argument(
        "--max-body-bytes",
        type=whole_number(1024, 1 << 30),
        default=1 << 20,
        help="largest request body (default 1 MiB)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name besides localhost and IP addresses that clients may use to reach this server "
        "(repeatable; * for any)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web page origin that may use the models, e.g. http://myapp.example:3000, * as a wildcard "
        "(repeatable; also SPECEM_ORIGINS, comma-separated); loopback pages are always allowed",
    )
    serve.add_argument(
        "--no-log", action="store_true", help="do not record the answers in the history (or set SPECEM_NO_LOG=1)"
    )
    serve.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    add_settings_flags(serve)
    serve.set_defaults(handler=cmd_serve)

    from specem_research import adaptive, bench, calibrate, evaluate, pool

    bench.add_parser(commands, common)
    calibrate.add_parser(commands, common)
    evaluate.add_parser(commands, common)
    pool.add_parser(commands)
    adaptive.add_parser(commands)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = lambda message, *_rest, **_kw: print(f"specem: {message}", file=sys.stderr)
    stop_on_termination()
    try:
        return args.handler(args)
    except SpecemError as error:
        print(f"specem: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, SettingError) else 1  # a bad setting is a usage error, as argparse's
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt as stopped:  # before an answer streams (loading, calibrating, ...): stop at once
        print("\n[stopped]", file=sys.stderr)
        return interrupted_code(stopped)


if __name__ == "__main__":
    sys.exit(main())
