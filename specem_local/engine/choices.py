"""The user's choices as labels for the weights (pure functions over names and numbers).

A choice says which member(s) the user preferred: a candidate picked over the round's winner,
a thumbs up or down on an answer (its members rewarded by the share of the answer they wrote,
or by the share they did not), or the best answer of a comparison. Each becomes rewards in
[0, 1] per member, and one bounded Hedge step on the kept log-weights: member ``i`` moves by
``CHOICE_RATE * (r_i - mean r)`` over the members the choice rewarded, so one click changes the
odds between two members by at most ``exp(CHOICE_RATE)``, whatever their weights are (a choice
for a weak member is never drowned by a strong one's weight), and undoing it subtracts exactly
what it added. ``research/choices.py`` measures how many choices reach what ``specem calibrate``
learns from labelled items.
"""

from __future__ import annotations

CHOICE_RATE = 0.25
ENSEMBLE = "ensemble"  # in a comparison, the ensemble's own answer


def pick_rewards(picked: str, winner: str) -> dict[str, float]:
    """A candidate by ``picked`` chosen over the winner by ``winner``; nothing to learn when one
    model wrote both (two samples of one member)."""
    return {} if picked == winner else {picked: 1.0, winner: 0.0}


def thumbs_rewards(wins: dict[str, int], up: bool) -> dict[str, float]:
    """A thumbs up rewards each member by the share of the answer's segments it wrote; a thumbs
    down by the share it did not write. Nothing when one member wrote everything and no other
    took part (a plain answer)."""
    total = sum(wins.values())
    if total == 0 or len(wins) < 2:
        return {}
    return {name: (count / total if up else 1 - count / total) for name, count in wins.items()}


def best_rewards(best: str, compared: list[str], ensemble_wins: dict[str, int]) -> dict[str, float]:
    """The best answer of a comparison: a member alone (it is rewarded, the other members
    compared are not), or the ensemble's answer (a thumbs up on it; kept as "best-ensemble")."""
    if best == ENSEMBLE:
        return thumbs_rewards(ensemble_wins, up=True)
    return {name: 1.0 if name == best else 0.0 for name in dict.fromkeys([best, *compared]) if name != ENSEMBLE}


def choice_change(rewards: dict[str, float], rate: float = CHOICE_RATE) -> dict[str, float]:
    """The step a choice makes to the log-weights, per member it rewarded (centred: the members
    it does not name keep their log-weights, and the rewarded ones' total stays the same)."""
    if len(rewards) < 2:
        return {}
    mean = sum(rewards.values()) / len(rewards)
    return {name: rate * (reward - mean) for name, reward in rewards.items()}


def leaderboard(segments_won: dict[str, int], made: list[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per model, over the user's history: segments won, picks for and against, thumbs (up and
    down, each answer's counted by the share of it the model wrote), comparisons won and
    entered. ``made``: each choice still in force as (kind, rewards)."""
    fields = ("segments_won", "picked", "picked_against", "thumbs_up", "thumbs_down", "best", "compared")
    board: dict[str, dict[str, float]] = {}

    def row(name: str) -> dict[str, float]:
        return board.setdefault(name, dict.fromkeys(fields, 0))

    for name, count in segments_won.items():
        row(name)["segments_won"] = count
    for kind, rewards in made:
        for name, reward in rewards.items():
            entry = row(name)
            if kind == "pick":
                entry["picked" if reward else "picked_against"] += 1
            elif kind == "thumbs-up":
                entry["thumbs_up"] += reward
            elif kind == "thumbs-down":
                entry["thumbs_down"] += 1 - reward
            elif kind == "best":
                entry["compared"] += 1
                entry["best"] += reward == 1.0
            elif kind == "best-ensemble":  # the ensemble's answer was the best: it won, each member was compared
                entry["compared"] += 1
        if kind == "best-ensemble":
            row(ENSEMBLE)["best"] += 1
    return dict(sorted(board.items(), key=lambda item: -item[1]["segments_won"]))
