"""Recurrence rules: validation and occurrence iteration in wall time and absolute time.

Implements the time policy of schedules: rules are evaluated in the schedule's IANA zone,
a time in a spring-forward gap shifts by the gap and keeps its local date, a fixed time
in a fall-back overlap runs once (first instant), hourly wall-time rules run at each real
instant.

Three rule forms, each a JSON-ready dict (the shape the API takes):

* ``{"cron": "m h dom mon dow", "timezone": "America/New_York"}`` -- five standard cron
  fields evaluated in local wall time (POSIX semantics; ``L`` in day-of-month is the
  last day of the month).
* ``{"calendar": {"frequency": ..., ...}, "timezone": "..."}`` -- daily, weekly, monthly
  or yearly calendar rules with one or more local times of day.
* ``{"interval": {"minutes": N} | {"hours": N}, "anchor": "2027-01-01T00:00:00Z"}`` --
  a fixed step in absolute time, aligned to the anchor (optional ``"timezone"`` is for
  display of the local date only).

Every instant returned is an aware UTC ``datetime`` (``tzinfo=datetime.timezone.utc``).

DST policy for the wall-time forms (cron and calendar), using ``zoneinfo``:

* Spring-forward gap: a wall time that does not exist is shifted forward by the length
  of the gap (02:30 -> 03:30 when clocks jump 02:00 -> 03:00; 02:15 -> 02:45 for the
  30-minute gap of Australia/Lord_Howe). The occurrence keeps its intended local date and
  time and is marked ``shifted``. If the shifted instant is also another occurrence of
  the same schedule, the two are one (the unshifted one is kept).
* Fall-back overlap: a fixed local time that exists twice runs once, at the earlier
  instant (fold=0). A rule that fires in every hour of the day (cron hour field covering
  0-23, or calendar times covering every hour) runs at each real instant, so an hourly
  rule has 25 occurrences on the long day and 23 on the short one.
* A schedule never has two occurrences at the same instant and occurrences come out
  strictly increasing.

Candidates are generated as local dates and wall times and each is resolved to an
instant; the next occurrence is never computed by adding 24 hours or 30 days.
"""

from __future__ import annotations

import calendar as _calendar
import heapq
import json
import re
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from itertools import islice
from typing import Annotated, Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from timekeeper.schedules.zones import is_canonical_zone

__all__ = [
    "CalendarRule",
    "CronRule",
    "IntervalRule",
    "InvalidRecurrence",
    "Occurrence",
    "Recurrence",
    "next_occurrences",
    "parse_rule",
    "parse_rule_text",
    "rule_json_schema",
]

UTC = timezone.utc
_ONE_DAY = timedelta(days=1)
_WEEKDAY_CODES = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")  # index = date.weekday()
_DEFAULT_START = date(2000, 1, 1)
_FIRST_SAFE_DATE = date(1, 1, 3)  # earlier local dates cannot be converted to UTC in every zone
_AVG_MONTH = timedelta(days=365.2425 / 12)
_AVG_YEAR = timedelta(days=365.2425)
_MAX_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MIN_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: A rule must have an occurrence within this span of the instant it is saved or resumed.
FIRE_HORIZON = timedelta(days=3653)
#: Backlog counts of wall-time rules cover at most this span (longer ones are lower bounds).
COUNT_HORIZON = timedelta(days=3653)
#: The largest calendar ``interval`` (in its frequency's units) a rule may have.
MAX_CALENDAR_INTERVAL = 100_000
_MONTH_NAMES = ("", "January", "February", "March", "April", "May", "June", "July",
                "August", "September", "October", "November", "December")

