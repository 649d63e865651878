"""The calendar form: daily, weekly, monthly and yearly rules with times of day."""

from __future__ import annotations

import calendar as _calendar
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from timekeeper.schedules.recurrence.base import (
    _AVG_MONTH,
    _AVG_YEAR,
    _DEFAULT_START,
    _MAX_DAYS_IN_MONTH,
    _MONTH_NAMES,
    _ONE_DAY,
    _WEEKDAY_CODES,
    InvalidRecurrence,
    _plus,
)
from timekeeper.schedules.recurrence.business import (
    DEFAULT_BUSINESS_WEEK,
    HOLIDAYS_VERSION,
    check_holiday_code,
    holidays_in_month,
    most_business_days,
    nth_business_day,
)
from timekeeper.schedules.recurrence.walltime import _WallTimeRecurrence

# --------------------------------------------------------------------------- calendar

if TYPE_CHECKING:
    from timekeeper.schedules.recurrence.schema import _CalendarModel


class _CalendarRecurrence(_WallTimeRecurrence):
    __slots__ = ("_frequency", "_interval", "_start", "_weekdays", "_month_day", "_nth", "_month",
                 "_business_day", "_holidays", "_closed", "_month_days")

    def __init__(self, cal: _CalendarModel, zone_name: str, dst: tuple[str, str] | None = None) -> None:
        freq = cal.frequency
        allowed = {
            "daily": set(),
            "weekly": {"weekdays"},
            "monthly": {"month_day", "nth_weekday", "business_day"},
            "yearly": {"month_day", "nth_weekday", "month"},
        }[freq]
        for name in ("weekdays", "month_day", "nth_weekday", "month", "business_day"):
            if getattr(cal, name) is not None and name not in allowed:
                if name == "weekdays" and cal.business_day is not None:
                    continue  # the business week of a business-day rule
                raise InvalidRecurrence(f"calendar.{name}", f"not allowed for frequency {freq!r}")
        if cal.holidays is not None and cal.business_day is None:
            raise InvalidRecurrence("calendar.holidays", "only allowed with business_day")
        day_forms = [name for name in ("month_day", "nth_weekday", "business_day") if getattr(cal, name) is not None]
        if len(day_forms) > 1:
            raise InvalidRecurrence(f"calendar.{day_forms[1]}", f"give one of month_day, nth_weekday or "
                                    f"business_day, not {' and '.join(day_forms)}")
        if freq in ("monthly", "yearly") and not day_forms:
            raise InvalidRecurrence("calendar.month_day", f"a {freq} rule needs month_day or nth_weekday"
                                    + (" or business_day" if freq == "monthly" else ""))
        self._business_day = cal.business_day
        self._holidays = None
        self._closed: frozenset[date] = frozenset()
        self._month_days: dict[int, int | None] = {}
        if cal.business_day is not None:
            week = tuple(sorted({_WEEKDAY_CODES.index(w) for w in cal.weekdays})) if cal.weekdays \
                else DEFAULT_BUSINESS_WEEK
            most = most_business_days(week)
            if cal.business_day == 0 or abs(cal.business_day) > most:
                raise InvalidRecurrence("calendar.business_day", f"must be 1 to {most} or -1 to -{most}: no month "
                                        f"has more than {most} business days in this business week")
            if cal.holidays is not None:
                country, subdivision = check_holiday_code(cal.holidays)
                self._holidays = country + (f"-{subdivision}" if subdivision else "")
        if freq == "yearly":
            if cal.month is None:
                raise InvalidRecurrence("calendar.month", "a yearly rule needs month (1-12)")
            if isinstance(cal.month_day, int) and cal.month_day > _MAX_DAYS_IN_MONTH[cal.month]:
                raise InvalidRecurrence(
                    "calendar.month_day",
                    f"{_MONTH_NAMES[cal.month]} has at most {_MAX_DAYS_IN_MONTH[cal.month]} days; "
                    'use "last" for its last day')
        self._frequency = freq
        self._interval = cal.interval
        self._start = cal.start_date or _DEFAULT_START
        weekdays = cal.weekdays or ([_WEEKDAY_CODES[w] for w in DEFAULT_BUSINESS_WEEK]
                                    if cal.business_day is not None else [_WEEKDAY_CODES[self._start.weekday()]])
        self._weekdays = tuple(sorted({_WEEKDAY_CODES.index(w) for w in weekdays}))
        self._month_day = cal.month_day
        self._nth = (cal.nth_weekday[0], _WEEKDAY_CODES.index(cal.nth_weekday[1])) if cal.nth_weekday else None
        self._month = cal.month
        if not self._ever_fires():
            raise InvalidRecurrence(
                "calendar.nth_weekday",
                f"never occurs: no month this rule selects has a 5th {_WEEKDAY_CODES[self._nth[1]]}")
        self.warnings = _repeats_noted(cal)
        minutes = [t.hour * 60 + t.minute for t in cal.times]
        self._init_wall(zone_name, frozenset(minutes), dst)

        canonical: dict[str, Any] = {
            "frequency": freq,
            "interval": self._interval,
            "start_date": self._start.isoformat(),
            "times": [t.strftime("%H:%M") for t in self._times],
        }
        if freq == "weekly" or self._business_day is not None:
            canonical["weekdays"] = [_WEEKDAY_CODES[w] for w in self._weekdays]
        if self._business_day is not None:
            canonical["business_day"] = self._business_day
        if self._holidays is not None:
            canonical["holidays"] = self._holidays
        if self._month_day is not None:
            canonical["month_day"] = self._month_day
        if self._nth is not None:
            canonical["nth_weekday"] = [self._nth[0], _WEEKDAY_CODES[self._nth[1]]]
        if self._month is not None:
            canonical["month"] = self._month
        self._normalised = {"calendar": canonical, "timezone": zone_name}
        per_period = len(self._minutes) * (len(self._weekdays) if freq == "weekly" else 1)
        base = {"daily": _ONE_DAY, "weekly": 7 * _ONE_DAY, "monthly": _AVG_MONTH, "yearly": _AVG_YEAR}[freq]
        self.nominal_period = base * self._interval / per_period

    def _ever_fires(self) -> bool:
        """False for a rule that selects no date at all (a 5th weekday that never falls
        in the months it selects, e.g. every other February's 5th Monday from an odd year).
        The Gregorian calendar repeats every 400 years (4,800 months), which bounds the scan."""
        if self._nth is None or self._nth[0] != 5:
            return True  # month_day, last, 1st-4th and last weekday exist in every month
        s = self._start
        if self._frequency == "monthly":
            index = s.year * 12 + s.month - 1
            for _ in range(4800):
                if index >= 10000 * 12:
                    break
                y, m0 = divmod(index, 12)
                if self._day_in_month(y, m0 + 1) is not None:
                    return True
                index += self._interval
            return False
        y = s.year
        for _ in range(400):
            if y > 9999:
                break
            if self._day_in_month(y, self._month) is not None:
                return True
            y += self._interval
        return False

    @property
    def holiday_data(self) -> str | None:
        """The holiday data a business-day rule is evaluated with (``"holidays 0.109"``), else None."""
        return f"holidays {HOLIDAYS_VERSION}" if self._business_day is not None else None

    def with_closures(self, closed: frozenset[date]) -> _CalendarRecurrence:
        """A copy of this business-day rule that also treats the local dates ``closed`` as
        non-business days (a workspace's closures); other rules are returned unchanged."""
        if self._business_day is None or not closed:
            return self
        copy = object.__new__(type(self))
        for cls in type(self).__mro__:
            for name in getattr(cls, "__slots__", ()):
                if hasattr(self, name):
                    setattr(copy, name, getattr(self, name))
        copy._closed = frozenset(closed)
        copy._month_days = {}
        copy._key = self.key + "|closed:" + ",".join(sorted(d.isoformat() for d in copy._closed))
        return copy

    def _business_day_in_month(self, y: int, m: int) -> int | None:
        index = y * 12 + m
        try:
            return self._month_days[index]
        except KeyError:
            pass
        closed = holidays_in_month(self._holidays, y, m)
        if self._closed:
            closed = closed | {d for d in self._closed if d.year == y and d.month == m}
        day = nth_business_day(self._business_day, y, m, self._weekdays, closed)
        if len(self._month_days) > 4096:
            self._month_days.clear()
        self._month_days[index] = day
        return day

    def _day_in_month(self, y: int, m: int) -> int | None:
        """The rule's day in month (y, m): clamped month_day, last day, Nth weekday or Nth business day."""
        if self._business_day is not None:
            return self._business_day_in_month(y, m)
        first_weekday, ndays = _calendar.monthrange(y, m)
        md = self._month_day
        if md == "last":
            return ndays
        if md is not None:
            return min(md, ndays)
        n, wd = self._nth
        if n == -1:
            last_weekday = (first_weekday + ndays - 1) % 7
            return ndays - (last_weekday - wd) % 7
        day = 1 + (wd - first_weekday) % 7 + 7 * (n - 1)
        return day if day <= ndays else None

    def _dates_from(self, start: date) -> Iterator[date]:
        s = self._start
        if start < s:
            start = s
        n = self._interval
        freq = self._frequency
        if freq == "daily":
            k = -(-(start - s).days // n)
            d = s + timedelta(days=k * n)
            step = timedelta(days=n)
            while True:
                yield d
                d += step
        elif freq == "weekly":
            s_monday = s - timedelta(days=s.weekday())
            weeks = (start - s_monday).days // 7
            k = -(-weeks // n) * n
            monday = s_monday + timedelta(weeks=k)
            step = timedelta(weeks=n)
            offsets = [timedelta(days=w) for w in self._weekdays]
            while True:
                for offset in offsets:
                    d = monday + offset
                    if d >= start:
                        yield d
                monday += step
        elif freq == "monthly":
            s_index = s.year * 12 + s.month - 1
            index = start.year * 12 + start.month - 1
            index = s_index + -(-(index - s_index) // n) * n
            while index < 10000 * 12:
                y, m0 = divmod(index, 12)
                day = self._day_in_month(y, m0 + 1)
                if day is not None:
                    d = date(y, m0 + 1, day)
                    if d >= start:
                        yield d
                index += n
        else:  # yearly
            y = s.year + -(-(start.year - s.year) // n) * n
            while y <= 9999:
                day = self._day_in_month(y, self._month)
                if day is not None:
                    d = date(y, self._month, day)
                    if d >= start:
                        yield d
                y += n

    def _dates_before(self, end: date, stop: date) -> Iterator[date]:
        s = self._start
        stop = max(stop, s)
        if end < stop:
            return
        n = self._interval
        freq = self._frequency
        if freq == "daily":
            d = s + timedelta(days=(end - s).days // n * n)
            step = timedelta(days=n)
            while d >= stop:
                yield d
                if d - stop < step:
                    return
                d -= step
        elif freq == "weekly":
            s_monday = s - timedelta(days=s.weekday())
            monday = s_monday + timedelta(weeks=(end - s_monday).days // 7 // n * n)
            step = timedelta(weeks=n)
            offsets = [timedelta(days=w) for w in reversed(self._weekdays)]
            while True:
                for offset in offsets:
                    d = monday + offset
                    if d < stop:
                        return
                    if d <= end:
                        yield d
                monday -= step
        elif freq == "monthly":
            s_index = s.year * 12 + s.month - 1
            index = s_index + (end.year * 12 + end.month - 1 - s_index) // n * n
            while index >= s_index:
                y, m0 = divmod(index, 12)
                day = self._day_in_month(y, m0 + 1)
                if day is not None:
                    d = date(y, m0 + 1, day)
                    if d < stop:
                        return
                    if d <= end:
                        yield d
                index -= n
        else:  # yearly
            y = s.year + (end.year - s.year) // n * n
            while y >= s.year:
                day = self._day_in_month(y, self._month)
                if day is not None:
                    d = date(y, self._month, day)
                    if d < stop:
                        return
                    if d <= end:
                        yield d
                y -= n

    def _count_dates(self, first: date, last: date) -> int:
        if self._frequency != "daily":
            return super()._count_dates(first, last)
        s, n = self._start, self._interval
        first = max(first, s)
        if last < first:
            return 0
        return (last - s).days // n - -(-(first - s).days // n) + 1

    def _never_fires_field(self, now: datetime, horizon: timedelta) -> str:
        if self._start > self._local_date(_plus(now, horizon)):
            return "calendar.start_date"
        if self._interval > 1:
            return "calendar.interval"
        if self._business_day is not None:
            return "calendar.business_day"
        return "calendar.nth_weekday" if self._nth is not None else "calendar"


def _repeats_noted(cal: _CalendarModel) -> tuple[str, ...]:
    """Warnings for a time or weekday listed more than once: the rule keeps each once (a
    repeat is never a second run), and the caller is told, as the stored definition may
    have been written so (it stays valid)."""
    notes = []
    times = [t.strftime("%H:%M") for t in cal.times]
    for name, values in (("times", times), ("weekdays", list(cal.weekdays or ()))):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            notes.append(f"calendar.{name} lists {', '.join(repeated)} more than once; each runs once")
    return tuple(notes)
