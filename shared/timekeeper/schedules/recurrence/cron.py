"""The cron form: POSIX five-field cron in local wall time, with the day tokens of the
well-kept cron dialects: ``L``, ``LW``, ``L-n``, ``nW`` in day-of-month, ``d#n``, ``dL`` in
day-of-week."""

from __future__ import annotations

import calendar as _calendar
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from functools import lru_cache

from timekeeper.schedules.recurrence.base import _MAX_DAYS_IN_MONTH, _MIN_DAYS_IN_MONTH, InvalidRecurrence
from timekeeper.schedules.recurrence.walltime import _WallTimeRecurrence

# ------------------------------------------------------------------------------- cron

_CRON_FIELDS = (
    # name, low, high, names
    ("minute", 0, 59, None),
    ("hour", 0, 23, None),
    ("day-of-month", 1, 31, None),
    ("month", 1, 12, {n.upper(): i for i, n in enumerate(_calendar.month_abbr) if n}),
    ("day-of-week", 0, 7, {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}),
)


def _cron_value(token: str, index: int) -> int:
    name, low, high, names = _CRON_FIELDS[index]
    if token.isascii() and token.isdigit():
        value = int(token)
    elif names is not None and token.upper() in names:
        value = names[token.upper()]
    else:
        raise InvalidRecurrence("cron", f"{name} field: {token!r} is not a valid value")
    if not low <= value <= high:
        raise InvalidRecurrence("cron", f"{name} field: {value} is out of range {low}-{high}")
    return value


_DOM_SPECIAL = re.compile(r"L|LW|L-(\d{1,2})|(\d{1,2})W")
_DOW_SPECIAL = re.compile(r"([0-7]|[A-Za-z]{3})(?:#(\d)|(L))")


def _special(part: str, index: int) -> tuple | None:
    """A special day token as a hashable tuple, None for an ordinary list item.

    Day-of-month: ``("L",)`` the last day, ``("LW",)`` the last weekday (Mon-Fri),
    ``("L-", n)`` n days before the last day, ``("W", n)`` the weekday nearest day n
    within the month. Day-of-week: ``("#", d, n)`` the nth weekday d (cron numbering,
    Sunday = 0), ``("dL", d)`` the last weekday d of the month."""
    name = _CRON_FIELDS[index][0]
    upper = part.upper()
    if index == 2:
        match = _DOM_SPECIAL.fullmatch(upper)
        if match is None:
            return None
        if upper in ("L", "LW"):
            return (upper,)
        if match[1] is not None:
            n = int(match[1])
            if not 1 <= n <= 30:
                raise InvalidRecurrence("cron", f"{name} field: L-{n}: n must be 1-30")
            return ("L-", n)
        n = int(match[2])
        if not 1 <= n <= 31:
            raise InvalidRecurrence("cron", f"{name} field: {n}W: the day must be 1-31")
        return ("W", n)
    if index == 4:
        match = _DOW_SPECIAL.fullmatch(upper)
        if match is None:
            return None
        day = _cron_value(match[1], index) % 7
        if match[3]:
            return ("dL", day)
        n = int(match[2])
        if not 1 <= n <= 5:
            raise InvalidRecurrence("cron", f"{name} field: {part}: the week number after '#' must be 1-5")
        return ("#", day, n)
    if "L" in upper or "W" in upper or "#" in upper:
        if upper not in {n.upper() for n in (_CRON_FIELDS[index][3] or {})}:
            raise InvalidRecurrence(
                "cron", f"{name} field: {part!r}: 'L', 'W' and '#' are only allowed in the day fields")
    return None


