"""Parsers of PostgreSQL's dates, times, timestamps and intervals (under the session's ISO
styles) into Avro's days and microseconds, for every value PostgreSQL holds, BC and beyond 9999
included, and the calendar arithmetic that takes them there."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

from schemas.pgtypes.avro import (
    AVRO_NAMESPACE,
    DATE_NEG_INFINITY,
    DATE_POS_INFINITY,
    INT_MAX,
    INT_MIN,
    INTERVAL_NEG_INFINITY,
    INTERVAL_POS_INFINITY,
    LONG_MAX,
    LONG_MIN,
    TS_NEG_INFINITY,
    TS_POS_INFINITY,
)


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year: 1 BC is 0)."""
    if month <= 2:
        year -= 1
        mp = month + 9
    else:
        mp = month - 3
    era = year // 400
    yoe = year - era * 400
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The inverse of :func:`days_from_civil`: (astronomical year, month, day)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


_date_fromiso = date.fromisoformat
_DATE_INF = {"infinity": DATE_POS_INFINITY, "-infinity": DATE_NEG_INFINITY}
DAY_MICROS = 86_400_000_000


_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _date_days(text: str, end: int, bc: bool = False) -> int:
    """Days of the ``YYYY-MM-DD`` ending at ``end`` (the year may have more than 4 digits;
    with ``bc``, year N is N BC, astronomical year 1 - N)."""
    if text[end - 3] != "-" or text[end - 6] != "-" or not text[: end - 6].isdigit():
        raise ValueError("not an ISO date")
    year = int(text[: end - 6])
    month = int(text[end - 5 : end - 3])
    day = int(text[end - 2 : end])
    if bc:
        year = 1 - year
    if not 1 <= month <= 12:
        raise ValueError("month out of range")
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= _MONTH_DAYS[month] + leap:
        raise ValueError("day out of range")
    return days_from_civil(year, month, day)


def parse_date(text: str) -> int:
    if len(text) == 10:
        try:
            return _date_fromiso(text).toordinal() - EPOCH_ORDINAL
        except ValueError:
            pass
    if text[-1] == "C":
        if not text.endswith(" BC"):
            raise ValueError("not an ISO date")
        return _date_days(text, len(text) - 3, bc=True)
    if text[0] in "-i":
        return _DATE_INF[text]
    return _date_days(text, len(text))


_TS_INF = {"infinity": TS_POS_INFINITY, "-infinity": TS_NEG_INFINITY}
_TIME_RE = re.compile(
    r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?)?\Z"
)


def _time_micros(text: str, start: int, with_tz: bool) -> int:
    """Micros of ``HH:MM:SS[.ffffff][±HH[:MM[:SS]]]`` starting at ``start``, minus the offset."""
    end = len(text)
    if end - start == 8 and not with_tz:
        if text[start + 2] != ":" or text[start + 5] != ":":
            raise ValueError("not an ISO time")
        return (
            int(text[start : start + 2]) * 3600
            + int(text[start + 3 : start + 5]) * 60
            + int(text[start + 6 : end])
        ) * 1_000_000
    m = _TIME_RE.match(text, start)
    if m is None:
        raise ValueError("not an ISO time")
    hour, minute, second, frac, sign, oh, om, osec = m.groups()
    if (sign is not None) != with_tz:
        raise ValueError("unexpected time zone" if sign else "missing time zone")
    micros = (int(hour) * 3600 + int(minute) * 60 + int(second)) * 1_000_000
    if frac:
        micros += int(frac) * 10 ** (6 - len(frac))
    if sign:
        offset = int(oh) * 3600 + (int(om) * 60 if om else 0) + (int(osec) if osec else 0)
        micros -= offset * 1_000_000 if sign == "+" else -offset * 1_000_000
    return micros


_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_ORDINAL = 719163  # date(1970, 1, 1).toordinal()


