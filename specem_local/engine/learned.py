"""Weights kept across answers: what an answer starts from, and what it leaves behind.

SpecEM learns its weights during one answer and forgets them after it; one answer is too
short to learn who is strong. ``specem calibrate`` sets an ensemble's starting weights from
labelled items (``feedback.calibration``), kept in ``storage.weights.WeightStore`` by its members, and
every answer starts from them. With ``carry_weights``, each answer also hands on what it
learned to the next (``feedback.carried``); measured on the demo trio, that label-free
learning drifts towards the member the others agree with, not the strong one, so it is off
by default (docs/quality.md). The built-in ensembles ship a calibration of their own
(``data/calibrations.json``), so they start from one before the user has made any. The user's
own choices (``choices.py``: picks, thumbs, comparisons) move the anchor itself, so every
answer starts from them, and can be undone one by one.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.dirs import data_dir, replace_file
from specem_local.engine import feedback
from specem_local.engine.choices import choice_change
from specem_local.engine.evidence import Calibrator
from specem_local.engine.member import Member
from specem_local.errors import SpecemError
from specem_local.events import WeightsOrigin
from specem_local.settings import EnsembleSettings
from specem_local.storage.weights import Choice, StoredWeights, WeightStore, ensemble_key


@dataclass(frozen=True)
class StartingWeights:
    """The verifier weights an answer starts from, and where they came from."""

    weights: np.ndarray  # per member taking part (0 for models that only draft)
    origin: WeightsOrigin = "prior"  # the prior, carried (from earlier answers), calibrated or built-in
    answers: int = 0  # answers they were learned from
    items: int = 0  # labelled items they were calibrated on
    choices: int = 0  # the user's choices applied to them


def member_identity(member: Member) -> str:
    """A member as the store knows it: its name and what the model is (a different file under
    the same name is a different member)."""
    return f"{member.name} ({member.model.n_params:,} parameters, {member.model.n_vocab:,} tokens)"


def key_of(members: list[Member]) -> str:
    return ensemble_key([member_identity(m) for m in members])


def names_in(key: str) -> list[str]:
    """The member names of a stored ensemble's key (``key_of``)."""
    return [_name(identity) for identity in key.split(" + ")]


def stored_weights(record: StoredWeights) -> dict[str, float]:
    """A stored record's weights, by member name."""
    values = np.array(list(record.log_weights.values()))
    weights = feedback.from_log_weights(values, np.ones(len(values), dtype=bool))
    return {_name(identity): float(w) for identity, w in zip(record.log_weights, weights)}


def _name(identity: str) -> str:
    return identity.rsplit(" (", 1)[0]


def prior(members: list[Member], settings: EnsembleSettings) -> np.ndarray:
    verifies = np.array([m.spec.verifies for m in members], dtype=bool)
    sizes = np.array([m.model.n_params for m in members], dtype=np.float64)
    return feedback.initial_weights(verifies, sizes, settings.weight_prior)


@functools.cache
def built_in_calibrations() -> dict[str, StoredWeights]:
    """The calibrations shipped for the built-in ensembles, by ensemble key: records of
    ``specem weights list --json`` made by ``specem calibrate`` (docs/quality.md says how)."""
    text = resources.files("specem_local").joinpath("data").joinpath("calibrations.json").read_text("utf-8")
    records = {}
    for entry in json.loads(text):
        weights = entry["anchor"]
        records[entry["key"]] = StoredWeights(entry["key"], weights, weights, 0, entry["calibrated_items"], 0.0)
    return records


def confidence_calibrator(members: list[Member], check: str) -> Calibrator:
    """The calibrator of an answer's confidence for these members and this paid check
    (``confidence_check``): the user's (``specem calibrate --confidence``), else the one fitted
    for this ensemble (shipped with the built-in ensembles, ``data/confidence.json``); with no
    calibrator fitted with the check, the members' own without it (a check costs time, and must
    not leave them with the general prior), else the general one; its ``fitted_on`` says which."""
    key, user, shipped = key_of(members), _calibrators(user_calibrators_path()), _shipped_calibrators()
    for wanted in ((key, check), (key, "none")):
        found = user.get(wanted) or shipped.get(wanted)
        if found is not None:
            return found
    return shipped[("*", "none")]


