"""A rule on its zone's DST change days: what the owner's DST choice makes of each.

The preview of a rule (saved or not) lists, besides the next occurrences, the zone's offset
changes within the coming year (the spring-forward and the fall-back day) with the rule's
occurrences that fall in the gap or the overlap, as the rule itself resolves them (shifted,
at the gap's end, skipped, first, second or both instants), or says the day does not
affect the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo

from timekeeper.schedules.models import UpcomingOccurrence
from timekeeper.schedules.recurrence import Recurrence, given_instant
from timekeeper.schedules.recurrence.transitions import OffsetChange, offset_changes
from timekeeper.schedules.service import occurrence_view

#: How far ahead the change days are looked for.
HORIZON = timedelta(days=366)
#: At most this many occurrences of one change day are listed (an every-minute rule has
#: sixty in a one-hour gap or overlap).
DAY_CAP = 130


@dataclass(frozen=True)
class ChangeDay:
    """One DST change day of the rule's zone: the ``change`` (its instant, offsets, local
    ``day`` and the wall times skipped or repeated), the rule's occurrences on that day whose
    wall time is in the gap or the overlap (``occurrences``, as :class:`UpcomingOccurrence`:
    ``shifted``/``skipped``/``repeated`` say what the rule's DST choice makes of each), and
    ``summary``: the day and what happens in words."""

    change: OffsetChange
    occurrences: list[UpcomingOccurrence]
    summary: str

    @property
    def affected(self) -> bool:
        """Whether any occurrence of the rule falls in the gap or the overlap."""
        return bool(self.occurrences)


def change_days(rule: Recurrence, now: datetime, schedule_id: UUID | None = None) -> list[ChangeDay]:
    """The compiled ``rule``'s zone's offset changes within a year after the aware ``now``,
    oldest first, each with the rule's occurrences in its gap or overlap (a windowed rule's
    with ``window_end`` and, with ``schedule_id``, the ``due_at`` the dispatcher gives them).
    Empty for a rule without a zone or a zone without changes. An interval rule runs at fixed
    instants, so no change day affects it."""
    if not rule.timezone:
        return []
    zone = ZoneInfo(rule.timezone)
    wall_rule = "interval" not in rule.rule
    out = []
    for change in offset_changes(rule.timezone, now, now + HORIZON):
        occurrences = _on_change(rule, zone, change, schedule_id) if wall_rule else []
        out.append(ChangeDay(change=change, occurrences=occurrences, summary=_summary(change, occurrences)))
    return out


def _on_change(rule: Recurrence, zone: ZoneInfo, change: OffsetChange,
               schedule_id: UUID | None) -> list[UpcomingOccurrence]:
    """The rule's occurrences on ``change.day`` whose intended wall time is in the gap or
    the overlap, resolved by the rule (its own DST choice)."""
    day_start = datetime(change.day.year, change.day.month, change.day.day).replace(tzinfo=zone)
    iterator = rule.occurrences_after(day_start - timedelta(hours=3))  # a midnight may not exist
    window = rule.window
    out: list[UpcomingOccurrence] = []
    occ = next(iterator, None)
    while occ is not None and occ.local_date <= change.day and len(out) < DAY_CAP:
        following = next(iterator, None)
        wall = datetime.combine(occ.local_date, occ.local_time)
        if occ.local_date == change.day and change.wall_from <= wall < change.wall_to:
            window_end = due_at = None
            if window is not None:
                following_at = following.at if following is not None else None
                window_end = occ.at + (window if following_at is None else min(window, following_at - occ.at))
                if schedule_id is not None:
                    due_at = given_instant(schedule_id, occ.at, window, following_at)
            out.append(occurrence_view(occ, zone, window_end=window_end, due_at=due_at))
        occ = following
    return out


def _clock(delta: timedelta) -> str:
    minutes = int(abs(delta).total_seconds()) // 60
    hours, rest = divmod(minutes, 60)
    return " ".join(part for part in (f"{hours} h" if hours else "", f"{rest} min" if rest else "") if part)


def _summary(change: OffsetChange, occurrences: list[UpcomingOccurrence]) -> str:
    """``"2027-03-14: the clock springs forward from 02:00 to 03:00 (1 h); 02:30 is skipped
    (recorded as a skipped run: the time does not exist that day)"``."""
    span = f"{change.wall_from:%H:%M} to {change.wall_to:%H:%M}"
    if change.gap:
        head = f"{change.day}: the clock springs forward from {span} ({_clock(change.after - change.before)})"
    else:
        head = f"{change.day}: the clock falls back, {span} happens twice ({_clock(change.after - change.before)})"
    if not occurrences:
        return f"{head}; no time of this rule falls in it: the change does not affect it"
    return f"{head}; " + "; ".join(_what(change, intended, runs) for intended, runs in _by_time(occurrences))


def _by_time(occurrences: list[UpcomingOccurrence]) -> list[tuple[str, list[UpcomingOccurrence]]]:
    grouped: dict[str, list[UpcomingOccurrence]] = {}
    for o in occurrences:
        grouped.setdefault(f"{(o.local_time or o.local.time()):%H:%M}", []).append(o)
    return list(grouped.items())


def _what(change: OffsetChange, intended: str, runs: list[UpcomingOccurrence]) -> str:
    if change.gap:
        (run,) = runs
        if run.skipped:
            return f"{intended} is skipped (the time does not exist that day; recorded as a skipped run)"
        if run.local.time() == change.wall_to.time():
            return f"{intended} runs at {run.local:%H:%M} (the gap's end)"
        return f"{intended} runs at {run.local:%H:%M} (shifted by the gap)"
    if len(runs) > 1:
        return f"{intended} runs at both instants ({', '.join(f'{r.at:%H:%M} UTC' for r in runs)})"
    first = runs[0].at < change.at
    return f"{intended} runs once, at its {'first' if first else 'second'} instant ({runs[0].at:%H:%M} UTC)"

