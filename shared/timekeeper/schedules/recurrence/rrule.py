"""The RFC 5545 RRULE form: a recurrence rule of iCalendar, evaluated in local wall time.

``{"rrule": "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18", "timezone":
"Europe/Berlin", "start": "2027-01-01", "exdate": ["2027-12-31"]}``. ``start`` is the
series' first local date (DTSTART at local midnight): INTERVAL and COUNT count from it
and BYHOUR / BYMINUTE default to 0. The dates of each period (year, month, ISO week or
day) are expanded and limited as RFC 5545 says (BYMONTH, BYWEEKNO, BYYEARDAY,
BYMONTHDAY, BYDAY, then BYSETPOS); each date's wall times are resolved by the shared
wall-time resolver, so the DST policy is the cron and calendar forms' one.
"""

from __future__ import annotations

import calendar as _calendar
import re
from bisect import bisect_left
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any

from timekeeper.schedules.recurrence.base import _ONE_DAY, _WEEKDAY_CODES, UTC, InvalidRecurrence, Occurrence
from timekeeper.schedules.recurrence.schema import dst_choice
from timekeeper.schedules.recurrence.walltime import _WallTimeRecurrence

_FREQS = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY")
_REFUSED_FREQS = ("HOURLY", "MINUTELY", "SECONDLY")
_PARTS = {"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "BYMONTHDAY", "BYMONTH", "BYSETPOS", "BYWEEKNO",
          "BYYEARDAY", "BYHOUR", "BYMINUTE", "WKST"}
_REFUSED_PARTS = {"BYSECOND", "BYEASTER", "RSCALE", "SKIP"}
_BYDAY = re.compile(r"([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)")
_UNTIL = re.compile(r"(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})(Z)?)?")
_EXDATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2}))?")
#: COUNT is expanded once when the rule is compiled; a larger count is refused.
MAX_COUNT = 10_000
_MAX_INTERVAL = 1000
_EARLIEST_START = date(1900, 1, 1)
#: A run of empty periods this long means the rule selects no more dates.
_EMPTY_SPAN_DAYS = 400 * 366


def _ints(part: str, text: str, low: int, high: int, signed: bool = False) -> tuple[int, ...]:
    values = []
    for item in text.split(","):
        if not re.fullmatch(r"[+-]?\d{1,3}" if signed else r"\d{1,5}", item):
            raise InvalidRecurrence(f"rrule.{part}", f"{item!r} is not a valid value")
        value = int(item)
        if not low <= abs(value) <= high or (not signed and value < low):
            raise InvalidRecurrence(f"rrule.{part}", f"{value} is out of range")
        values.append(value)
    return tuple(sorted(set(values)))


