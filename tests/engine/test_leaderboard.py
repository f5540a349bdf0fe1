"""The personal leaderboard and ``specem weights stats | undo | list`` over a real database of
answers (fake models) and choices (issue 27)."""

from __future__ import annotations

import json

from specem_local.commands.cli import main
from specem_local.engine import Ensemble, choices, learned
from specem_local.settings import EnsembleSettings
from specem_local.storage.chats import Chat, Turn
from specem_local.storage.history import History
from specem_local.storage.weights import WeightStore
from tests.engine.test_carried_weights import trio


def test_the_board_counts_each_kind_of_choice():
    made = [
        ("pick", choices.pick_rewards("small", "big")),
        ("thumbs-up", {"big": 0.75, "small": 0.25}),
        ("thumbs-down", {"big": 0.5, "small": 0.5}),
        ("best", choices.best_rewards("mid", ["big", "mid"], {})),
        ("best-ensemble", {"big": 1.0}),
    ]
    board = choices.leaderboard({"big": 9, "small": 2}, made)
    assert list(board)[:2] == ["big", "small"]
    assert board["small"]["picked"] == 1 and board["big"]["picked_against"] == 1
    assert board["big"]["thumbs_up"] == 0.75 and board["big"]["thumbs_down"] == 0.5
    assert (board["mid"]["best"], board["mid"]["compared"], board["big"]["compared"]) == (1, 1, 2)
    assert board[choices.ENSEMBLE]["best"] == 1


def test_stats_undo_and_list_on_the_command_line(capsys):
    members = list(trio())
    with Ensemble(members, EnsembleSettings(greedy=True), weight_store=WeightStore()) as ensemble:
        chat, history = Chat(), History()
        record = history.start_answer(chat, Turn("assistant", ""), asked=[Turn("user", "Six times seven?")])
        for event in ensemble.stream("Six times seven?"):
            record.event(event)
        store = ensemble.weight_store
        learned.choose(store, members, ensemble.settings, "pick", choices.pick_rewards("small", "big"))
        learned.choose(
            store, members, ensemble.settings, "thumbs-up", choices.thumbs_rewards(record.turn.final.wins, True)
        )
        assert main(["weights", "list"]) == 0
        assert "the prior and 2 of your choices" in capsys.readouterr().out
        assert main(["weights", "stats", "--json"]) == 0
        board = json.loads(capsys.readouterr().out)
        assert (
            board["small"]["picked"] == 1
            and sum(row["segments_won"] for row in board.values()) == record.turn.final.rounds
        )
        assert main(["weights", "stats"]) == 0
        assert "SEGMENTS WON" in capsys.readouterr().out
        assert main(["weights", "undo"]) == 0
        assert "undid your thumbs-up" in capsys.readouterr().out
        assert ensemble.weights_origin() == "the prior and 1 of your choices"
        assert main(["weights", "undo"]) == main(["weights", "undo"]) == 0
        assert "no choice to undo" in capsys.readouterr().out
        assert ensemble.weights_origin() == "the prior"
        assert main(["weights", "stats", "--json"]) == 0
        after = json.loads(capsys.readouterr().out)
        assert all(row["picked"] == 0 for row in after.values())  # undone choices leave the board


def test_weights_reset_is_undone_and_undo_after_a_calibration_says_there_is_nothing(capsys, tmp_path):
    """Issue 36: ``weights undo`` after ``calibrate`` said it undid a choice the calibration had
    replaced; a reset could not be taken back."""
    members = list(trio())
    config = tmp_path / "models.toml"
    config.write_text("".join(f'[[models]]\nname = "{m.name}"\npath = "{m.name}.gguf"\n' for m in members))
    with Ensemble(members, EnsembleSettings(greedy=True), weight_store=WeightStore()) as ensemble:
        store = ensemble.weight_store
        learned.choose(store, members, ensemble.settings, "pick", choices.pick_rewards("small", "big"))
        learned.calibrate(store, members, ensemble.settings, {"big": 1, "mid": 5, "small": 9}, 10)
        assert main(["weights", "undo"]) == 0
        assert "no choice to undo" in capsys.readouterr().out
        assert ensemble.weights_origin() == "calibrated on 10 items"
        assert main(["weights", "reset", "--config", str(config)]) == 0
        assert "specem weights undo brings them back" in capsys.readouterr().out
        assert ensemble.weights_origin() == "the prior"
        assert main(["weights", "undo"]) == 0
        assert "brought back the weights" in capsys.readouterr().out
        assert ensemble.weights_origin() == "calibrated on 10 items"
