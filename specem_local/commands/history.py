"""``specem history``: list, search, show, export and delete what every front end recorded."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from specem_local.commands.terminal import print_table, whole_number
from specem_local.errors import SpecemError
from specem_local.storage.chat_files import chat_markdown, chat_to_json, export_chat
from specem_local.storage.history import History
from specem_local.text import printable, when

MAX_COUNT = 1_000_000_000  # SQLite's LIMIT takes a 64-bit integer; no history holds more chats


def probability(text: str) -> float:
    """A probability from the command line, 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not from 0 to 1")
    return value


def cmd_history_list(args: argparse.Namespace) -> int:
    chats = History().chats(limit=args.count or None, origin=args.origin)
    if args.json:
        print(json.dumps([chat.__dict__ for chat in chats], ensure_ascii=False, indent=1))
    elif not chats:
        print("No chats recorded yet: specem-chat and specem run record their answers here.", file=sys.stderr)
    else:
        print_table(
            ["ID", "UPDATED", "FROM", "MESSAGES", "TITLE"],
            [[c.id, when(c.updated), c.origin, c.messages, c.title] for c in chats],
        )
    return 0


def cmd_history_search(args: argparse.Namespace) -> int:
    found = History().search(" ".join(args.words), limit=args.count or -1)
    if args.json:
        print(json.dumps([match.__dict__ for match in found], ensure_ascii=False, indent=1))
    elif not found:
        print("No message has all of those words.", file=sys.stderr)
    else:
        rows = [[m.chat_id, when(m.updated), m.role, m.snippet] for m in found]
        print_table(["ID", "UPDATED", "ROLE", "MATCH"], rows)
    return 0


def cmd_history_unsure(args: argparse.Namespace) -> int:
    found = History().unsure(args.below, limit=args.count or -1)
    if args.json:
        print(json.dumps([answer.__dict__ for answer in found], ensure_ascii=False, indent=1))
    elif not found:
        print(f"No answer with a confidence below {args.below}.", file=sys.stderr)
    else:
        rows = [[a.chat_id, when(a.updated), f"{a.confidence:.2f}", a.begins] for a in found]
        print_table(["ID", "UPDATED", "CONFIDENCE", "ANSWER"], rows)
    return 0


def cmd_history_show(args: argparse.Namespace) -> int:
    chat = History().load(args.id)
    print(json.dumps(chat_to_json(chat), ensure_ascii=False, indent=1) if args.json else printable(chat_markdown(chat)))
    return 0


def cmd_history_export(args: argparse.Namespace) -> int:
    chat = History().load(args.id)
    suffix = "md" if args.format == "markdown" else "json"
    named = re.sub(r"[^\w.-]", "_", chat.id)[:100]  # an id from a chat file is no path to follow
    target = Path(args.output) if args.output else Path.cwd() / f"specem-chat-{named}.{suffix}"
    export_chat(chat, target, args.format)  # a failed write is a SpecemError, never "Exported"
    print(f"Exported to {'standard output' if args.output == '-' else printable(str(target))}", file=sys.stderr)
    return 0


def cmd_history_delete(args: argparse.Namespace) -> int:
    if not History().delete(args.id):
        raise SpecemError(f"no chat {args.id!r} in the history; `specem history list` shows the ids")
    print(f"Deleted {args.id}", file=sys.stderr)
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser("history", help="what the chat app, specem run and the server answered")
    history.set_defaults(handler=cmd_history_list, count=20, origin=None, json=False)
    actions = history.add_subparsers(dest="history_command", metavar="ACTION")
    listing = actions.add_parser("list", help="the most recent chats (the default action)")
    listing.add_argument(
        "-n", "--count", type=whole_number(0, MAX_COUNT), default=20, help="how many (default 20; 0 = all)"
    )
    listing.add_argument(
        "--origin", choices=("chat", "run", "serve", "api", "import"), help="only those from one front end"
    )
    listing.add_argument("--json", action="store_true", help="as JSON")
    listing.set_defaults(handler=cmd_history_list)
    search = actions.add_parser("search", help="messages with all of these words (full text)")
    search.add_argument("words", nargs="+", help="words to look for, in any order")
    search.add_argument(
        "-n", "--count", type=whole_number(0, MAX_COUNT), default=20, help="how many matches (default 20; 0 = all)"
    )
    search.add_argument("--json", action="store_true", help="as JSON")
    search.set_defaults(handler=cmd_history_search)
    unsure = actions.add_parser("unsure", help="answers the ensemble was unsure of, least sure first")
    unsure.add_argument("--below", type=probability, default=0.5, help="a confidence below this (default 0.5)")
    unsure.add_argument(
        "-n", "--count", type=whole_number(0, MAX_COUNT), default=20, help="how many (default 20; 0 = all)"
    )
    unsure.add_argument("--json", action="store_true", help="as JSON")
    unsure.set_defaults(handler=cmd_history_unsure)
    show = actions.add_parser("show", help="one chat, as Markdown (or --json with every round)")
    show.add_argument("id", help="a chat id from `specem history list`")
    show.add_argument("--json", action="store_true", help="the whole record: every round and final event")
    show.set_defaults(handler=cmd_history_show)
    export = actions.add_parser("export", help="write one chat to a file (user-only permissions)")
    export.add_argument("id", help="a chat id from `specem history list`")
    export.add_argument(
        "-o", "--output", help="the file, or - for standard output (default: ./specem-chat-ID.md or .json)"
    )
    export.add_argument("--format", choices=("markdown", "json"), default="markdown", help="default markdown")
    export.set_defaults(handler=cmd_history_export)
    delete = actions.add_parser("delete", help="delete one chat for good")
    delete.add_argument("id", help="a chat id from `specem history list`")
    delete.set_defaults(handler=cmd_history_delete)