# Shared per-minute-of-day objects: a rule's times reference these, so compiling is cheap.
_TIMES = tuple(time(m // 60, m % 60) for m in range(1440))
_DELTAS = tuple(timedelta(minutes=m) for m in range(1440))


# --------------------------------------------------------------------------- public types


class InvalidRecurrence(ValueError):
    """A rule that cannot be compiled.

    ``field`` is the dotted path of the offending input (``"timezone"``, ``"cron"``,
    ``"calendar.times[0]"``, ``"interval.minutes"``, or ``"rule"`` for the rule as a
    whole); ``reason`` says what is wrong. ``str(error)`` is ``"field: reason"``.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class Occurrence(NamedTuple):
    """One occurrence of a schedule (a slotted, immutable tuple).

    * ``at`` -- the real instant, aware UTC (``tzinfo=datetime.timezone.utc``).
    * ``local_date`` -- the intended local date in the rule's timezone (the UTC date for
      interval rules without a timezone).
    * ``local_time`` -- the intended local wall time, before any gap shift (naive).
    * ``shifted`` -- True when a spring-forward gap moved the occurrence later; ``at`` is
      then the intended wall time plus the length of the gap.
    """

    at: datetime
    local_date: date
    local_time: time
    shifted: bool


class Recurrence(ABC):
    """A compiled, immutable rule (build it with :func:`parse_rule`).

    Attributes:
        key: canonical JSON of the normalised rule (defaults filled, lists sorted);
            equal rules have equal keys, so it is usable as a cache key.
        timezone: the IANA zone of a wall-time rule; ``"UTC"`` (or the display zone) for
            an interval rule.
        warnings: human-readable notes about surprising but valid rules (a cron day of
            month that skips short months).
        nominal_period: the average spacing between occurrences (a daily rule with one
            time: one day times the interval; ``0 * * * *``: one hour). An estimate
            only: neither occurrences nor staleness bounds (which use the real gap
            to the next occurrence) are computed from it.

    Rule: the gap and overlap policy of the module docstring.
    """

    __slots__ = ("_normalised", "_key", "timezone", "warnings", "nominal_period")

    _normalised: dict[str, Any]
    timezone: str | None
    warnings: tuple[str, ...]
    nominal_period: timedelta

    @property
    def key(self) -> str:
        """Canonical JSON of the normalised rule (built on first use: a claim never needs it)."""
        try:
            return self._key
        except AttributeError:
            self._key = _canonical(self._normalised)
            return self._key

    @property
    def rule(self) -> dict[str, Any]:
        """The normalised rule as a fresh JSON-ready dict (``json.loads(self.key)``)."""
        return json.loads(self.key)

    def occurrences_after(self, after: datetime) -> Iterator[Occurrence]:
        """Lazily yield the occurrences strictly after the instant ``after``.

        ``after`` must be aware (any zone); naive datetimes raise ``ValueError``.
        Occurrences come out strictly increasing in ``at`` (aware UTC).
        """
        return self._iter(_as_utc(after))

    def next_after(self, after: datetime) -> Occurrence | None:
        """The first occurrence strictly after the aware instant ``after``, or None if
        the rule has no more occurrences. Naive ``after`` raises ``ValueError``."""
        return next(self._iter(_as_utc(after)), None)

    def latest_at_or_before(self, instant: datetime, not_before: datetime | None = None) -> Occurrence | None:
        """The latest occurrence whose ``at`` is at or before the aware ``instant``, or None.

        ``not_before`` (aware, optional) bounds the search: an occurrence earlier than it
        is never returned (None instead), so the cost follows the candidate dates between
        the two instants, never the occurrences in between. Naive instants raise
        ``ValueError``.
        """
        lower = _as_utc(not_before) if not_before is not None else None
        return self._latest(_as_utc(instant), lower)

    def count_between(self, first: datetime, last: datetime) -> tuple[int, bool]:
        """Count the occurrences with ``first <= at <= last`` (aware instants).

        Returns ``(count, exact)``. Interval rules count arithmetically; wall-time rules
        count whole local days at once (a day without a UTC offset change holds each of
        the rule's wall times once; a day with one is resolved only around the change),
        so the cost follows the number of candidate dates, not occurrences. A range longer
        than :data:`COUNT_HORIZON` is counted over its last ``COUNT_HORIZON`` only and
        ``exact`` is False: the count is then a lower bound.
        """
        first, last = _as_utc(first), _as_utc(last)
        if last < first:
            return 0, True
        return self._count(first, last)

    def check_fires(self, now: datetime, horizon: timedelta | None = None) -> Occurrence:
        """The first occurrence after the aware ``now``, which must come within ``horizon``
        (default :data:`FIRE_HORIZON`, ten years).

        Rule: a rule with no occurrence within the horizon never runs for practical
        purposes and is refused. Raises :class:`InvalidRecurrence` naming the field that
        pushes the rule out of reach (``calendar.start_date``, ``calendar.interval``,
        ``cron``, ...).
        """
        now = _as_utc(now)
        horizon = FIRE_HORIZON if horizon is None else horizon
        nxt = self._next_within(now, _plus(now, horizon))
        if nxt is None:
            years = round(horizon / _AVG_YEAR)
            raise InvalidRecurrence(self._never_fires_field(now, horizon),
                                    f"the rule has no occurrence in the next {years} years")
        return nxt

    def _next_within(self, now: datetime, until: datetime) -> Occurrence | None:
        nxt = next(self._iter(now), None)
        return nxt if nxt is not None and nxt.at <= until else None

    def _never_fires_field(self, now: datetime, horizon: timedelta) -> str:
        """The field to name when the rule has no occurrence within ``horizon`` of ``now``."""
        return "rule"

    @abstractmethod
    def _iter(self, after: datetime) -> Iterator[Occurrence]:
        """Yield the occurrences strictly after ``after`` (aware UTC), increasing."""

    @abstractmethod
    def _latest(self, instant: datetime, lower: datetime | None) -> Occurrence | None:
        """The latest occurrence at or before ``instant`` and not before ``lower`` (aware UTC)."""

    @abstractmethod
    def _count(self, first: datetime, last: datetime) -> tuple[int, bool]:
        """``(count, exact)`` of the occurrences in ``[first, last]`` (aware UTC, ordered)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recurrence) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


def _plus(instant: datetime, span: timedelta) -> datetime:
    """``instant + span``, saturating at the last representable instant."""
    try:
        return instant + span
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _as_utc(after: datetime) -> datetime:
    if not isinstance(after, datetime):
        raise TypeError(f"after must be a datetime, not {type(after).__name__}")
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("after must be an aware datetime (a real instant), got a naive one")
    return after.astimezone(UTC)


# ------------------------------------------------------------------ wall-time evaluation


class _WallTimeRecurrence(Recurrence):
    """Shared evaluation of cron and calendar rules: candidate local dates from the
    subclass, a fixed sorted list of wall times per date, each resolved to an instant."""

    __slots__ = ("_zone", "_times", "_deltas", "_minutes", "_minute_set", "_frequent")

    def _init_wall(self, zone_name: str, minutes: frozenset[int]) -> None:
        self.timezone = zone_name
        self._zone = ZoneInfo(zone_name)
        # minutes since local midnight (sorted), their times and offsets, shared by equal sets
        self._minutes, self._minute_set, self._times, self._deltas, self._frequent = _wall_tables(minutes)

    @abstractmethod
    def _dates_from(self, start: date) -> Iterator[date]:
        """Yield the candidate local dates from ``start`` on, increasing."""

    @abstractmethod
    def _dates_before(self, end: date, stop: date) -> Iterator[date]:
        """Yield the candidate local dates in ``[stop, end]``, decreasing."""

    def _local_date(self, instant: datetime) -> date:
        try:
            return instant.astimezone(self._zone).date()
        except OverflowError:  # within a day of datetime.min / datetime.max
            return instant.date()

    def _day_parts(self, d: date) -> tuple[list[tuple[datetime, int, int]], list[Occurrence]]:
        """The occurrences of local date ``d``, by the gap and overlap rules, in two parts.

        ``runs``: ``(base, lo, hi)`` triples, each standing for the unshifted instants
        ``base + deltas[i]`` for ``lo <= i < hi`` (one run for a day with one UTC offset,
        two around an offset change); ``extra``: the occurrences of the wall times inside
        the change's gap or repeated span, resolved one by one, without a shifted one that
        coincides with another occurrence (the unshifted one is kept). Together they are
        the date's occurrences exactly as :meth:`occurrences_after` yields them, at a cost
        independent of how many wall times the rule has (bisection, not a scan).
        """
        s0, s1 = self._midnight_offsets(d)
        e0, e1 = self._midnight_offsets(d + _ONE_DAY)
        midnight = datetime(d.year, d.month, d.day, tzinfo=UTC)
        n = len(self._deltas)
        if s0 == s1 == e0 == e1:
            return [(midnight - s0, 0, n)], []
        before, after = s0, e1
        if before == after or (s0 != s1 and e0 != e1):
            # Two offset changes in one local day: resolve every wall time.
            return [], [o for o in _sorted_unique(self._resolve_day(d)) if not (o.shifted and self._collides(o, d))]
        # One change: wall times before its span resolve with the old offset, after it with
        # the new one; within it (fold 0 and 1 disagree) each is resolved by the policy.
        i0 = self._first_index(d, 0, lambda off0, off1: off1 != before)
        i1 = self._first_index(d, i0, lambda off0, off1: off0 != before)
        window = [o for o in self._resolve_day(d, i0, i1) if not (o.shifted and self._collides(o, d))]
        return [(midnight - before, 0, i0), (midnight - after, i1, n)], window

    def _first_index(self, d: date, lo: int, past: Callable[[timedelta, timedelta], bool]) -> int:
        """The first index ``i >= lo`` of the rule's wall times on ``d`` for which
        ``past(offset fold 0, offset fold 1)`` holds (monotone in ``i``), by bisection."""
        offset = self._zone.utcoffset
        minutes = self._minutes
        hi = len(minutes)
        y, mo, dd = d.year, d.month, d.day
        while lo < hi:
            mid = (lo + hi) // 2
            h, mi = divmod(minutes[mid], 60)
            if past(offset(datetime(y, mo, dd, h, mi)), offset(datetime(y, mo, dd, h, mi, fold=1))):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _collides(self, occ: Occurrence, d: date) -> bool:
        """True when the shifted ``occ`` of date ``d`` lands on another occurrence's wall
        time (the same day's, or the next candidate date's when the gap spans midnight)."""
        local = occ.at.astimezone(self._zone)
        if local.second or local.hour * 60 + local.minute not in self._minute_set:
            return False
        landed = local.date()
        return landed == d or (landed == d + _ONE_DAY and next(self._dates_from(landed), None) == landed)

    def _latest(self, instant: datetime, lower: datetime | None) -> Occurrence | None:
        deltas, times = self._deltas, self._times
        stop = _FIRST_SAFE_DATE if lower is None else max(self._local_date(lower) - _ONE_DAY, _FIRST_SAFE_DATE)
        end = min(self._local_date(instant) + _ONE_DAY, date(9999, 12, 30))
        best: Occurrence | None = None
        found_on: date | None = None
        try:
            for d in self._dates_before(end, stop):
                # A gap carries occurrences at most into the next day: one more date suffices.
                if found_on is not None and d < found_on - _ONE_DAY:
                    break
                runs, extra = self._day_parts(d)
                for base, lo, hi in runs:
                    i = bisect_right(deltas, instant - base, lo, hi)
                    if i > lo:
                        at = base + deltas[i - 1]
                        if best is None or at > best.at or (at == best.at and best.shifted):
                            best = Occurrence(at, d, times[i - 1], False)
                for occ in extra:
                    if occ.at <= instant and (best is None or occ.at > best.at
                                              or (occ.at == best.at and best.shifted and not occ.shifted)):
                        best = occ
                if best is not None and found_on is None:
                    found_on = d
        except OverflowError:
            pass  # the first years of the calendar
        if best is None or (lower is not None and best.at < lower):
            return None
        return best

    def _midnight_offsets(self, d: date) -> tuple[timedelta, timedelta]:
        """The UTC offsets of local midnight starting ``d`` (fold 0, fold 1)."""
        y, mo, dd = d.year, d.month, d.day
        offset = self._zone.utcoffset  # of a naive wall time, by its fold: cheaper than an aware one
        return offset(datetime(y, mo, dd)), offset(datetime(y, mo, dd, fold=1))

    def _clean_through(self, d: date, end: date) -> tuple[date, timedelta] | None:
        """``(last, offset)`` when the local dates ``d..last`` (``last <= end``) all have
        the single UTC offset ``offset``, None when ``d`` has an offset change.

        Probes every second midnight: no two changes of any tzdata zone lie within 48
        hours of each other, so equal offsets at midnights two days apart mean no change
        between them."""
        s0, s1 = self._midnight_offsets(d)
        e0, e1 = self._midnight_offsets(d + _ONE_DAY)
        if not s0 == s1 == e0 == e1:
            return None
        last = d
        two_days = 2 * _ONE_DAY
        while last < end:
            x0, x1 = self._midnight_offsets(last + 3 * _ONE_DAY)
            if not x0 == x1 == s0:
                break
            last += two_days
        return min(last, end), s0

    def _whole_day_count(self, d: date) -> int:
        """How many occurrences local date ``d`` has, without resolving them: every wall
        time once, plus the repeated span's times again for a wall-time frequent rule,
        minus the gap's times whose shifted instant is another occurrence."""
        n = len(self._minutes)
        s0, s1 = self._midnight_offsets(d)
        e0, e1 = self._midnight_offsets(d + _ONE_DAY)
        if s0 == s1 == e0 == e1:
            return n
        before, after = s0, e1
        if before == after or (s0 != s1 and e0 != e1) or (after - before) % _DELTAS[1]:
            runs, extra = self._day_parts(d)  # two changes, or one of a fraction of a minute
            return sum(hi - lo for _, lo, hi in runs) + len(extra)
        i0 = self._first_index(d, 0, lambda off0, off1: off1 != before)
        i1 = self._first_index(d, i0, lambda off0, off1: off0 != before)
        if after < before:
            return n + (i1 - i0 if self._frequent else 0)
        gap = (after - before) // _DELTAS[1]
        minute_set = self._minute_set
        collisions = 0
        next_is_candidate = None
        for minute in self._minutes[i0:i1]:
            landed = minute + gap
            if landed < 1440:
                collisions += landed in minute_set
            elif landed - 1440 in minute_set:
                if next_is_candidate is None:
                    following = d + _ONE_DAY
                    next_is_candidate = next(self._dates_from(following), None) == following
                collisions += next_is_candidate
        return n - collisions

    def _count(self, first: datetime, last: datetime) -> tuple[int, bool]:
        deltas = self._deltas
        n = len(deltas)
        start = self._local_date(first) - _ONE_DAY  # a gap can carry the day before into range
        end = self._local_date(last)
        exact = True
        if end - start > COUNT_HORIZON:
            start = end - COUNT_HORIZON
            exact = False
        inner_from = start + 2 * _ONE_DAY  # dates after the first's (and its eve) lie wholly after it
        count = 0
        try:
            d = self._next_date(max(start, _FIRST_SAFE_DATE))
            while d is not None and d <= end:
                if inner_from <= d < end:  # whole days inside the range
                    span = self._clean_through(d, end - _ONE_DAY)
                    if span is None:
                        count += self._whole_day_count(d)
                        d = self._next_date(d + _ONE_DAY)
                    else:
                        count += n * self._count_dates(d, span[0])
                        d = self._next_date(span[0] + _ONE_DAY)
                    continue
                runs, extra = self._day_parts(d)  # an edge day: only part of it may be in range
                for base, lo, hi in runs:
                    if hi > lo:
                        count += max(0, bisect_right(deltas, last - base, lo, hi)
                                     - bisect_left(deltas, first - base, lo, hi))
                count += sum(1 for occ in extra if first <= occ.at <= last)
                d = self._next_date(d + _ONE_DAY)
        except OverflowError:
            pass  # ran past year 9999
        return count, exact

    def _next_date(self, start: date) -> date | None:
        """The first candidate date on or after ``start``, or None."""
        return next(self._dates_from(start), None)

    def _count_dates(self, first: date, last: date) -> int:
        """How many candidate dates lie in ``[first, last]`` (subclasses count faster)."""
        count = 0
        for d in self._dates_from(first):
            if d > last:
                break
            count += 1
        return count

    def _iter(self, after: datetime) -> Iterator[Occurrence]:
        zone = self._zone
        deltas = self._deltas
        times = self._times
        last_delta = deltas[-1]
        try:
            start = after.astimezone(zone).date() - _ONE_DAY  # a gap can carry a day past `after`
        except OverflowError:  # within a day or two of datetime.min / datetime.max
            start = date.min if after.year == 1 else after.date() - 2 * _ONE_DAY
        start = max(start, _FIRST_SAFE_DATE)
        buffer: list[Occurrence] = []  # resolved, sorted, not yet safe to release
        e = e0 = e1 = None  # the previous date's next midnight and its offsets (fold 0, 1)
        try:
            for d in self._dates_from(start):
                y, mo, dd = d.year, d.month, d.day
                if d == e:  # consecutive dates: this midnight was the previous next midnight
                    s0, s1 = e0, e1
                else:
                    s0, s1 = self._midnight_offsets(d)
                e = d + _ONE_DAY
                e0, e1 = self._midnight_offsets(e)
                if not buffer and s0 == s1 == e0 == e1:
                    # Fast path: one UTC offset for the whole local day (no two transitions
                    # of any tzdata zone lie within 48 hours of each other), so every wall
                    # time exists once and at = wall time - offset.
                    base = datetime(y, mo, dd, tzinfo=UTC) - s0
                    if base + last_delta <= after:
                        continue
                    for i in range(bisect_right(deltas, after - base), len(deltas)):
                        yield Occurrence(base + deltas[i], d, times[i], False)
                    continue
                # Slow path: a transition touches this day, or an earlier day's shifted
                # occurrences are still pending. Take the day's occurrences after `after`
                # (only the times around a change are resolved one by one), merge, dedupe.
                runs, extra = self._day_parts(d)
                sources: list[Iterable[Occurrence]] = [buffer, sorted(o for o in extra if o.at > after)]
                for base, lo, hi in runs:
                    sources.append(self._run(base, d, bisect_right(deltas, after - base, lo, hi), hi))
                # Nothing from a later date can be earlier than this instant.
                bound = datetime(e.year, e.month, e.day, tzinfo=UTC) - max(e0, e1)
                buffer = []
                last_at = None
                merged = heapq.merge(*sources, key=_by_instant_unshifted_first)
                for occ in merged:
                    if occ.at == last_at:
                        continue  # one occurrence per instant: the unshifted one came first
                    if occ.at >= bound:
                        buffer = _sorted_unique([occ, *merged])
                        break
                    last_at = occ.at
                    yield occ
        except OverflowError:
            pass  # ran past year 9999
        for occ in buffer:
            if occ.at > after:
                yield occ

    def _run(self, base: datetime, d: date, lo: int, hi: int) -> Iterator[Occurrence]:
        """Lazily the unshifted occurrences ``base + deltas[i]`` of date ``d``, ``lo <= i < hi``."""
        deltas, times = self._deltas, self._times
        for i in range(lo, hi):
            yield Occurrence(base + deltas[i], d, times[i], False)

    def _resolve_day(self, d: date, lo: int = 0, hi: int | None = None) -> list[Occurrence]:
        """Resolve the wall times ``lo:hi`` (all by default) of local date ``d`` to
        instants by the gap and overlap rules."""
        zone = self._zone
        frequent = self._frequent
        y, mo, dd = d.year, d.month, d.day
        out: list[Occurrence] = []
        for minute, t in zip(self._minutes[lo:hi], self._times[lo:hi], strict=True):
            h, mi = divmod(minute, 60)
            wall = datetime(y, mo, dd, h, mi, tzinfo=zone)
            off0 = wall.utcoffset()
            off1 = wall.replace(fold=1).utcoffset()
            naive_utc = datetime(y, mo, dd, h, mi, tzinfo=UTC)
            if off0 == off1:
                out.append(Occurrence(naive_utc - off0, d, t, False))
            elif off0 < off1:
                # Gap: the offset before the transition applies, which moves the wall
                # time forward by exactly the gap length (off1 - off0).
                out.append(Occurrence(naive_utc - off0, d, t, True))
            else:
                # Overlap: the earlier instant; the later one too for wall-frequent rules.
                out.append(Occurrence(naive_utc - off0, d, t, False))
                if frequent:
                    out.append(Occurrence(naive_utc - off1, d, t, False))
        return out


def _by_instant_unshifted_first(occurrence: Occurrence) -> tuple[datetime, bool]:
    return occurrence.at, occurrence.shifted


@lru_cache(maxsize=1024)
def _wall_tables(minutes: frozenset[int]) -> tuple[tuple[int, ...], frozenset[int], tuple[time, ...],
                                                   tuple[timedelta, ...], bool]:
    """The sorted minutes of a set of local times of day, the set, their ``time`` and
    ``timedelta`` objects, and whether they are "wall-time frequent" (some time in every
    hour of the day, so a repeated hour runs twice). Cached: rules with the same times
    share one copy (an every-minute rule holds 1,440 of each)."""
    ordered = tuple(sorted(minutes))
    return (ordered, minutes, tuple(_TIMES[m] for m in ordered), tuple(_DELTAS[m] for m in ordered),
            len({m // 60 for m in ordered}) == 24)


def _sorted_unique(items: list[Occurrence]) -> list[Occurrence]:
    """Sort by instant; of several at one instant keep one, preferring an unshifted one."""
    items.sort(key=_by_instant_unshifted_first)
    out: list[Occurrence] = []
    for occ in items:
        if out and out[-1].at == occ.at:
            continue
        out.append(occ)
    return out


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


@lru_cache(maxsize=4096)
def _parse_cron_field(text: str, index: int) -> tuple[frozenset[int], bool]:
    """Parse one cron field into its set of values and whether ``L`` (last day) was given."""
    name, low, high, _ = _CRON_FIELDS[index]
    values: set[int] = set()
    last = False
    for part in text.split(","):
        if not part:
            raise InvalidRecurrence("cron", f"{name} field: empty list item in {text!r}")
        if part.upper() == "L":
            if index != 2:
                raise InvalidRecurrence("cron", f"{name} field: 'L' is only allowed in day-of-month")
            last = True
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
    return frozenset(values), last


@lru_cache(maxsize=8192)
def _cron_days(dom: frozenset[int], dow: frozenset[int], last: bool, both: bool, first_weekday: int,
               ndays: int) -> tuple[int, ...]:
    """The days a cron day-of-month / day-of-week pair selects in a month that starts on
    ``first_weekday`` (Monday = 0) and has ``ndays`` days: both must match when ``both``
    (one field is unrestricted), either otherwise. Cached: there are 28 month shapes."""
    found = []
    for day in range(1, ndays + 1):
        dom_ok = day in dom or (last and day == ndays)
        dow_ok = (first_weekday + day) % 7 in dow  # cron: Sunday = 0
        if (dom_ok and dow_ok) if both else (dom_ok or dow_ok):
            found.append(day)
    return tuple(found)


@lru_cache(maxsize=1024)
def _minute_product(hours: frozenset[int], minutes: frozenset[int]) -> frozenset[int]:
    """The minutes of the day a cron hour and minute field select."""
    return frozenset(h * 60 + m for h in hours for m in minutes)


class _CronRecurrence(_WallTimeRecurrence):
    __slots__ = ("_months", "_dom", "_dom_last", "_dow", "_and", "_month_cache")

    def __init__(self, expression: str, zone_name: str) -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise InvalidRecurrence(
                "cron", f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
        minutes, _ = _parse_cron_field(fields[0], 0)
        hours, _ = _parse_cron_field(fields[1], 1)
        dom, dom_last = _parse_cron_field(fields[2], 2)
        months, _ = _parse_cron_field(fields[3], 3)
        dow, _ = _parse_cron_field(fields[4], 4)
        # Vixie/POSIX: a field starting with '*' is unrestricted. If both day fields are
        # restricted a day matches when EITHER matches; otherwise both must match.
        dom_star = fields[2].startswith("*")
        dow_star = fields[4].startswith("*")
        self._months = months
        self._dom = dom
        self._dom_last = dom_last
        self._dow = dow
        self._and = dom_star or dow_star
        self._month_cache: dict[int, tuple[int, ...]] = {}
        if self._and and not dom_star and not dom_last:
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
        self._init_wall(zone_name, _minute_product(hours, minutes))
        self._normalised = {"cron": " ".join(f.upper() for f in fields), "timezone": zone_name}
        self.nominal_period = self._estimate_period()

    def _never_fires_field(self, now: datetime, horizon: timedelta) -> str:
        return "cron"

    def _estimate_period(self) -> timedelta:
        p_dom = min(1.0, (len(self._dom) + self._dom_last) / 30.436875)
        p_dow = len(self._dow) / 7
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
            days = _cron_days(self._dom, self._dow, self._dom_last, self._and, first_weekday, ndays)
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


# --------------------------------------------------------------------------- calendar


class _CalendarRecurrence(_WallTimeRecurrence):
    __slots__ = ("_frequency", "_interval", "_start", "_weekdays", "_month_day", "_nth", "_month")

    def __init__(self, cal: _CalendarModel, zone_name: str) -> None:
        freq = cal.frequency
        allowed = {
            "daily": set(),
            "weekly": {"weekdays"},
            "monthly": {"month_day", "nth_weekday"},
            "yearly": {"month_day", "nth_weekday", "month"},
        }[freq]
        for name in ("weekdays", "month_day", "nth_weekday", "month"):
            if getattr(cal, name) is not None and name not in allowed:
                raise InvalidRecurrence(f"calendar.{name}", f"not allowed for frequency {freq!r}")
        if cal.month_day is not None and cal.nth_weekday is not None:
            raise InvalidRecurrence("calendar.nth_weekday", "give either month_day or nth_weekday, not both")
        if freq in ("monthly", "yearly") and cal.month_day is None and cal.nth_weekday is None:
            raise InvalidRecurrence("calendar.month_day", f"a {freq} rule needs month_day or nth_weekday")
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
        weekdays = cal.weekdays or [_WEEKDAY_CODES[self._start.weekday()]]
        self._weekdays = tuple(sorted({_WEEKDAY_CODES.index(w) for w in weekdays}))
        self._month_day = cal.month_day
        self._nth = (cal.nth_weekday[0], _WEEKDAY_CODES.index(cal.nth_weekday[1])) if cal.nth_weekday else None
        self._month = cal.month
        if not self._ever_fires():
            raise InvalidRecurrence(
                "calendar.nth_weekday",
                f"never occurs: no month this rule selects has a 5th {_WEEKDAY_CODES[self._nth[1]]}")
        self.warnings = ()
        minutes = [t.hour * 60 + t.minute for t in cal.times]
        self._init_wall(zone_name, frozenset(minutes))

        canonical: dict[str, Any] = {
            "frequency": freq,
            "interval": self._interval,
            "start_date": self._start.isoformat(),
            "times": [t.strftime("%H:%M") for t in self._times],
        }
        if freq == "weekly":
            canonical["weekdays"] = [_WEEKDAY_CODES[w] for w in self._weekdays]
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

    def _day_in_month(self, y: int, m: int) -> int | None:
        """The rule's day in month (y, m): clamped month_day, last day, or Nth weekday."""
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
        return "calendar.nth_weekday" if self._nth is not None else "calendar"


# --------------------------------------------------------------------------- interval


class _IntervalRecurrence(Recurrence):
    __slots__ = ("_anchor", "_step", "_zone")

    def __init__(self, step_model: _IntervalModel, anchor_text: str, zone_name: str | None) -> None:
        if (step_model.minutes is None) == (step_model.hours is None):
            raise InvalidRecurrence("interval", 'give exactly one of "minutes" or "hours"')
        try:
            anchor = datetime.fromisoformat(anchor_text)
        except ValueError:
            raise InvalidRecurrence("anchor", "must be an ISO 8601 instant, e.g. 2027-01-01T09:00:00Z") from None
        if anchor.tzinfo is None or anchor.utcoffset() is None:
            raise InvalidRecurrence("anchor", "must include a UTC offset or Z")
        self._anchor = anchor.astimezone(UTC)
        if step_model.minutes is not None:
            self._step = timedelta(minutes=step_model.minutes)
            step_json = {"minutes": step_model.minutes}
        else:
            self._step = timedelta(hours=step_model.hours)
            step_json = {"hours": step_model.hours}
        self._zone = ZoneInfo(zone_name) if zone_name is not None else None
        self.timezone = zone_name or "UTC"
        self.warnings = ()
        self.nominal_period = self._step
        rule: dict[str, Any] = {"interval": step_json,
                                "anchor": self._anchor.isoformat().replace("+00:00", "Z")}
        if zone_name is not None:
            rule["timezone"] = zone_name
        self._normalised = rule

    def _occurrence(self, at: datetime) -> Occurrence:
        if self._zone is None:
            return Occurrence(at, at.date(), at.time(), False)
        local = at.astimezone(self._zone)
        return Occurrence(at, local.date(), local.time(), False)

    def _iter(self, after: datetime) -> Iterator[Occurrence]:
        step = self._step
        k = (after - self._anchor) // step + 1  # floor division: the first k with at > after
        try:
            at = self._anchor + k * step
            while True:
                yield self._occurrence(at)
                at += step
        except OverflowError:
            return

    def _latest(self, instant: datetime, lower: datetime | None) -> Occurrence | None:
        try:
            at = self._anchor + (instant - self._anchor) // self._step * self._step
            occurrence = self._occurrence(at)
        except OverflowError:
            return None
        return None if lower is not None and at < lower else occurrence

    def _count(self, first: datetime, last: datetime) -> tuple[int, bool]:
        # Steps k with first <= anchor + k * step <= last: floor(last) - ceil(first) + 1.
        high = (last - self._anchor) // self._step
        low = -((self._anchor - first) // self._step)
        return max(high - low + 1, 0), True


# ------------------------------------------------------------------------- validation

_WeekdayCode = Literal["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
_HHMM = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _parse_hhmm(value: str) -> time:
    match = _HHMM.fullmatch(value)
    if match is None:
        raise ValueError("must be a 24-hour time 'HH:MM' (00:00-23:59)")
    return _TIMES[int(match[1]) * 60 + int(match[2])]


def _parse_date(value: str) -> date:
    try:
        if _ISO_DATE.fullmatch(value) is None:
            raise ValueError
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError("must be a date 'YYYY-MM-DD'") from None


_WEEKDAY_SCHEMA = {"type": "string", "enum": list(_WEEKDAY_CODES)}
_ZONE_SCHEMA = {"type": "string", "minLength": 1, "description": "an IANA timezone",
                "examples": ["America/New_York", "Europe/London", "Asia/Kolkata"]}
#: A timezone field: its name is checked against the IANA database by :func:`_check_zone`.
_Zone = Annotated[StrictStr, WithJsonSchema(_ZONE_SCHEMA)]


class _CalendarModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, title="Calendar")

    frequency: Literal["daily", "weekly", "monthly", "yearly"]
    interval: StrictInt = Field(1, ge=1, le=MAX_CALENDAR_INTERVAL,
                                description="every Nth day, week, month or year from start_date")
    start_date: Annotated[StrictStr, AfterValidator(_parse_date),
                          WithJsonSchema({"type": "string", "format": "date"})] | None = Field(
        None, description="the first local date the rule may select (default 2000-01-01)")
    weekdays: list[_WeekdayCode] | None = Field(None, min_length=1,
                                                description="weekly: the days (default: start_date's)")
    month_day: Annotated[Any, WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": 31},
                                                        {"type": "string", "const": "last"}]})] = Field(
        None, description="monthly/yearly: the day (clamped to shorter months) or last")
    nth_weekday: Annotated[Any, WithJsonSchema({
        "type": "array", "minItems": 2, "maxItems": 2,
        "prefixItems": [{"type": "integer", "enum": [1, 2, 3, 4, 5, -1]}, _WEEKDAY_SCHEMA]})] = Field(
        None, description="monthly/yearly: [n, weekday], n = -1 for the last")
    month: StrictInt | None = Field(None, ge=1, le=12, description="yearly: the month")
    times: list[Annotated[StrictStr, AfterValidator(_parse_hhmm),
                          WithJsonSchema({"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"})]] = Field(
        min_length=1, description="local times of day, HH:MM")

    @field_validator("month_day", mode="plain")
    @classmethod
    def _check_month_day(cls, value: Any) -> int | str | None:
        if value is None or value == "last":
            return value
        if type(value) is int and 1 <= value <= 31:
            return value
        raise ValueError('must be an integer 1-31 or "last"')

    @field_validator("nth_weekday", mode="plain")
    @classmethod
    def _check_nth_weekday(cls, value: Any) -> tuple[int, str] | None:
        if value is None:
            return None
        if (isinstance(value, list | tuple) and len(value) == 2 and type(value[0]) is int
                and value[0] in (1, 2, 3, 4, 5, -1) and value[1] in _WEEKDAY_CODES):
            return (value[0], value[1])
        raise ValueError('must be [n, "MO".."SU"] with n in 1..5 or -1 (last)')


class _IntervalModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, title="Interval",
                              json_schema_extra={"oneOf": [{"required": ["minutes"]}, {"required": ["hours"]}]})

    minutes: StrictInt | None = Field(None, ge=1, le=366 * 24 * 60)
    hours: StrictInt | None = Field(None, ge=1, le=366 * 24)


class _RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # The union of the three forms' fields (CronRule, CalendarRule, IntervalRule): one
    # pass reports unknown keys and wrong types; _compile then checks the form.
    cron: StrictStr | None = None
    calendar: _CalendarModel | None = None
    interval: _IntervalModel | None = None
    anchor: StrictStr | None = None
    timezone: StrictStr | None = None


class CronRule(BaseModel):
    """A cron rule: five POSIX cron fields evaluated in the local wall time of the zone."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="CronRule")

    cron: StrictStr = Field(description="five cron fields: minute hour day-of-month month day-of-week "
                                        "(L = last day of the month)", examples=["30 2 * * *", "0 18 L * *"])
    timezone: _Zone


class CalendarRule(BaseModel):
    """A calendar rule: daily, weekly, monthly or yearly local times of day in the zone."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="CalendarRule")

    calendar: _CalendarModel
    timezone: _Zone


class IntervalRule(BaseModel):
    """An interval rule: a fixed step of minutes or hours in absolute time, aligned to the
    anchor instant; the zone, if given, only names the local date shown with each run."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="IntervalRule")

    interval: _IntervalModel
    anchor: StrictStr = Field(description="an instant the steps align to",
                              json_schema_extra={"format": "date-time"})
    timezone: _Zone | None = Field(None, description="an IANA timezone, for the local date shown with each run")


RULE_DESCRIPTION = (
    "A recurrence rule, one of three forms: "
    '{"cron": "m h dom mon dow", "timezone": IANA zone} (POSIX cron in local wall time, L = last day); '
    '{"calendar": {"frequency": "daily|weekly|monthly|yearly", "interval", "start_date", "weekdays", '
    '"month_day": 1-31 | "last", "nth_weekday": [n, "MO"], "month", "times": ["HH:MM", ...]}, '
    '"timezone": IANA zone}; {"interval": {"minutes": N} | {"hours": N}, "anchor": RFC 3339 instant} '
    "(absolute time). A local time in a spring-forward gap runs shifted by the gap and keeps its date; "
    "a fixed time in a fall-back overlap runs once. A rule must have an occurrence within ten years."
)
RULE_EXAMPLES = [
    {"cron": "30 2 * * *", "timezone": "America/New_York"},
    {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]}, "timezone": "Asia/Kolkata"},
    {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z"},
]


def rule_json_schema() -> dict[str, Any]:
    """The JSON schema of a rule: ``oneOf`` :class:`CronRule`, :class:`CalendarRule`,
    :class:`IntervalRule`, generated from the models the rule is validated with, made
    self-contained (no ``$ref``) and without ``null`` (a field is left out instead).
    The schema describes; :func:`parse_rule` decides (an unknown zone, a cron that never
    matches or a rule that never fires within ten years pass the schema but not the parse)."""
    forms = []
    for model in (CronRule, CalendarRule, IntervalRule):
        schema = model.model_json_schema()
        forms.append(_documented(schema, schema.pop("$defs", {})))
    return {"oneOf": forms, "description": RULE_DESCRIPTION, "examples": RULE_EXAMPLES}


def _documented(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with ``$ref``s to ``defs`` inlined, ``null`` alternatives and ``null``
    defaults dropped, and field titles (pydantic's, not the models') removed."""
    if isinstance(node, list):
        return [_documented(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _documented({**defs[node["$ref"].rsplit("/", 1)[-1]], **extra}, defs)
    branches = node.get("anyOf")
    if branches is not None and {"type": "null"} in branches and len(branches) == 2:
        (kept,) = [b for b in branches if b != {"type": "null"}]
        node = {**kept, **{k: v for k, v in node.items() if k != "anyOf"}}
    out = {}
    for key, value in node.items():
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {name: {k: v for k, v in _documented(prop, defs).items() if k != "title"}
                        for name, prop in value.items()}
        else:
            out[key] = _documented(value, defs)
    return out


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "rule"


def _translate(error: ValidationError) -> InvalidRecurrence:
    first = error.errors(include_url=False)[0]
    reason = first["msg"]
    if first["type"] == "extra_forbidden":
        reason = "unknown field"
    elif first["type"] == "missing":
        reason = "required"
    elif first["type"] in ("model_type", "model_attributes_type", "dict_type"):
        reason = "must be a JSON object"
    elif reason.startswith("Value error, "):
        reason = reason[len("Value error, "):]
    return InvalidRecurrence(_dotted(first["loc"]), reason)


def _check_zone(name: str) -> str:
    if not is_canonical_zone(name):  # the one zone rule: timekeeper.schedules.zones
        raise InvalidRecurrence("timezone", f"unknown IANA timezone {name!r}")
    return name


def _canonical(rule: dict[str, Any]) -> str:
    return json.dumps(rule, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _compile(rule: Any) -> Recurrence:
    if not isinstance(rule, dict):
        raise InvalidRecurrence("rule", "must be a JSON object")
    try:
        model = _RuleModel.model_validate(rule)
    except ValidationError as error:
        raise _translate(error) from None
    forms = [name for name in ("cron", "calendar", "interval") if getattr(model, name) is not None]
    if len(forms) != 1:
        given = " and ".join(forms) if forms else "none"
        raise InvalidRecurrence("rule", f'exactly one of "cron", "calendar" or "interval" is required (got {given})')
    if forms[0] == "interval":
        if model.anchor is None:
            raise InvalidRecurrence("anchor", "required for an interval rule")
        zone = _check_zone(model.timezone) if model.timezone is not None else None
        return _IntervalRecurrence(model.interval, model.anchor, zone)
    if model.anchor is not None:
        raise InvalidRecurrence("anchor", "only allowed with an interval rule")
    if model.timezone is None:
        raise InvalidRecurrence("timezone", f"required for a {forms[0]} rule")
    zone = _check_zone(model.timezone)
    if model.cron is not None:
        return _CronRecurrence(model.cron, zone)
    return _CalendarRecurrence(model.calendar, zone)


@lru_cache(maxsize=4096)
def _compile_cached(raw: str) -> Recurrence:
    return _compile(json.loads(raw))


# ------------------------------------------------------------------------- public API


def parse_rule(rule: dict[str, Any]) -> Recurrence:
    """Validate and compile a rule dict (one of the three forms) into a :class:`Recurrence`.

    Compiled rules are immutable and cached by the rule's JSON text, so calling this for
    every evaluation is cheap. Raises :class:`InvalidRecurrence` (a ``ValueError``) naming
    the offending field for any invalid input: unknown keys, wrong types, unknown
    timezone, interval < 1, month_day outside 1-31, bad weekday codes, empty or malformed
    times, both or neither rule forms, cron syntax errors, a cron that never matches.
    """
    try:
        raw = json.dumps(rule, sort_keys=True)
    except (TypeError, ValueError):
        return _compile(rule)  # not JSON-ready: compile uncached (it will explain why)
    return _compile_cached(raw)


def parse_rule_text(text: str) -> Recurrence:
    """Compile a rule stored as JSON text (e.g. a ``jsonb`` column read as text), decoding
    it once; compiled rules are cached by the text. Raises :class:`InvalidRecurrence`
    naming the field for an invalid rule or text that is not JSON (``"rule"``)."""
    try:
        return _compile_cached(text)
    except (json.JSONDecodeError, RecursionError):
        raise InvalidRecurrence("rule", "is not valid JSON") from None


def next_occurrences(rule: dict[str, Any], after: datetime, count: int) -> list[Occurrence]:
    """The next ``count`` occurrences of ``rule`` strictly after the instant ``after``.

    ``rule`` is the JSON-ready dict the API takes; ``after`` must be aware (naive raises
    ``ValueError``); the result is strictly increasing in ``Occurrence.at`` (aware UTC)
    and shorter than ``count`` only if the rule runs out (past year 9999). Raises
    :class:`InvalidRecurrence` for an invalid rule and ``ValueError`` for a negative count.
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    return list(islice(parse_rule(rule).occurrences_after(after), count))
