"""How a settings field is described, converted and checked.

A settings record (``EnsembleSettings``, ``LoadSettings``, a ``[[models]]`` entry) is a frozen
dataclass whose fields carry their group, a one-line help and their ``Limits`` in metadata
(``setting``). ``describe`` reads that back as ``Setting`` records, and every way a value
enters (a models.toml table, a flag, a form field, a Python keyword) is converted and checked
by them, with one-line errors that say what is wrong.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from specem_local.errors import SettingError, SpecemError


@dataclass(frozen=True)
class Limits:
    """What a setting accepts beyond its type: a list of choices or a range (ends included
    unless ``open_low`` / ``open_high``)."""

    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    pattern: str = ""  # text: a regular expression it must match whole
    pattern_words: str = ""  # ... said in words

    def describe(self) -> str:
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        if self.pattern:
            return self.pattern_words
        low, high = _number_text(self.low), _number_text(self.high)
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"
        if self.low is not None:
            return f"{'above' if self.open_low else 'at least'} {low}"
        if self.high is not None:
            return f"{'below' if self.open_high else 'at most'} {high}"
        return ""

    def allows(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if self.pattern:
            return re.fullmatch(self.pattern, value) is not None
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.open_high else value > self.high))


def setting(default: Any, group: str, help: str, **limits: Any) -> Any:
    """A settings field: its default, its group (a key of GROUPS), a one-line help, limits."""
    return field(default=default, metadata={"group": group, "help": help, "limits": Limits(**limits)})


KINDS: dict[Any, tuple[str, str]] = {  # type -> (kind, what a value must be, for messages)
    bool: ("bool", "true or false"),
    int: ("int", "an integer"),
    float: ("float", "a number"),
    str: ("str", "a string"),
    tuple[str, ...]: ("strings", "an array of strings"),
}


def kind_of(annotation: Any) -> tuple[str, bool]:
    """The kind of a field's (evaluated) type and whether it may be None."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional, annotation = True, members[0]
    return KINDS[annotation][0], optional


MAX_DIGITS = 40  # a number typed with more characters is out of every setting's range


@dataclass(frozen=True)
class Setting:
    """One field of a settings (or ``[[models]]``) dataclass, with what it accepts."""

    name: str
    kind: str  # "bool", "int", "float", "str" or "strings"
    optional: bool
    default: Any
    group: str = ""
    help: str = ""
    limits: Limits = Limits()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def convert(self, value: Any, where: str) -> Any:
        """A TOML / JSON / Python value as this setting's type (integers are fine for numbers,
        lists for string arrays), or a one-line error naming ``where``."""
        if value is None and self.optional:
            return None
        wanted = next(text for kind, text in KINDS.values() if kind == self.kind)
        ok = {
            "bool": isinstance(value, bool),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
            "str": isinstance(value, str),
            "strings": isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value),
        }[self.kind]
        if not ok:
            raise self.error(where, f"must be {wanted}, got {_type_name(value)} {_shown(value)}")
        if self.kind == "float":
            value = self._finite(value, where)
        elif self.kind in ("str", "strings"):
            for text in (value,) if self.kind == "str" else value:
                self._check_text(text, where, empty_ok=self.kind == "str")
            value = tuple(value) if self.kind == "strings" else value
        self.check(value, where)
        return value

    def parse(self, text: str, where: str) -> Any:
        """A number as a person typed it (in a form field) as this setting's type: ``1.5`` for a
        whole number is refused, not read as 15, and a number of thousands of digits is out of
        range, not "not an integer"."""
        text = text.strip()
        if self.kind == "int":
            digits = text.lstrip("+-")
            if not (digits.isascii() and digits.isdigit()) or len(text) - len(digits) > 1:
                raise self.error(where, f"must be a whole number, got {_shown(text)}")
            if len(text) > MAX_DIGITS:
                limits = self.limits.describe() or f"a whole number of at most {MAX_DIGITS} digits"
                raise self.error(where, f"must be {limits}; got a number of {len(text):,} digits")
            return self.convert(int(text), where)
        if self.kind == "float":
            try:
                value = float(text) if len(text) <= MAX_DIGITS else math.inf
            except ValueError:
                raise self.error(where, f"must be a number, got {_shown(text)}") from None
            return self.convert(value, where)
        return self.convert(text, where)

    def check(self, value: Any, where: str) -> None:
        if value is not None and not self.limits.allows(value):
            raise self.error(where, f"must be {self.limits.describe()}; got {_shown(value)}")

    def error(self, where: str, problem: str) -> SettingError:
        return SettingError(f"{_prefix(where)}{self.name} {problem}", self.name)

    def _finite(self, value: int | float, where: str) -> float:
        """A number as a finite float. NaN passes every comparison with a range, so it is refused
        here, with infinity and integers too large for a float (TOML and JSON have all three)."""
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            described = self.limits.describe()
            raise self.error(
                where, f"must be a finite number{f' {described}' if described else ''}; got {_shown(value)}"
            )
        return number

    def _check_text(self, text: str, where: str, *, empty_ok: bool) -> None:
        """Text no model can take: half of a surrogate pair (JSON and Python can hold one), or
        an empty string in a list (an empty stop string would end every answer at once)."""
        if not text and not empty_ok:
            raise self.error(where, "cannot hold an empty string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise self.error(where, "is not valid Unicode (a lone surrogate, such as half an emoji)") from None


def _shown(value: Any) -> str:
    """A value for a one-line message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number_text(number: float | None) -> str:
    """A limit as people write it: 2^64 rather than 1.84467e+19."""
    if number is None:
        return ""
    if isinstance(number, int) and number >= 1 << 16 and number & (number - 1) == 0:
        return f"2^{number.bit_length() - 1}"
    return f"{number:g}" if isinstance(number, float) else str(number)


@functools.cache
def describe(cls: type) -> tuple[Setting, ...]:
    """The settings of a dataclass, in field order, with their evaluated types."""
    hints = typing.get_type_hints(cls)
    out = []
    for item in dataclasses.fields(cls):
        kind, optional = kind_of(hints[item.name])
        meta = item.metadata
        out.append(
            Setting(
                item.name,
                kind,
                optional,
                item.default,
                meta.get("group", ""),
                meta.get("help", ""),
                meta.get("limits", Limits()),
            )
        )
    return tuple(out)


def checked(record: Any, where: str) -> None:
    """Convert and check every field of a frozen settings record in place (for records built
    in Python, which no TOML check has seen: ``EnsembleSettings(stop="END")`` is an error, not
    the three stop strings E, N and D)."""
    for item in describe(type(record)):  # type: ignore[arg-type]  # a dataclass type is hashable
        object.__setattr__(record, item.name, item.convert(getattr(record, item.name), where))


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def unknown_key_error(key: str, known: list[str], where: str, what: str = "key") -> SpecemError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
    return SpecemError(f"{_prefix(where)}unknown {what} {key!r}{hint}")


def checked_values(cls: type, table: dict[str, Any], where: str, what: str = "key") -> dict[str, Any]:
    """The table's values converted to ``cls``'s field types; unknown keys get a did-you-mean."""
    known = {item.name: item for item in describe(cls)}
    values = {}
    for key, value in table.items():
        if key not in known:
            raise unknown_key_error(key, list(known), where, what)
        values[key] = known[key].convert(value, where)
    return values
