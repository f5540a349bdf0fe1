"""``specem weights``: list, reset and undo the kept weights, and the personal leaderboard
(``stats``) from the user's history and choices."""

from __future__ import annotations

import argparse
import dataclasses
import json

from specem_local.commands.terminal import config_from_args, print_table
from specem_local.engine import built_in_calibrations, leaderboard, names_in, stored_weights
from specem_local.events import origin_words
from specem_local.storage.history import History
from specem_local.storage.weights import RESET, StoredWeights, WeightStore
from specem_local.text import printable, when


def cmd_weights_list(args: argparse.Namespace) -> int:
    records, damaged = WeightStore().all()
    if args.json:
        print(json.dumps([{**dataclasses.asdict(r), "weights": stored_weights(r)} for r in records], indent=2))
        return 0
    for key in damaged:
        print(printable(f"{' + '.join(names_in(key))}: damaged in the database; forget it with: specem weights reset"))
    if not records and not damaged:
        print("no weights learned yet: every ensemble starts from its prior (a built-in one from its calibration)")
    for record in records:
        print(f"{' + '.join(names_in(record.key))}: {weights_text(record)}  ({origin(record)}; {when(record.updated)})")
    for record in built_in_calibrations().values():
        items = record.calibrated_items
        print(f"built in: {' + '.join(names_in(record.key))}: {weights_text(record)}  (calibrated on {items} items)")
    return 0


def origin(record: StoredWeights) -> str:
    """Where a kept record's weights came from, in words."""
    if record.base == "built-in":
        start = "built-in"
    else:
        start = "calibrated" if record.calibrated_items else "carried" if record.answers else "prior"
    return origin_words(start, record.answers, record.calibrated_items, record.choices)


def weights_text(record: StoredWeights) -> str:
    return ", ".join(f"{name} {weight:.3f}" for name, weight in stored_weights(record).items())


def cmd_weights_reset(args: argparse.Namespace) -> int:
    store = WeightStore()
    configured = {spec.name for spec in config_from_args(args).models}
    gone = [key for key in store.ensemble_keys() if args.all or configured >= set(names_in(key))]
    for key in gone:
        store.reset(key)
    print(
        f"forgot the weights of {len(gone)} ensemble{'s' if len(gone) != 1 else ''}; "
        "they start from the prior (a built-in ensemble from its built-in calibration)"
        + ("; specem weights undo brings them back" if gone else "")
    )
    return 0


def cmd_weights_undo(args: argparse.Namespace) -> int:
    """Take back the latest choice (or reset) still in any ensemble's weights."""
    store = WeightStore()
    newest_first = dict.fromkeys(choice.ensemble for choice in reversed(store.choices()) if not choice.undone)
    undone = next(filter(None, map(store.undo_choice, newest_first)), None)
    if undone is None:
        print("no choice to undo: picks, thumbs, comparisons and resets are kept as choices (a calibration is not)")
        return 0
    ensemble = " + ".join(names_in(undone.ensemble))
    if undone.kind == RESET:
        print(printable(f"brought back the weights of {ensemble} that the reset of {when(undone.created)} forgot"))
        return 0
    rewarded = ", ".join(f"{name} {reward:g}" for name, reward in undone.rewards.items()) or "nothing to learn"
    print(printable(f"undid your {undone.kind} of {when(undone.created)} ({rewarded}) on {ensemble}"))
    return 0


def cmd_weights_stats(args: argparse.Namespace) -> int:
    made = [(choice.kind, choice.rewards) for choice in WeightStore().choices() if not choice.undone]
    board = leaderboard(History().segments_won(), made)
    if args.json:
        print(json.dumps(board, indent=2))
        return 0
    if not board:
        print("nothing recorded yet: answers in the history and your choices in specem-chat make this board")
        return 0
    rows = [
        [
            name,
            f"{entry['segments_won']:g}",
            f"+{entry['picked']:g} -{entry['picked_against']:g}",
            f"+{entry['thumbs_up']:.1f} -{entry['thumbs_down']:.1f}",
            f"{entry['best']:g}/{entry['compared']:g}",
        ]
        for name, entry in board.items()
    ]
    print_table(["MODEL", "SEGMENTS WON", "PICKS FOR/AGAINST", "THUMBS UP/DOWN", "BEST IN COMPARISONS"], rows)
    return 0


def add_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    weights = commands.add_parser("weights", help="the weights kept from answer to answer, and your choices")
    weight_commands = weights.add_subparsers(dest="weights_command", required=True, metavar="ACTION")
    listing = weight_commands.add_parser("list", help="every ensemble's kept weights, and the built-in ones")
    listing.add_argument("--json", action="store_true", help="the stored records as JSON")
    listing.set_defaults(handler=cmd_weights_list)
    reset = weight_commands.add_parser(
        "reset", parents=[common], help="forget the configured models' learned weights (any subset of them)"
    )
    reset.add_argument("--all", action="store_true", help="forget every ensemble's weights")
    reset.set_defaults(handler=cmd_weights_reset)
    undo = weight_commands.add_parser(
        "undo", help="take back your latest choice (a pick, a thumb, a comparison) or reset"
    )
    undo.set_defaults(handler=cmd_weights_undo)
    stats = weight_commands.add_parser(
        "stats", help="your leaderboard: per model, segments won, picks, thumbs, comparisons won"
    )
    stats.add_argument("--json", action="store_true", help="the board as JSON")
    stats.set_defaults(handler=cmd_weights_stats)