@lru_cache(maxsize=4096)
def _parse_cron_field(text: str, index: int) -> tuple[frozenset[int], frozenset[tuple]]:
    """Parse one cron field into its set of values and its special day tokens
    (:func:`_special`: ``L``, ``LW``, ``L-n``, ``nW`` in day-of-month; ``d#n``, ``dL`` in
    day-of-week). Raises :class:`InvalidRecurrence` (field ``cron``) naming the cron field."""
    name, low, high, _ = _CRON_FIELDS[index]
    values: set[int] = set()
    specials: set[tuple] = set()
    for part in text.split(","):
        if not part:
            raise InvalidRecurrence("cron", f"{name} field: empty list item in {text!r}")
        special = _special(part, index)
        if special is not None:
            specials.add(special)
            continue
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
                raise InvalidRecurrence("cron", f"{name} field: step {step_text!r} must be a positive integer")
            step = int(step_text)
        if base == "*":
            lo, hi = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            lo, hi = _cron_value(a, index), _cron_value(b, index)
            if lo > hi:
                raise InvalidRecurrence("cron", f"{name} field: range {base!r} runs backwards")
        else:
            if slash:
                raise InvalidRecurrence("cron", f"{name} field: a step needs a range or '*', got {part!r}")
            lo = hi = _cron_value(base, index)
        values.update(range(lo, hi + 1, step))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values), frozenset(specials)


def _special_dom(special: tuple, day: int, first_weekday: int, ndays: int) -> bool:
    """Whether day-of-month token ``special`` selects ``day`` of a month starting on
    ``first_weekday`` (Monday = 0) with ``ndays`` days."""
    kind = special[0]
    if kind == "L":
        return day == ndays
    if kind == "L-":
        return day == ndays - special[1]
    if kind == "LW":
        target = ndays
    else:
        target = special[1]
        if target > ndays:
            return False  # like a plain day of month: no such day, no run that month
    weekday = (first_weekday + target - 1) % 7  # Monday = 0
    if weekday == 5:  # Saturday: the Friday before, or the Monday after on the 1st
        target = target - 1 if target > 1 else target + 2
    elif weekday == 6:  # Sunday: the Monday after, or the Friday before on the last day
        target = target + 1 if target < ndays else target - 2
    return day == target


def _special_dow(special: tuple, day: int, cron_weekday: int, ndays: int) -> bool:
    """Whether day-of-week token ``special`` selects ``day`` (cron weekday, Sunday = 0)."""
    if special[1] != cron_weekday:
        return False
    if special[0] == "dL":
        return day + 7 > ndays
    return (day + 6) // 7 == special[2]


@lru_cache(maxsize=8192)
def _cron_days(dom: frozenset[int], dow: frozenset[int], dom_special: frozenset[tuple],
               dow_special: frozenset[tuple], both: bool, first_weekday: int, ndays: int) -> tuple[int, ...]:
    """The days a cron day-of-month / day-of-week pair selects in a month that starts on
    ``first_weekday`` (Monday = 0) and has ``ndays`` days: both must match when ``both``
    (one field is unrestricted), either otherwise. Cached: there are 28 month shapes."""
    found = []
    for day in range(1, ndays + 1):
        cron_weekday = (first_weekday + day) % 7  # cron: Sunday = 0
        dom_ok = day in dom or any(_special_dom(s, day, first_weekday, ndays) for s in dom_special)
        dow_ok = cron_weekday in dow or any(_special_dow(s, day, cron_weekday, ndays) for s in dow_special)
        if (dom_ok and dow_ok) if both else (dom_ok or dow_ok):
            found.append(day)
    return tuple(found)


@lru_cache(maxsize=1024)
def _minute_product(hours: frozenset[int], minutes: frozenset[int]) -> frozenset[int]:
    """The minutes of the day a cron hour and minute field select."""
    return frozenset(h * 60 + m for h in hours for m in minutes)


