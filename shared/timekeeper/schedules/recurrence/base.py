"""The public types of recurrence rules: the rule interface, an occurrence, the refusal; shared constants."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, timezone
from typing import Any, NamedTuple

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
#: What a wall-time rule does with a time in a spring-forward gap (the first is the default).
DST_GAP_CHOICES = ("shift", "end", "skip")
#: What a wall-time rule does with a fixed time in a fall-back overlap (the first is the default).
DST_OVERLAP_CHOICES = ("first", "second", "both")
DEFAULT_DST = ("shift", "first")
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
      then the intended wall time plus the length of the gap (gap choice ``shift`` or
      ``skip``) or the gap's end (``end``).
    * ``skipped`` -- True for a time in a spring-forward gap of a rule whose gap choice is
      ``skip``: the occurrence does not run; the dispatcher records it as a skipped run
      (outcome ``skipped_dst_gap``) at ``at``, the instant it would have run shifted.
    """

    at: datetime
    local_date: date
    local_time: time
    shifted: bool
    skipped: bool = False


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
        """The normalised rule as a fresh JSON-ready dict (a business-day rule evaluated with
        a workspace's closures has the rule's form; its ``key`` also names the closures)."""
        return json.loads(_canonical(self._normalised))

    @property
    def window(self) -> timedelta | None:
        """The rule's flexible window (``window_minutes``), or None: each run is then due at
        :func:`given_instant` instead of its occurrence."""
        minutes = self._normalised.get("window_minutes")
        return None if minutes is None else timedelta(minutes=minutes)

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


def given_instant(schedule_id: object, at: datetime, window: timedelta, next_at: datetime | None) -> datetime:
    """The instant a windowed schedule's occurrence at ``at`` (aware UTC) is due: ``at`` plus a
    whole number of seconds in ``[0, span)``, ``span`` the ``window`` or, when shorter, the
    time to the next occurrence ``next_at`` (so given instants keep the occurrences' order
    and one never reaches the next occurrence).

    Stable: the offset is a keyed hash (BLAKE2b) of the schedule id's text and the
    occurrence's ISO 8601 instant, so every dispatcher, re-claim and restart gives the same
    instant, and schedules sharing a rule get different ones (spread evenly over the span).
    """
    span = window if next_at is None else min(window, next_at - at)
    seconds = int(span.total_seconds())
    if seconds <= 1:
        return at
    digest = hashlib.blake2b(f"{schedule_id}|{at.isoformat()}".encode(), digest_size=8).digest()
    return at + timedelta(seconds=int.from_bytes(digest) % seconds)


def _canonical(rule: dict[str, Any]) -> str:
    return json.dumps(rule, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


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
