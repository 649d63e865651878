"""The wall-time resolver shared by the cron, calendar and rrule forms: local dates and wall
times resolved to instants in the schedule's zone by its DST choice (by default gaps shift
and overlaps run once, at the first instant), backlog counts."""

from __future__ import annotations

import heapq
from abc import abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from timekeeper.schedules.recurrence.base import (
    _DELTAS,
    _FIRST_SAFE_DATE,
    _ONE_DAY,
    _TIMES,
    COUNT_HORIZON,
    DEFAULT_DST,
    UTC,
    Occurrence,
    Recurrence,
)

# ------------------------------------------------------------------ wall-time evaluation


class _WallTimeRecurrence(Recurrence):
    """Shared evaluation of cron and calendar rules: candidate local dates from the
    subclass, a fixed sorted list of wall times per date, each resolved to an instant."""

    __slots__ = ("_zone", "_times", "_deltas", "_minutes", "_minute_set", "_frequent", "_gap", "_overlap")

    def _init_wall(self, zone_name: str, minutes: frozenset[int], dst: tuple[str, str] | None = None) -> None:
        """Set the zone, the wall times (minutes since local midnight) and the DST choice
        ``(gap, overlap)`` (``DEFAULT_DST`` when None)."""
        self.timezone = zone_name
        self._zone = ZoneInfo(zone_name)
        self._gap, self._overlap = dst or DEFAULT_DST
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
        if self._gap == "end":
            window = _sorted_unique(window)  # the gap's times all run at its end: once
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
        if (before == after or (s0 != s1 and e0 != e1) or (after - before) % _DELTAS[1]
                or (self._gap == "end" and after > before)):
            runs, extra = self._day_parts(d)  # two changes, or one of a fraction of a minute
            return sum(hi - lo for _, lo, hi in runs) + len(extra)
        i0 = self._first_index(d, 0, lambda off0, off1: off1 != before)
        i1 = self._first_index(d, i0, lambda off0, off1: off0 != before)
        if after < before:
            return n + (i1 - i0 if self._frequent or self._overlap == "both" else 0)
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
        instants by the gap and overlap rules and the rule's DST choice."""
        zone = self._zone
        frequent = self._frequent
        gap, overlap = self._gap, self._overlap
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
                # time forward by exactly the gap length (off1 - off0); "end" runs at the
                # transition itself; "skip" marks the shifted instant as skipped.
                if gap == "end":
                    out.append(Occurrence(self._gap_end(naive_utc - off1, naive_utc - off0), d, t, True))
                else:
                    out.append(Occurrence(naive_utc - off0, d, t, True, gap == "skip"))
            elif frequent or overlap == "both":
                # Overlap: both real instants for wall-frequent rules and the choice "both".
                out.append(Occurrence(naive_utc - off0, d, t, False))
                out.append(Occurrence(naive_utc - off1, d, t, False))
            else:
                # Overlap, a fixed time: the earlier instant, or the later one by choice.
                out.append(Occurrence(naive_utc - (off1 if overlap == "second" else off0), d, t, False))
        return out


    def _gap_end(self, before: datetime, after: datetime) -> datetime:
        """The spring-forward transition instant ``t`` with ``before < t <= after`` (aware
        UTC; ``after`` already has the new offset): the first instant after the gap, found
        by bisection on whole seconds (at most 17 steps for a gap of a day)."""
        zone = self._zone
        target = after.astimezone(zone).utcoffset()
        lo, hi = 0, int((after - before).total_seconds())
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (before + timedelta(seconds=mid)).astimezone(zone).utcoffset() == target:
                hi = mid
            else:
                lo = mid
        return before + timedelta(seconds=hi)


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