class _CronRecurrence(_WallTimeRecurrence):
    __slots__ = ("_months", "_dom", "_dom_special", "_dow", "_dow_special", "_and", "_month_cache")

    def __init__(self, expression: str, zone_name: str, dst: tuple[str, str] | None = None) -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise InvalidRecurrence(
                "cron", f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
        minutes, _ = _parse_cron_field(fields[0], 0)
        hours, _ = _parse_cron_field(fields[1], 1)
        dom, dom_special = _parse_cron_field(fields[2], 2)
        months, _ = _parse_cron_field(fields[3], 3)
        dow, dow_special = _parse_cron_field(fields[4], 4)
        # Vixie/POSIX: a field starting with '*' is unrestricted. If both day fields are
        # restricted a day matches when EITHER matches; otherwise both must match.
        dom_star = fields[2].startswith("*")
        dow_star = fields[4].startswith("*")
        self._months = months
        self._dom = dom
        self._dom_special = dom_special
        self._dow_special = dow_special
        self._dow = dow
        self._and = dom_star or dow_star
        self._month_cache: dict[int, tuple[int, ...]] = {}
        if self._and and not dom_star and not dom_special:
            # Only the day-of-month decides: it must exist in some selected month.
            if min(dom) > max(_MAX_DAYS_IN_MONTH[m] for m in months):
                raise InvalidRecurrence("cron", "the day-of-month and month fields never match a real date")
        warnings: list[str] = []
        shortest = min(_MIN_DAYS_IN_MONTH[m] for m in months)
        long_days = sorted(d for d in dom if d > shortest)
        if long_days and len(dom) < 31:
            listed = ", ".join(str(d) for d in long_days)
            warnings.append(
                f"cron day-of-month {listed} does not exist in every month; cron skips the "
                "months without it (POSIX meaning). For the last day of shorter months use "
                'a calendar rule with month_day (clamps to the last day) or month_day "last" '
                "(or 'L' in cron).")
        self.warnings = tuple(warnings)
        self._init_wall(zone_name, _minute_product(hours, minutes), dst)
        self._normalised = {"cron": " ".join(f.upper() for f in fields), "timezone": zone_name}
        self.nominal_period = self._estimate_period()

    def _never_fires_field(self, now: datetime, horizon: timedelta) -> str:
        return "cron"

    def _estimate_period(self) -> timedelta:
        p_dom = min(1.0, (len(self._dom) + len(self._dom_special)) / 30.436875)
        p_dow = min(1.0, (len(self._dow) + len(self._dow_special) / 4.35) / 7)
        if self._and:
            p_day = p_dom * p_dow
        else:
            p_day = 1 - (1 - p_dom) * (1 - p_dow)
        per_day = p_day * len(self._months) / 12 * len(self._minutes)
        return timedelta(days=1 / per_day)

    def _month_days(self, y: int, m: int) -> tuple[int, ...]:
        key = y * 12 + m
        days = self._month_cache.get(key)
        if days is None:
            first_weekday, ndays = _calendar.monthrange(y, m)  # Monday = 0
            days = _cron_days(self._dom, self._dow, self._dom_special, self._dow_special, self._and,
                              first_weekday, ndays)
            if len(self._month_cache) >= 240:
                self._month_cache.clear()
            self._month_cache[key] = days
        return days

    def _dates_from(self, start: date) -> Iterator[date]:
        y, m, first = start.year, start.month, start.day
        months = self._months
        while y <= 9999:
            if m in months:
                for day in self._month_days(y, m):
                    if day >= first:
                        yield date(y, m, day)
            first = 1
            m += 1
            if m == 13:
                m = 1
                y += 1

    def _count_dates(self, first: date, last: date) -> int:
        count = 0
        y, m = first.year, first.month
        months = self._months
        while (y, m) <= (last.year, last.month):
            if m in months:
                days = self._month_days(y, m)
                lo = first.day if (y, m) == (first.year, first.month) else 1
                hi = last.day if (y, m) == (last.year, last.month) else 31
                count += bisect_right(days, hi) - bisect_left(days, lo)
            m += 1
            if m == 13:
                m = 1
                y += 1
        return count

    def _dates_before(self, end: date, stop: date) -> Iterator[date]:
        y, m, last = end.year, end.month, end.day
        months = self._months
        floor = (stop.year, stop.month)
        while (y, m) >= floor:
            if m in months:
                for day in reversed(self._month_days(y, m)):
                    if day <= last:
                        d = date(y, m, day)
                        if d < stop:
                            return
                        yield d
            last = 31
            m -= 1
            if m == 0:
                m = 12
                y -= 1
