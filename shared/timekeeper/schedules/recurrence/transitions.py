"""A zone's UTC offset changes (DST transitions): when they happen and which wall times they
skip or repeat. The rule's words (the gap's end) and the preview's change days read them;
what a rule does on those days stays the rule's own (its occurrences)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

#: How far apart two offset changes of a zone at least are (tzdata has none closer).
_STEP = timedelta(hours=6)


@dataclass(frozen=True)
class OffsetChange:
    """One change of a zone's UTC offset: ``at`` the instant (aware UTC, to the second),
    ``before`` and ``after`` the offsets, ``day`` the local date of the wall times it skips
    or repeats. ``gap`` when the clock springs forward (``after > before``: the
    wall times ``[wall_from, wall_to)`` do not exist that day), else an overlap (the wall
    times ``[wall_from, wall_to)`` happen twice). Wall times are naive local datetimes."""

    at: datetime
    before: timedelta
    after: timedelta
    day: date
    wall_from: datetime
    wall_to: datetime

    @property
    def gap(self) -> bool:
        """Whether the clock springs forward (a gap) rather than falls back (an overlap)."""
        return self.after > self.before


def offset_changes(zone_name: str, start: datetime, until: datetime) -> list[OffsetChange]:
    """The offset changes of the IANA zone ``zone_name`` in ``(start, until]`` (aware
    instants), oldest first, found by stepping six hours and bisecting to the second.
    Raises ``ZoneInfoNotFoundError`` for an unknown zone."""
    zone = ZoneInfo(zone_name)
    out: list[OffsetChange] = []
    at = start
    offset = at.astimezone(zone).utcoffset()
    while at < until:
        following = min(at + _STEP, until)
        new = following.astimezone(zone).utcoffset()
        if new != offset:
            lo, hi = at, following
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == new:
                    hi = mid
                else:
                    lo = mid
            hi = hi.replace(microsecond=0)
            wall_before = (hi + offset).replace(tzinfo=None)
            wall_after = (hi + new).replace(tzinfo=None)
            out.append(OffsetChange(at=hi, before=offset, after=new, day=min(wall_before, wall_after).date(),
                                    wall_from=min(wall_before, wall_after), wall_to=max(wall_before, wall_after)))
        at, offset = following, new
    return out
