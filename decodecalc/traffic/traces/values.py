"""Token counts and timestamps read from a trace cell or a JSON value, with one-line errors.

A CSV cell is a string and a JSON value is typed; both go through the same checks, so every format
refuses the same things the same way: a non-integer token count, a negative one, one over 2**31
(no real request has two billion tokens), a timestamp that is not a finite number, a date that
does not exist. ``where`` is "file, line n" (or "file, record n"); every message names the field.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.textio import show

#: the largest token count accepted: 2**31 tokens is not a real request (and fits the int64 arrays)
MAX_TOKENS = 2**31
_INTEGER = re.compile(r"[+-]?[0-9]+")
# 2023-11-16 18:15:46.6805900 (Azure 2023, seven fraction digits), 2024-05-10 00:00:00.009930+00:00
# (Azure 2024), ISO 8601 with a T or a Z
_DATETIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                       r"(?:[.,]([0-9]{1,9}))?[ ]?(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?")
UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
#: the smallest epoch time read as milliseconds where the unit is ``epoch``: 1e11 s is the year 5138, 1e11 ms is
#: March 1973, so a real trace's epoch seconds are below it and its epoch milliseconds above
EPOCH_MS_FROM = 1e11


def token_count(raw: Any, where: str, field: str, minimum: int = 0) -> int:
    """An integer token count in [minimum, 2**31] from a JSON integer or a cell of digits."""
    if isinstance(raw, str) and len(raw) <= 10 and raw.isascii() and raw.isdigit():
        value = int(raw)  # the common case, without the regular expression
    elif isinstance(raw, str):
        text = raw.strip()
        if not _INTEGER.fullmatch(text):
            raise ConfigError(f"{where}, field '{field}': expected an integer, got {show(raw)}")
        if len(text) > 19:  # int() of thousands of digits is slow, and the bound says no anyway
            raise ConfigError(f"{where}, field '{field}': {show(text, 24)} tokens is over 2**31, not a real request")
        value = int(text)
    elif isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        raise ConfigError(f"{where}, field '{field}': expected an integer, got {show(raw)}")
    if value < minimum:
        raise ConfigError(f"{where}, field '{field}': must be >= {minimum}, got {value}")
    if value > MAX_TOKENS:
        raise ConfigError(f"{where}, field '{field}': {value} tokens is over 2**31, not a real request")
    return value


def number(raw: Any, where: str, field: str, unit: str = "s", *, nonnegative: bool = True) -> float:
    """A finite number of ``unit`` (s, ms, us, ns) converted to seconds."""
    value: float | None = None
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            value = None
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        try:
            value = float(raw)
        except OverflowError:  # an integer too large for a float
            value = None
    bound = " >= 0" if nonnegative else ""
    if value is None or not math.isfinite(value) or (nonnegative and value < 0):
        raise ConfigError(f"{where}, field '{field}': expected a number of {UNIT_NAMES[unit]}{bound}, got {show(raw)}")
    return value * UNIT_SECONDS[unit]


def is_datetime(raw: Any) -> bool:
    return isinstance(raw, str) and _DATETIME.fullmatch(raw.strip()) is not None


@functools.lru_cache(maxsize=4096)
def _days(year: str, month: str, day: str) -> int | None:
    """Days since 0001-01-01 (cached: a trace has few distinct dates and millions of timestamps)."""
    try:
        return datetime.date(int(year), int(month), int(day)).toordinal()
    except ValueError:
        return None


_EPOCH = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)
_DAY_NS = 86_400 * 10**9  # datetime_ns counts days from date.toordinal(), which is 1 on 0001-01-01
# what the C parser may take: the extended form with a date and a time (its basic form and a date alone are not
# date-times here), and no more than six fraction digits (it would drop a seventh, which Azure 2023 writes)
_FAST_SHAPE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?![.,][0-9]{7})")


def datetime_ns(raw: Any, where: str, field: str) -> int:
    """Nanoseconds since 0001-01-01 UTC of a date-time string (no offset: read as UTC). Integer
    arithmetic: a float of seconds since 1970 would lose the seventh fraction digit Azure writes.
    The common shapes go through ``datetime.fromisoformat`` (C, five times faster: a million Azure rows
    spend ~1 s here instead of ~4); anything it refuses or might read differently takes the exact path."""
    if isinstance(raw, str) and _FAST_SHAPE.match(raw):
        try:
            dt = datetime.datetime.fromisoformat(raw)
        except ValueError:
            pass  # a leap second, a space before the offset, a bad date: the exact path says what is wrong
        else:
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=datetime.timezone.utc)
            return (dt - _EPOCH) // _MICROSECOND * 1000 + _DAY_NS
    return _datetime_ns_exact(raw, where, field)


def _datetime_ns_exact(raw: Any, where: str, field: str) -> int:
    m = _DATETIME.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if m is None:
        raise ConfigError(f"{where}, field '{field}': expected a date-time such as 2023-11-16 18:15:46.6805900, "
                          f"got {show(raw)}")
    year, month, day, hour, minute, second, fraction_digits, tz = m.groups()
    days = _days(year, month, day)
    if days is None:
        raise ConfigError(f"{where}, field '{field}': {show(raw)} is not a calendar date")
    h, mi, sec = int(hour), int(minute), int(second)
    if h > 23 or mi > 59 or sec > 60:  # 60: a leap second
        raise ConfigError(f"{where}, field '{field}': {show(raw)} is not a time of day")
    fraction = int(fraction_digits.ljust(9, "0")) if fraction_digits else 0
    offset_s = 0
    if tz and tz != "Z":
        tz = tz.replace(":", "")
        sign = -1 if tz[0] == "-" else 1
        offset_s = sign * (int(tz[1:3]) * 3600 + int(tz[3:5] or 0) * 60)
    seconds = ((days * 24 + h) * 60 + mi) * 60 + sec - offset_s
    return seconds * 1_000_000_000 + fraction


class Clock:
    """Arrival times of one column in seconds. Date-times are taken relative to the first one read
    (exact integer nanoseconds before the subtraction), numbers as they are; the table later shifts
    every arrival so the earliest is 0. ``unit`` is s/ms/us/ns, ``datetime``, ``auto`` (date-time
    or seconds, decided by the first value) or ``epoch`` (date-time, or Unix time in seconds or milliseconds: the
    first value decides which, by :data:`EPOCH_MS_FROM`)."""

    __slots__ = ("unit", "field", "kind", "base_ns")

    def __init__(self, unit: str, field: str) -> None:
        self.unit = unit
        self.field = field
        self.kind: str | None = None if unit in ("auto", "epoch") else ("datetime" if unit == "datetime" else "number")
        self.base_ns: int | None = None

    def seconds(self, raw: Any, where: str) -> float:
        if self.kind is None:
            self.kind = "datetime" if is_datetime(raw) else "number"
            if self.unit == "epoch" and self.kind == "number":
                self.unit = "ms" if number(raw, where, self.field) >= EPOCH_MS_FROM else "s"
        if self.kind == "number":
            if self.unit in ("auto", "epoch") and is_datetime(raw):
                raise ConfigError(f"{where}, field '{self.field}': a date-time in a column of numbers, {show(raw)}")
            return number(raw, where, self.field, "s" if self.unit in ("auto", "datetime", "epoch") else self.unit)
        ns = datetime_ns(raw, where, self.field)
        if self.base_ns is None:
            self.base_ns = ns
        return (ns - self.base_ns) / 1e9

    def describe(self) -> str:
        if self.kind == "datetime":
            return f"arrivals from '{self.field}' read as date-times (UTC where no offset is written)"
        return f"arrivals from '{self.field}' read as {UNIT_NAMES.get(self.unit, 'seconds')}"