def keep_calibrator(members: list[Member], check: str, calibrator: Calibrator) -> Path:
    """Keep a calibrator the user fitted for these members and check (it is used from the next
    answer on); returns where it is kept."""
    path = user_calibrators_path()
    key = key_of(members)
    entries = [e for e in user_calibrators() if (e.get("key"), e.get("check", "none")) != (key, check)]
    entries.append({"key": key, "check": check, "calibrator": calibrator.to_dict()})
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(entries, indent=1) + "\n")
    return path


def user_calibrators() -> list[dict[str, Any]]:
    """The entries of the user's calibrators file (none if it is missing); a ``SpecemError``
    says it is damaged, so that keeping one more never loses the others unsaid."""
    path = user_calibrators_path()
    try:
        entries = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        said = f"the confidence calibrators in {path} cannot be read ({error}); delete it to start afresh"
        raise SpecemError(said) from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SpecemError(f"the confidence calibrators in {path} are damaged (not a list of entries); delete it to "
                          "start afresh")  # fmt: skip
    return entries


def user_calibrators_path() -> Path:
    return data_dir() / "confidence.json"


def _calibrators(path: Path) -> dict[tuple[str, str], Calibrator]:
    """The calibrators a file keeps; none when it is missing or cannot be read (said by nothing:
    the shipped ones stand in)."""
    try:
        entries = json.loads(path.read_text("utf-8"))
        return {(e["key"], e.get("check", "none")): Calibrator.from_dict(e["calibrator"]) for e in entries}
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return {}


@functools.cache
def _shipped_calibrators() -> dict[tuple[str, str], Calibrator]:
    return _calibrators(Path(str(resources.files("specem_local").joinpath("data").joinpath("confidence.json"))))


def starting_weights(
    store: WeightStore | None, members: list[Member], settings: EnsembleSettings, *, unreadable: bool = False
) -> StartingWeights:
    """With ``carry_weights``, the weights the earlier answers handed on; else the user's
    calibration, else the one shipped for a built-in ensemble; the prior when there is none
    (or with ``fresh_weights``, or no store). ``unreadable``: the store could not be read, so
    the built-in calibration (members known to lose still do not draft), else the prior."""
    start = prior(members, settings)
    if store is None or settings.fresh_weights or len(members) == 1:
        return StartingWeights(start)
    key = key_of(members)
    record = None if unreadable else store.get(key)
    if record is not None and (settings.carry_weights or record.calibrated_items or record.choices):
        carried, origin = settings.carry_weights, _origin(record)
    else:
        record, carried, origin = built_in_calibrations().get(key), False, "built-in"
        if record is None:
            return StartingWeights(start)
    verifies = np.array([m.spec.verifies for m in members], dtype=bool)
    stored = record.log_weights if carried else record.anchor
    weights = feedback.from_log_weights(_log_weights(stored, members), verifies)
    return StartingWeights(weights, origin, record.answers if carried else 0, record.calibrated_items, record.choices)


def _origin(record: StoredWeights) -> WeightsOrigin:
    """Where a stored record's anchor came from, before the user's choices."""
    if record.base == "built-in":
        return "built-in"
    if record.calibrated_items:
        return "calibrated"
    return "carried" if record.answers else "prior"


def choose(
    store: WeightStore,
    members: list[Member],
    settings: EnsembleSettings,
    kind: str,
    rewards: dict[str, float],
    message_id: int | None = None,
) -> Choice:
    """Keep one of the user's choices (``choices.py``) and move the ensemble's weights by it: the
    kept record (else the built-in calibration, else the prior) plus the choice's step, on the
    anchor and the carried log-weights alike. Rewards for models that do not verify are left out."""
    key = key_of(members)
    identity = {m.name: member_identity(m) for m in members if m.spec.verifies}
    delta = {identity[name]: step for name, step in choice_change(rewards).items() if name in identity}
    verifiers = [m for m in members if m.spec.verifies]
    names = [member_identity(m) for m in verifiers]
    prior_now = np.log(prior(members, settings)[[m.spec.verifies for m in members]])
    prior_now -= prior_now.mean()

    def change(record: StoredWeights | None) -> tuple[StoredWeights | None, dict[str, float]]:
        if not delta or len(verifiers) < 2:
            return None, {}
        base = record.base if record is not None else ""
        if record is None:
            record = built_in_calibrations().get(key)
            base = "built-in" if record is not None else "prior"
            record = record or StoredWeights(key, _by_name(names, prior_now), _by_name(names, prior_now), 0, 0, 0.0)

        def moved(values: dict[str, float]) -> dict[str, float]:
            return {n: values.get(n, float(p)) + delta.get(n, 0.0) for n, p in zip(names, prior_now)}

        return (
            StoredWeights(
                key,
                moved(record.log_weights),
                moved(record.anchor),
                record.answers,
                record.calibrated_items,
                time.time(),
                record.choices + 1,
                base,
            ),
            delta,
        )

    return store.choose(key, change, kind, rewards, message_id)


