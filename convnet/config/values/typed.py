"""Typed values of the config language: integers, numbers, booleans, choices, lists.

Each converter is a small callable object ``convert(text, where) -> value``
with an ``expected`` phrase for messages.  Converters check ranges too, so a
layer-type table can say "an integer >= 1" once and every file gets the same
parsing and the same wording.  No regular expressions: values come from files
that may be garbage, and these hand-written scans are linear in the input.
"""

from __future__ import annotations

import math
from typing import Any

from convnet.config.values.location import Where, quote
from convnet.config.values.suggest import nearest
from convnet.errors import ConfigError

# cuda-convnet2 sized everything with C ints; larger values are mistakes.
INT_MAX = 2**31 - 1
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class Int:
    """A decimal integer in ``[lo, hi]``."""

    def __init__(self, lo: int | None = None, hi: int = INT_MAX):
        self.lo, self.hi = lo, hi
        self.expected = "an integer" if lo is None else f"an integer >= {lo}"

    def __call__(self, text: str, where: Where) -> int:
        body = text[1:] if text[:1] in "+-" else text
        if not (body.isascii() and body.isdigit()):
            raise where.error(f"expected {self.expected}, got {quote(text)}")
        if len(body.lstrip("0")) > len(str(INT_MAX)):
            raise where.error(f"{quote(text)} is out of range (at most {self.hi})")
        value = int(text)
        if self.lo is not None and value < self.lo:
            raise where.error(f"must be {self.expected}, got {value}")
        if value > self.hi:
            raise where.error(f"must be at most {self.hi}, got {value}")
        return value


class Float:
    """A finite number, optionally bounded below (``lo`` inclusive, ``gt`` exclusive) and
    above (``hi`` inclusive, ``lt`` exclusive)."""

    def __init__(self, lo: float | None = None, gt: float | None = None, hi: float | None = None,
                 lt: float | None = None):
        self.lo, self.gt, self.hi, self.lt = lo, gt, hi, lt
        bounds = []
        if lo is not None:
            bounds.append(f">= {lo:g}")
        if gt is not None:
            bounds.append(f"> {gt:g}")
        if hi is not None:
            bounds.append(f"<= {hi:g}")
        if lt is not None:
            bounds.append(f"< {lt:g}")
        self.expected = f"a number {' and '.join(bounds)}".rstrip()

    def __call__(self, text: str, where: Where) -> float:
        try:
            # ASCII only: float() also reads other scripts' digits ('１２' is 12.0)
            value = float(text) if "_" not in text and text.isascii() else math.nan
        except ValueError:
            raise where.error(f"expected {self.expected}, got {quote(text)}") from None
        if not math.isfinite(value):
            raise where.error(f"expected {self.expected} (finite), got {quote(text)}")
        if ((self.lo is not None and value < self.lo) or (self.gt is not None and value <= self.gt)
                or (self.hi is not None and value > self.hi)
                or (self.lt is not None and value >= self.lt)):
            raise where.error(f"must be {self.expected}, got {value:g}")
        return value


class Bool:
    """``1/0``, ``true/false``, ``yes/no``, ``on/off`` in any case, like configparser."""

    expected = "a boolean (1/0, true/false)"

    def __call__(self, text: str, where: Where) -> bool:
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise where.error(f"expected {self.expected}, got {quote(text)}")


class Choice:
    """One of a fixed set of words, with a suggestion for typos."""

    def __init__(self, *options: str):
        self.options = options
        self.expected = "one of " + ", ".join(options)

    def __call__(self, text: str, where: Where) -> str:
        if text in self.options:
            return text
        raise where.error(f"expected {self.expected}, got {quote(text)}",
                          suggestion=nearest(text, self.options))


class Unsupported:
    """A key this engine accepts only at its harmless value (e.g. ``wball=0``)."""

    def __init__(self, inner, allowed: Any, feature: str, shown: str = "0"):
        self.inner, self.allowed, self.feature, self.shown = inner, allowed, feature, shown
        self.expected = f"{shown} ({feature} is not supported)"

    def __call__(self, text: str, where: Where):
        value = self.inner(text, where)
        if value != self.allowed:
            raise where.error(f"{self.feature} is not supported by this engine; it must be "
                              f"{self.shown}, got {quote(text)}")
        return value


_PERIOD = Int(lo=1)


class SyncMode:
    """A replicated layer's ``sync=``: ``sync`` (all-reduce its weight gradients every
    step) or ``local:K`` (local SGD: average its replicas' weights every K >= 1 steps),
    spelled as ``--sync`` spells them (any case).  ``async`` is refused: it runs the
    replicas of the whole net apart, so it is a mode of the run only (``--sync async``).
    """

    expected = "sync or local:K (K an integer >= 1)"

    def __call__(self, text: str, where: Where) -> str:
        value = text.strip().lower()
        kind, colon, number = value.partition(":")
        if value == "sync":
            return value
        if kind == "async":
            raise where.error(f"{quote(text)} cannot be set per layer: async runs the replicas "
                              "of the whole net apart, so it is a mode of the whole run "
                              "(--sync async); give sync or local:K here")
        if kind == "local" and colon and number.isdigit():  # no sign: K is a count
            try:
                return f"local:{_PERIOD(number, where)}"
            except ConfigError:
                pass
        raise where.error(f"expected {self.expected}, e.g. local:8, got {quote(text)}")


def local_sgd_period(sync: str) -> int | None:
    """The K of a sync mode written ``local:K`` (as :class:`SyncMode` or ``--sync``
    give it); None for any other mode."""
    return int(sync.partition(":")[2]) if sync.startswith("local:") else None


def split_list(text: str, where: Where) -> list[str]:
    """Split a comma list, ignoring commas inside square brackets (``tanh[1,2]``)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    if not all(items):
        raise where.error(f"expected a comma-separated list without empty items, got {quote(text)}")
    return items


def parse_data_dims(text: str) -> tuple[int, ...]:
    """Per-case dimensions of one data column: ``3x224x224`` or ``1``."""
    where = Where(None)
    parts = str(text).strip().lower().split("x")
    expected = "sizes such as 3x224x224 (positive integers joined by 'x')"
    convert = Int(lo=1)
    try:
        return tuple(convert(part.strip(), where) for part in parts)
    except ConfigError:
        raise where.error(f"data dims {quote(str(text))}: expected {expected}") from None


def parse_data_columns(text: str) -> dict[int, tuple[int, ...]]:
    """Every data column's dimensions, comma-separated in dataIdx order.

    ``3x224x224`` gives the images only and column 1 stays the labels ``(1,)``;
    ``3x224x224,1,1`` adds a column 2 of one value per case (a second label
    set), ``3x32x32,1,1x32x32`` a per-pixel mask as column 2, and so on: a
    net whose data layers read dataIdx 2 and up needs them.
    """
    items = [item.strip() for item in str(text).split(",")]
    if not all(items):
        raise Where(None).error(f"data dims {quote(str(text))}: expected one size per "
                                "column, comma-separated, such as 3x224x224,1,1")
    columns = {1: (1,)}
    columns.update({index: parse_data_dims(item) for index, item in enumerate(items)})
    return columns
