"""The interval form: every N minutes or hours from an anchor instant (absolute time)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from timekeeper.schedules.recurrence.base import UTC, InvalidRecurrence, Occurrence, Recurrence

# --------------------------------------------------------------------------- interval

if TYPE_CHECKING:
    from timekeeper.schedules.recurrence.schema import _IntervalModel


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
        try:
            self._anchor = anchor.astimezone(UTC)
        except OverflowError:  # e.g. 9999-12-31T23:00:00-01:00 is past the last representable instant
            raise InvalidRecurrence("anchor", "must be an instant between years 1 and 9999 in UTC") from None
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