def undo_choice(store: WeightStore, members: list[Member]) -> Choice | None:
    """Take back the latest choice for this ensemble (None: there is none)."""
    return store.undo_choice(key_of(members))


def remember(
    store: WeightStore,
    members: list[Member],
    settings: EnsembleSettings,
    start: StartingWeights,
    final_weights: dict[str, float],
) -> StoredWeights | None:
    """With ``carry_weights``, hand on what one answer learned: its Hedge change,
    ``log w_end - log w_start``, carried into the stored weights (``feedback.carried``). An
    answer that learned nothing (no vote, feedback off, one model, ``fresh_weights``) leaves
    them as they are."""
    if not settings.carry_weights or settings.fresh_weights or not settings.feedback or len(members) == 1:
        return None
    verifiers = [i for i, m in enumerate(members) if m.spec.verifies]
    end = np.array([final_weights[members[i].name] for i in verifiers])
    floor = np.finfo(np.float64).tiny  # a weight Hedge drove to 0 is a very low log-weight, not -inf
    change = np.log(np.maximum(end, floor)) - np.log(np.maximum(start.weights[verifiers], floor))
    if np.allclose(change, change[0]):
        return None
    names = [member_identity(members[i]) for i in verifiers]
    prior_now = np.log(prior(members, settings)[verifiers])
    prior_now -= prior_now.mean()

    def carry(record: StoredWeights | None) -> StoredWeights:
        record = record or built_in_calibrations().get(key_of(members))
        if record is None:
            anchor = log_weights = prior_now
            answers, items, chosen, base = 0, 0, 0, ""
        else:  # a member that became a verifier since (its role changed) starts at the prior
            anchor = np.array([record.anchor.get(name, p) for name, p in zip(names, prior_now)])
            log_weights = np.array([record.log_weights.get(name, p) for name, p in zip(names, prior_now)])
            answers, items, chosen, base = record.answers, record.calibrated_items, record.choices, record.base
        learned = feedback.carried(log_weights, anchor, change, settings.weight_memory)
        return StoredWeights(
            key_of(members),
            _by_name(names, learned),
            _by_name(names, anchor),
            answers + 1,
            items,
            time.time(),
            chosen,
            base,
        )

    return store.update(key_of(members), carry)


def calibrate(
    store: WeightStore, members: list[Member], settings: EnsembleSettings, wrong: dict[str, int], items: int
) -> StoredWeights:
    """Set an ensemble's weights from labelled items (``wrong``: how many each member got wrong
    answering alone); they become the anchor the carried weights decay back to."""
    verifiers = [i for i, m in enumerate(members) if m.spec.verifies]
    names = [member_identity(members[i]) for i in verifiers]
    losses = np.array([wrong[members[i].name] for i in verifiers], dtype=np.float64)
    log_weights = _by_name(names, feedback.calibration(prior(members, settings)[verifiers], losses, items))
    record = StoredWeights(key_of(members), log_weights, log_weights, 0, items, time.time())
    return store.update(key_of(members), lambda _old: record)


def _by_name(names: list[str], values: np.ndarray) -> dict[str, float]:
    return {name: float(value) for name, value in zip(names, values)}


def _log_weights(stored: dict[str, float], members: list[Member]) -> np.ndarray:
    """Stored log-weights per member; a verifier the record does not know starts at the mean."""
    values = [stored.get(member_identity(m)) for m in members]
    known = [v for v in values if v is not None]
    fallback = float(np.mean(known)) if known else 0.0
    return np.array([fallback if v is None else v for v in values], dtype=np.float64)