def timestamp_parser(with_tz: bool) -> Callable[[str], int]:
    """timestamp(tz) text → micros since 1970-01-01 (UTC). Years 1..9999 go through the C
    datetime parser; BC, years past 9999 and the infinities through the calendar arithmetic
    of :func:`days_from_civil`."""
    fromiso = datetime.fromisoformat
    epoch = _EPOCH_UTC if with_tz else _EPOCH

    def general(text: str) -> int:
        first = text[0]
        if first == "-" or first == "i":
            return _TS_INF[text]
        space = text.index(" ")
        if text[-1] == "C":
            if not text.endswith(" BC"):
                raise ValueError("not an ISO timestamp")
            days = _date_days(text, space, bc=True)
            micros = days * DAY_MICROS + _time_micros(text[:-3], space + 1, with_tz)
        else:
            micros = _date_days(text, space) * DAY_MICROS + _time_micros(text, space + 1, with_tz)
        if micros >= LONG_MAX or micros <= LONG_MIN:
            raise ValueError("beyond what microseconds since 1970 in an Avro long can hold")
        return micros

    def parse(text: str) -> int:
        try:
            since = fromiso(text) - epoch
        except ValueError:
            return general(text)
        except TypeError:  # an offset where none belongs, or none where one should be
            reason = "missing time zone" if with_tz else "unexpected time zone"
            raise ValueError(reason) from None
        # a third cheaper than dividing the timedelta by a microsecond's (measured: 0.44 µs
        # against 0.68 µs a value); the same integer
        return (since.days * 86400 + since.seconds) * 1_000_000 + since.microseconds

    return parse


def parse_time(text: str) -> int:
    if len(text) > 8 and text[8] != ".":
        raise ValueError("unexpected text after the time")
    micros = _time_micros(text, 0, False)
    if micros > DAY_MICROS:
        raise ValueError("time of day out of range")
    return micros


_INTERVAL_RE = re.compile(
    r"(-)?P(?:([+-]?\d+)Y)?(?:([+-]?\d+)M)?(?:([+-]?\d+)W)?(?:([+-]?\d+)D)?"
    r"(?:T(?:([+-]?\d+)H)?(?:([+-]?\d+)M)?(?:([+-])?(\d+)(?:\.(\d{1,6}))?S)?)?\Z"
)


def parse_interval(text: str) -> dict[str, int]:
    m = _INTERVAL_RE.match(text)
    if m is None or text.endswith("T") or text == "P" or text == "-P":
        if text == "infinity":
            return dict(INTERVAL_POS_INFINITY)
        if text == "-infinity":
            return dict(INTERVAL_NEG_INFINITY)
        raise ValueError("not an ISO 8601 interval (IntervalStyle must be iso_8601)")
    neg, years, months, weeks, days, hours, minutes, ssign, secs, frac = m.groups()
    total_months = (int(years) * 12 if years else 0) + (int(months) if months else 0)
    total_days = (int(weeks) * 7 if weeks else 0) + (int(days) if days else 0)
    micros = ((int(hours) * 3600 if hours else 0) + (int(minutes) * 60 if minutes else 0)) * 10**6
    if secs:
        s = int(secs) * 1_000_000 + (int(frac) * 10 ** (6 - len(frac)) if frac else 0)
        micros += -s if ssign == "-" else s
    if neg:
        total_months, total_days, micros = -total_months, -total_days, -micros
    if not (INT_MIN <= total_months <= INT_MAX and INT_MIN <= total_days <= INT_MAX):
        raise ValueError("months or days out of the Avro int's range")
    if not LONG_MIN <= micros <= LONG_MAX:
        raise ValueError("time part out of the Avro long's range")
    return {"months": total_months, "days": total_days, "microseconds": micros}


INTERVAL_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Interval",
    "namespace": AVRO_NAMESPACE,
    "doc": "A PostgreSQL interval: months, days and microseconds, each with its own sign.",
    "fields": [
        {"name": "months", "type": "int"},
        {"name": "days", "type": "int"},
        {"name": "microseconds", "type": "long"},
    ],
}
