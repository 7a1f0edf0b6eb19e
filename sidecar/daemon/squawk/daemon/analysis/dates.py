"""Dates and times sent in the wrong format: read them only when unambiguous.

`parse` reads the common shapes (ISO, year-first with other separators,
compact 20240315, day/month/year when one part is above 12, English month
names, 12-hour clock times) and answers None for anything it would have to
guess: 03/04/2025 could be March or April, "15/03/24" could be any century.
`render` writes a parsed value in a wanted strftime format, and refuses to
drop a time of day or invent one.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

__all__ = ["ISO", "Temporal", "conforms_format", "format_named_in", "parse", "render"]

# The sentinel format for "ISO 8601 / RFC 3339, whichever parts the value has".
ISO = "iso"

_MONTHS = {
    name: i
    for i, names in enumerate(
        (
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ),
        start=1,
    )
    for name in names
}
_WEEKDAYS = {
    name: i
    for i, names in enumerate(
        (
            ("mon", "monday"),
            ("tue", "tues", "tuesday"),
            ("wed", "wednesday"),
            ("thu", "thur", "thurs", "thursday"),
            ("fri", "friday"),
            ("sat", "saturday"),
            ("sun", "sunday"),
        )
    )
    for name in names
}


@dataclass(frozen=True, slots=True)
class Temporal:
    date: dt.date | None
    time: dt.time | None
    # The UTC offset exactly as written ("Z", "+02:00"), or "" when none.
    offset: str = ""


_TIME = (
    r"(?P<h>\d{1,2})(?:[:h](?P<mi>\d{2}))?(?::(?P<s>\d{2}))?"
    r"\s*(?P<ampm>[ap]\.?m\.?)?\s*(?P<tz>[zZ]|[+-]\d{2}:?\d{2})?"
)
_WEEKDAY = r"(?:(?P<wd>[a-z]+),?\s+)?"
_DATE_SHAPES = (
    # Year first is always year-month-day.
    re.compile(r"(?P<y>\d{4})([-/.])(?P<m>\d{1,2})\2(?P<d>\d{1,2})"),
    re.compile(r"(?P<y>\d{4})(?P<m>\d{2})(?P<d>\d{2})"),
    # a/b/yyyy: day-first or month-first, decided below when possible.
    re.compile(r"(?P<a>\d{1,2})([-/.])(?P<b>\d{1,2})\2(?P<y>\d{4})"),
    re.compile(
        _WEEKDAY + r"(?P<d>\d{1,2})(?:st|nd|rd|th)?[\s-]+(?P<mn>[a-z]+)\.?[\s,-]+(?P<y>\d{4})"
    ),
    re.compile(_WEEKDAY + r"(?P<mn>[a-z]+)\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})"),
)
_AFTER_DATE = re.compile(r"(?:(?:t|\s+|\s*,\s*|\s+at\s+)" + _TIME + r")?")
_TIME_ONLY = re.compile(_TIME)


def _date(m: re.Match[str]) -> dt.date | None:
    groups = m.groupdict()
    year = int(groups["y"])
    if groups.get("mn") is not None:
        month = _MONTHS.get(groups["mn"])
        day = int(groups["d"])
    elif groups.get("a") is not None:
        a, b = int(groups["a"]), int(groups["b"])
        if a > 12 >= b or a == b:
            day, month = a, b
        elif b > 12 >= a:
            day, month = b, a
        else:
            return None  # 03/04/2025: March or April? Not guessed.
    else:
        month, day = int(groups["m"]), int(groups["d"])
    if month is None or not 1900 <= year <= 2200:
        return None
    try:
        value = dt.date(year, month, day)
    except ValueError:
        return None
    weekday = groups.get("wd")
    if weekday is not None and _WEEKDAYS.get(weekday) != value.weekday():
        return None  # "Monday, 15 March 2024" contradicts itself.
    return value


def _time(m: re.Match[str]) -> tuple[dt.time, str] | None:
    hour, minute, second = int(m["h"]), int(m["mi"] or 0), int(m["s"] or 0)
    ampm = m["ampm"]
    if m["mi"] is None and ampm is None:
        return None  # a bare "15" is a number, not a time
    if ampm is not None:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm.startswith("p") else 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    tz = m["tz"] or ""
    if tz and tz not in ("Z", "z") and ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    return dt.time(hour, minute, second), tz.upper()


def parse(text: str) -> Temporal | None:
    """The date and/or time `text` unambiguously names, or None."""
    if len(text) > 1_024:
        return None  # not normalised at all: no date is that long, even padded
    text = " ".join(text.strip().lower().split())
    if not text or len(text) > 64:
        return None
    for shape in _DATE_SHAPES:
        m = shape.match(text)
        if m is None:
            continue
        date = _date(m)
        rest = _AFTER_DATE.fullmatch(text, m.end())
        if date is None or rest is None:
            return None
        if rest["h"] is None:
            return Temporal(date, None)
        clock = _time(rest)
        return None if clock is None else Temporal(date, clock[0], clock[1])
    m = _TIME_ONLY.fullmatch(text)
    if m is not None:
        clock = _time(m)
        if clock is not None:
            return Temporal(None, clock[0], clock[1])
    return None


def render(value: Temporal, fmt: str) -> str | None:
    """`value` in strftime `fmt` (or ISO); None if that would drop or invent a part."""
    if fmt == ISO:
        if value.date is not None and value.time is not None:
            fmt = "%Y-%m-%dT%H:%M:%S"
        elif value.date is not None:
            fmt = "%Y-%m-%d"
        else:
            fmt = "%H:%M:%S"
    wants_date = any(code in fmt for code in ("%Y", "%m", "%d"))
    wants_time = any(code in fmt for code in ("%H", "%M", "%S"))
    if wants_date and value.date is None:
        return None
    if wants_time and value.time is None:
        return None
    if not wants_time and value.time is not None and value.time != dt.time(0):
        return None  # the upstream asks for a date; the value carried a real time
    if "%S" not in fmt and value.time is not None and value.time.second:
        return None
    moment = dt.datetime.combine(value.date or dt.date(2000, 1, 1), value.time or dt.time(0))
    text = moment.strftime(fmt)
    return text + value.offset if wants_time else text


_FORMAT_SPEC = re.compile(
    r"(?<![A-Za-z])(?:YYYY|yyyy|DD|dd|MM|mm|HH|hh|SS|ss)"
    r"(?:[-/.:T ]?(?:YYYY|yyyy|DD|dd|MM|mm|HH|hh|SS|ss))+(?![A-Za-z])"
)
_FORMAT_TOKEN = re.compile(r"YYYY|yyyy|DD|dd|MM|mm|HH|hh|SS|ss|.")
_ISO_WORDS = re.compile(r"(?i)\b(?:iso[\s-]?8601|rfc[\s-]?3339|iso\s+(?:date|format|time))\b")


def _strftime(spec: str) -> str:
    out, in_time = [], False
    for token in _FORMAT_TOKEN.findall(spec):
        upper = token.upper()
        if upper == "YYYY":
            out.append("%Y")
        elif upper == "DD":
            out.append("%d")
        elif upper == "HH":
            in_time = True
            out.append("%H")
        elif upper == "MM":
            out.append("%M" if in_time else "%m")
        elif upper == "SS":
            out.append("%S")
        else:
            out.append(token)
    return "".join(out)


def format_named_in(text: str) -> str | None:
    """The date/time format an error text asks for ("use YYYY-MM-DD"), or None."""
    specs = {_strftime(m.group(0)) for m in _FORMAT_SPEC.finditer(text)}
    if len(specs) == 1:
        return specs.pop()
    if not specs and _ISO_WORDS.search(text):
        return ISO
    return None  # none named, or several: not guessed


_SCHEMA_FORMATS = {
    "date": re.compile(r"\d{4}-\d{2}-\d{2}"),
    "date-time": re.compile(
        r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:\d{2})?"
    ),
    "time": re.compile(r"\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:\d{2})?"),
}
SCHEMA_FORMAT_RENDER = {"date": "%Y-%m-%d", "date-time": "%Y-%m-%dT%H:%M:%S", "time": "%H:%M:%S"}


def conforms_format(value: str, fmt: str) -> bool:
    """Whether `value` has JSON Schema format `fmt`; unknown formats always pass.

    Lenient on purpose: seconds and the UTC offset are optional, because
    many tool APIs use "2025-03-15T14:30" and "14:30".
    """
    shape = _SCHEMA_FORMATS.get(fmt)
    if shape is None:
        return True
    if not shape.fullmatch(value):
        return False
    if fmt == "time":
        return parse(value) is not None
    try:
        dt.date.fromisoformat(value[:10])
    except ValueError:
        return False
    return True