class _RRuleRecurrence(_WallTimeRecurrence):
    __slots__ = ("_freq", "_interval", "_start", "_key0", "_bymonth", "_byweekno", "_byyearday", "_bymonthday",
                 "_byday", "_bynday", "_bysetpos", "_end_date", "_until_at", "_ex_dates", "_ex_times",
                 "_period_cache")

    def __init__(self, text: str, zone_name: str, start: date, exdates: tuple[str, ...],
                 dst: tuple[str, str] | None = None) -> None:
        parts: dict[str, str] = {}
        for item in text.strip().upper().removeprefix("RRULE:").split(";"):
            name, eq, value = item.partition("=")
            if not eq or not value:
                raise InvalidRecurrence("rrule", f"{item!r} is not NAME=VALUE")
            if name in _REFUSED_PARTS:
                raise InvalidRecurrence(f"rrule.{name}", "not supported")
            if name not in _PARTS:
                raise InvalidRecurrence(f"rrule.{name}", "unknown rule part")
            if name in parts:
                raise InvalidRecurrence(f"rrule.{name}", "given twice")
            parts[name] = value
        freq = parts.get("FREQ")
        if freq is None:
            raise InvalidRecurrence("rrule.FREQ", "required")
        if freq in _REFUSED_FREQS:
            raise InvalidRecurrence("rrule.FREQ", f"{freq} is not supported (DAILY, WEEKLY, MONTHLY or YEARLY; "
                                                  "use BYHOUR / BYMINUTE or an interval rule)")
        if freq not in _FREQS:
            raise InvalidRecurrence("rrule.FREQ", f"{freq!r} is not a frequency")
        if parts.get("WKST", "MO") != "MO":
            raise InvalidRecurrence("rrule.WKST", "only MO (ISO weeks) is supported")
        self._freq = freq
        self._interval = _ints("INTERVAL", parts["INTERVAL"], 1, _MAX_INTERVAL)[0] if "INTERVAL" in parts else 1
        self._start = start
        self._bymonth = frozenset(_ints("BYMONTH", parts["BYMONTH"], 1, 12)) if "BYMONTH" in parts else None
        self._byweekno = frozenset(_ints("BYWEEKNO", parts["BYWEEKNO"], 1, 53, True)) if "BYWEEKNO" in parts else None
        self._byyearday = (frozenset(_ints("BYYEARDAY", parts["BYYEARDAY"], 1, 366, True))
                           if "BYYEARDAY" in parts else None)
        self._bymonthday = (frozenset(_ints("BYMONTHDAY", parts["BYMONTHDAY"], 1, 31, True))
                            if "BYMONTHDAY" in parts else None)
        self._bysetpos = _ints("BYSETPOS", parts["BYSETPOS"], 1, 366, True) if "BYSETPOS" in parts else None
        if self._byweekno is not None and freq != "YEARLY":
            raise InvalidRecurrence("rrule.BYWEEKNO", "only with FREQ=YEARLY")
        if self._byyearday is not None and freq in ("MONTHLY", "WEEKLY"):
            raise InvalidRecurrence("rrule.BYYEARDAY", "not with FREQ=MONTHLY or WEEKLY")
        if self._bymonthday is not None and freq == "WEEKLY":
            raise InvalidRecurrence("rrule.BYMONTHDAY", "not with FREQ=WEEKLY")
        plain: set[int] = set()
        nth: set[tuple[int, int]] = set()
        if "BYDAY" in parts:
            for item in parts["BYDAY"].split(","):
                match = _BYDAY.fullmatch(item)
                if match is None or (match[1] is not None and not 1 <= abs(int(match[1])) <= 53):
                    raise InvalidRecurrence("rrule.BYDAY", f"{item!r} is not a weekday (MO..SU, with an ordinal)")
                weekday = _WEEKDAY_CODES.index(match[2])
                if match[1] is None:
                    plain.add(weekday)
                else:
                    if freq in ("WEEKLY", "DAILY"):
                        raise InvalidRecurrence("rrule.BYDAY", f"an ordinal ({item}) needs FREQ=MONTHLY or YEARLY")
                    if self._byweekno is not None:
                        raise InvalidRecurrence("rrule.BYDAY", "an ordinal is not allowed with BYWEEKNO")
                    if freq == "MONTHLY" or self._bymonth is not None:
                        if abs(int(match[1])) > 5:
                            raise InvalidRecurrence("rrule.BYDAY", f"{item}: a month has at most 5 of a weekday")
                    nth.add((weekday, int(match[1])))
            if plain and nth:
                raise InvalidRecurrence("rrule.BYDAY", "mix weekdays with and without ordinals in separate rules")
        if not (self._byweekno or self._byyearday or self._bymonthday or plain or nth):
            # RFC 5545: the parts the start date supplies when the rule gives none.
            if freq == "YEARLY":
                self._bymonth = self._bymonth or frozenset({start.month})
                self._bymonthday = frozenset({start.day})
            elif freq == "MONTHLY":
                self._bymonthday = frozenset({start.day})
            elif freq == "WEEKLY":
                plain = {start.weekday()}
        self._byday = frozenset(plain) or None
        self._bynday = frozenset(nth) or None
        hours = _ints("BYHOUR", parts["BYHOUR"], 0, 23) if "BYHOUR" in parts else (0,)
        minutes = _ints("BYMINUTE", parts["BYMINUTE"], 0, 59) if "BYMINUTE" in parts else (0,)
        if self._bysetpos is not None and len(hours) * len(minutes) > 1:
            raise InvalidRecurrence("rrule.BYSETPOS", "only with one time of day (one BYHOUR and one BYMINUTE)")
        self._period_cache: dict[int, tuple[date, ...]] = {}
        self._key0 = self._period_key(start)
        self._ex_dates: frozenset[date] = frozenset()
        self._ex_times: frozenset[tuple[date, int]] = frozenset()
        self._parse_exdates(exdates)
        self._init_wall(zone_name, frozenset(h * 60 + m for h in hours for m in minutes), dst)
        self._end_date = date(9999, 12, 31)
        self._until_at: datetime | None = None
        if "COUNT" in parts and "UNTIL" in parts:
            raise InvalidRecurrence("rrule.COUNT", "give COUNT or UNTIL, not both")
        if "UNTIL" in parts:
            self._set_until(parts["UNTIL"])
        if "COUNT" in parts:
            self._set_count(_ints("COUNT", parts["COUNT"], 1, MAX_COUNT)[0])
        self.warnings = ()
        self._normalised = {"rrule": ";".join(f"{k}={v}" for k, v in sorted(parts.items())),
                            "timezone": zone_name, "start": start.isoformat(),
                            **({"exdate": sorted(exdates)} if exdates else {})}
        self.nominal_period = self._estimate_period()

    # ------------------------------------------------------------------ compile helpers

    def _parse_exdates(self, exdates: tuple[str, ...]) -> None:
        days, times = set(), set()
        for i, text in enumerate(exdates):
            match = _EXDATE.fullmatch(text)
            try:
                if match is None:
                    raise ValueError
                d = date(int(match[1]), int(match[2]), int(match[3]))
                if match[4] is not None:
                    h, m = int(match[4]), int(match[5])
                    if h > 23 or m > 59:
                        raise ValueError
                    times.add((d, h * 60 + m))
                else:
                    days.add(d)
            except ValueError:
                raise InvalidRecurrence(f"exdate[{i}]", "must be a local date 'YYYY-MM-DD' or 'YYYY-MM-DDTHH:MM'") \
                    from None
        self._ex_dates, self._ex_times = frozenset(days), frozenset(times)

    def _wall_instant(self, d: date, minute: int) -> datetime:
        """The latest instant local ``d`` at ``minute`` runs at: by the gap rule (fold 0's
        offset), and in an overlap the second instant when the rule runs there (the
        overlap choice ``second`` or ``both``)."""
        h, m = divmod(minute, 60)
        naive = datetime(d.year, d.month, d.day, h, m)
        at = naive.replace(tzinfo=UTC) - self._zone.utcoffset(naive)
        if self._overlap != "first":
            at = max(at, naive.replace(tzinfo=UTC) - self._zone.utcoffset(naive.replace(fold=1)))
        return at

    def _set_until(self, text: str) -> None:
        match = _UNTIL.fullmatch(text)
        try:
            if match is None:
                raise ValueError
            d = date(int(match[1]), int(match[2]), int(match[3]))
            if match[4] is None:
                until = self._wall_instant(d, 0)  # a date is its local midnight (as dateutil reads it)
            else:
                wall = datetime(d.year, d.month, d.day, int(match[4]), int(match[5]), int(match[6]))
                until = wall.replace(tzinfo=UTC) - (timedelta(0) if match[7] else self._zone.utcoffset(wall))
                if not match[7] and self._overlap != "first":
                    # A floating UNTIL on a repeated wall time ends after the last instant the
                    # overlap choice runs it at (its second), as a COUNT ending there does.
                    until = max(until, wall.replace(tzinfo=UTC) - self._zone.utcoffset(wall.replace(fold=1)))
        except (ValueError, OverflowError):
            raise InvalidRecurrence("rrule.UNTIL", "must be a date YYYYMMDD or a date-time YYYYMMDDTHHMMSS[Z]") \
                from None
        self._until_at = until
        self._end_date = min(self._end_date, d + _ONE_DAY)

    def _set_count(self, count: int) -> None:
        """Find the ``count``-th local date-time of the series from its start."""
        per_day = len(self._minutes)
        seen = 0
        last: tuple[date, int] | None = None
        excluded, self._ex_dates = self._ex_dates, frozenset()  # RFC 5545: EXDATEs count towards COUNT
        for d in self._dates_from(self._start):
            todo = list(self._minutes)
            if seen + len(todo) >= count:
                last = (d, todo[count - seen - 1])
                break
            seen += len(todo)
        del per_day
        self._ex_dates = excluded
        if last is None:
            return  # fewer than COUNT occurrences before the series ends
        self._end_date = last[0]
        try:
            self._until_at = self._wall_instant(*last)
        except OverflowError:
            pass  # the last day of year 9999: the end date bounds the series

    def _estimate_period(self) -> timedelta:
        days, span = 0, 0
        for d in self._dates_from(self._start):
            days += 1
            span = (d - self._start).days + 1
            if days >= 6 or span > 400:
                break
        if days == 0:
            return timedelta(days=3653)
        return timedelta(days=max(span, 1) / days / len(self._minutes))

    def _never_fires_field(self, now: datetime, horizon: timedelta) -> str:
        return "rrule"

    # ------------------------------------------------------------------ periods

    def _period_key(self, d: date) -> int:
        freq = self._freq
        if freq == "YEARLY":
            return d.year
        if freq == "MONTHLY":
            return d.year * 12 + d.month - 1
        if freq == "WEEKLY":
            return (d.toordinal() - 1) // 7  # date(1, 1, 1) is a Monday
        return d.toordinal()

    def _period_days(self, key: int) -> tuple[date, ...]:
        """The dates period ``key`` selects (before the start-date and exclusion filters)."""
        cached = self._period_cache.get(key)
        if cached is not None:
            return cached
        freq = self._freq
        if freq == "YEARLY":
            first, n = date(key, 1, 1), 366 if _calendar.isleap(key) else 365
        elif freq == "MONTHLY":
            y, m = divmod(key, 12)
            first, n = date(y, m + 1, 1), _calendar.monthrange(y, m + 1)[1]
        elif freq == "WEEKLY":
            first, n = date.fromordinal(key * 7 + 1), 7
        else:
            first, n = date.fromordinal(key), 1
        ordinal = first.toordinal()
        if freq == "YEARLY" and self._bymonth is not None:  # only the selected months' days
            candidates = [date(key, m, day) for m in sorted(self._bymonth)
                          for day in range(1, _calendar.monthrange(key, m)[1] + 1)]
        else:
            candidates = [date.fromordinal(ordinal + i) for i in range(n)]
        if freq == "WEEKLY" and first <= self._start < first + timedelta(days=7):
            # The start's week is the set from the start date on (BYSETPOS counts in it), as
            # the reference implementations expand it; later weeks are whole.
            candidates = [d for d in candidates if d >= self._start]
        days = [d for d in candidates if self._matches(d)]
        if self._bysetpos is not None:
            picked = {days[p - 1] if p > 0 else days[p] for p in self._bysetpos if -len(days) <= p <= len(days)
                      and p != 0}
            days = sorted(picked)
        result = tuple(days)
        if len(self._period_cache) >= 512:
            self._period_cache.clear()
        self._period_cache[key] = result
        return result

    def _matches(self, d: date) -> bool:
        if self._bymonth is not None and d.month not in self._bymonth:
            return False
        if self._byweekno is not None:
            iso_year, week, _ = d.isocalendar()
            if iso_year > d.year:
                # The year's last days in the next year's week 1: the year being expanded
                # numbers its weeks itself, so only BYWEEKNO=1 takes them (a negative number
                # counts this year's weeks), as the reference implementations do.
                if 1 not in self._byweekno:
                    return False
            else:
                weeks = date(iso_year, 12, 28).isocalendar()[1]
                if week not in self._byweekno and week - weeks - 1 not in self._byweekno:
                    return False
        if self._byyearday is not None:
            yday = d.timetuple().tm_yday
            ylen = 366 if _calendar.isleap(d.year) else 365
            if yday not in self._byyearday and yday - ylen - 1 not in self._byyearday:
                return False
        if self._bymonthday is not None:
            ndays = _calendar.monthrange(d.year, d.month)[1]
            if d.day not in self._bymonthday and d.day - ndays - 1 not in self._bymonthday:
                return False
        if self._byday is not None and d.weekday() not in self._byday:
            return False
        if self._bynday is not None:
            weekday = d.weekday()
            if self._freq == "MONTHLY" or self._bymonth is not None:
                ndays = _calendar.monthrange(d.year, d.month)[1]
                forward, backward = (d.day - 1) // 7 + 1, -((ndays - d.day) // 7 + 1)
            else:
                yday = d.timetuple().tm_yday
                ylen = 366 if _calendar.isleap(d.year) else 365
                forward, backward = (yday - 1) // 7 + 1, -((ylen - yday) // 7 + 1)
            if (weekday, forward) not in self._bynday and (weekday, backward) not in self._bynday:
                return False
        return True

    def _period_start(self, key: int) -> date:
        freq = self._freq
        if freq == "YEARLY":
            return date(key, 1, 1)
        if freq == "MONTHLY":
            return date(key // 12, key % 12 + 1, 1)
        if freq == "WEEKLY":
            return date.fromordinal(key * 7 + 1)
        return date.fromordinal(key)

    def _dates_from(self, start: date) -> Iterator[date]:
        start = max(start, self._start)
        key = self._period_key(start)
        interval = self._interval
        key += (-(key - self._key0)) % interval
        empty_since = None
        while True:
            try:
                period_start = self._period_start(key)
            except ValueError:
                return  # past year 9999
            if period_start > self._end_date:
                return
            found = False
            for d in self._period_days(key):
                if d >= start and d <= self._end_date and d not in self._ex_dates:
                    found = True
                    yield d
            if found:
                empty_since = None
            elif empty_since is None:
                empty_since = period_start
            elif (period_start - empty_since).days > _EMPTY_SPAN_DAYS:
                return  # the rule selects no more dates
            key += interval

    def _dates_before(self, end: date, stop: date) -> Iterator[date]:
        end = min(end, self._end_date)
        stop = max(stop, self._start)
        if end < stop:
            return
        key = self._period_key(end)
        key -= (key - self._key0) % self._interval
        while key >= self._key0:
            for d in reversed(self._period_days(key)):
                if d > end or d in self._ex_dates:
                    continue
                if d < stop:
                    return
                yield d
            if self._period_start(key) < stop:
                return
            key -= self._interval

    # ------------------------------------------------------------------ bounds and exclusions

    def _excluded(self, occ: Occurrence) -> bool:
        return bool(self._ex_times) and (occ.local_date, occ.local_time.hour * 60 + occ.local_time.minute) \
            in self._ex_times

    def _iter(self, after: datetime) -> Iterator[Occurrence]:
        until = self._until_at
        for occ in super()._iter(after):
            if until is not None and occ.at > until:
                return
            if not self._excluded(occ):
                yield occ

    def _latest(self, instant: datetime, lower: datetime | None) -> Occurrence | None:
        if self._until_at is not None:
            instant = min(instant, self._until_at)
        while True:
            occ = super()._latest(instant, lower)
            if occ is None or not self._excluded(occ):
                return occ
            instant = occ.at - timedelta(microseconds=1)

    def _count(self, first: datetime, last: datetime) -> tuple[int, bool]:
        if self._until_at is not None:
            last = min(last, self._until_at)
            if last < first:
                return 0, True
        count, exact = super()._count(first, last)
        for d, minute in self._ex_times:
            if d in self._period_days(self._period_key(d)) and d >= self._start and d not in self._ex_dates \
                    and (self._period_key(d) - self._key0) % self._interval == 0 and minute in self._minute_set:
                i = bisect_left(self._minutes, minute)  # each instant the wall time runs at (both: two)
                count -= sum(1 for occ in self._resolve_day(d, i, i + 1) if first <= occ.at <= last)
        return max(count, 0), exact


def rrule_rule(model: Any, zone: str) -> _RRuleRecurrence:
    """Compile the validated rule model's ``rrule``, ``start`` and ``exdate`` (see the module docstring)."""
    if model.start is None:
        raise InvalidRecurrence("start", "required for an rrule rule (the series' first local date, YYYY-MM-DD)")
    if model.start < _EARLIEST_START:
        raise InvalidRecurrence("start", f"must be {_EARLIEST_START.isoformat()} or later")
    return _RRuleRecurrence(model.rrule, zone, model.start, tuple(model.exdate or ()), dst_choice(model))
