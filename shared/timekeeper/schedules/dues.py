"""Due computation of the dispatcher: what a claimed schedule owes at the pass's ``now``
(the latest due occurrence, the skipped backlog, the next occurrence), and the cache of
compiled rules and due computations one pass shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cached_property

from timekeeper.schedules.closures import with_closures
from timekeeper.schedules.recurrence import InvalidRecurrence, Occurrence, Recurrence, given_instant, parse_rule_text

_ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Due:
    """What a claimed schedule owes: the latest due occurrence (or None), the count of older
    skipped ones, the first skipped instant, and the next future occurrence (or None).
    ``skipped_is_lower_bound`` is True when the backlog was too long to count exactly
    (``skipped`` is then a lower bound)."""

    latest: Occurrence | None
    skipped: int
    first_skipped_at: datetime | None
    next_occurrence: Occurrence | None
    skipped_is_lower_bound: bool = False
    #: A windowed rule's given instants (aware UTC) of ``latest`` and ``next_occurrence``;
    #: None without a window (each is then due at its occurrence).
    latest_given: datetime | None = None
    next_given: datetime | None = None

    @property
    def next_due_at(self) -> datetime | None:
        """Where the schedule's timing advances: the next occurrence's given instant (its
        occurrence without a window), or None when the rule has no more occurrences."""
        if self.next_given is not None:
            return self.next_given
        return self.next_occurrence.at if self.next_occurrence is not None else None

    @cached_property
    def occurrence_key(self) -> str:
        """The latest occurrence's run key: its UTC instant in ISO 8601 (computed once per
        due computation, which schedules sharing a rule and a due instant share)."""
        return self.latest.at.isoformat()

    @cached_property
    def occurrence_local(self) -> datetime:
        """The latest occurrence's naive wall time in the rule's zone."""
        return datetime.combine(self.latest.local_date, self.latest.local_time)


#: A backlog of at most this many occurrences is walked; a longer one is searched and counted.
_WALK_LIMIT = 64


def compute_due(rule: Recurrence, next_due_at: datetime, now: datetime) -> Due:
    """Collapse the occurrences in ``[next_due_at, now]`` (aware UTC) to the latest one and a count.

    Misfire policy: the backlog after an outage is one run for the latest due occurrence
    plus a count of the older ones skipped, never a run each. The cost does not grow with
    the backlog: up to ``_WALK_LIMIT`` occurrences are walked (the usual case: on time or
    a few behind); past that the latest occurrence is searched backwards from ``now`` and
    the skipped ones are counted arithmetically (interval rules) or by whole local days
    (wall-time rules), a backlog longer than ``COUNT_HORIZON`` getting a lower-bound count.
    """
    first: Occurrence | None = None
    latest: Occurrence | None = None
    count = 0
    occurrences = rule.occurrences_after(next_due_at - _ONE_MICROSECOND)
    for occurrence in occurrences:
        if occurrence.at > now:
            skipped = max(count - 1, 0)
            return Due(latest, skipped, first.at if skipped else None, occurrence)
        if count == _WALK_LIMIT:
            break
        first = first or occurrence
        latest = occurrence
        count += 1
    else:  # the rule ran out (past year 9999)
        skipped = max(count - 1, 0)
        return Due(latest, skipped, first.at if skipped else None, None)
    latest = rule.latest_at_or_before(now, first.at)
    counted, exact = rule.count_between(first.at, latest.at)
    return Due(latest, max(counted - 1, 1), first.at, rule.next_after(now), not exact)


def compute_windowed_due(rule: Recurrence, schedule_id: object, next_due_at: datetime, now: datetime) -> Due:
    """:func:`compute_due` of a rule with a flexible window, for one schedule: an occurrence
    is due at its given instant (:func:`given_instant`), so the latest due occurrence is the
    latest whose given instant is at or before ``now`` and the owed ones are those whose
    given instant is at or after ``next_due_at`` (the schedule's timing: a given instant
    after a pass advanced it, an occurrence itself after a save, resume or recompute).
    Keys, backlog counts and staleness bounds stay the occurrences'. A schedule whose first
    owed occurrence's given instant is still ahead gets no ``latest`` and a ``next_given``
    to wait for. The same walk limit and arithmetic count as :func:`compute_due`."""
    window = rule.window
    occurrences = rule.occurrences_after(next_due_at - window - _ONE_MICROSECOND)
    first: Occurrence | None = None
    latest: Occurrence | None = None
    latest_given = None
    count = 0
    occurrence = next(occurrences, None)
    while occurrence is not None:
        following = next(occurrences, None)
        given = given_instant(schedule_id, occurrence.at, window, following.at if following else None)
        if given >= next_due_at:
            if given > now:
                skipped = max(count - 1, 0)
                return Due(latest, skipped, first.at if skipped else None, occurrence, latest_given=latest_given,
                           next_given=given)
            if count == _WALK_LIMIT:
                break
            first = first or occurrence
            latest, latest_given = occurrence, given
            count += 1
        occurrence = following
    else:  # the rule ran out (past year 9999)
        skipped = max(count - 1, 0)
        return Due(latest, skipped, first.at if skipped else None, None, latest_given=latest_given)
    latest = rule.latest_at_or_before(now, first.at)
    upcoming = rule.next_after(latest.at)
    latest_given = given_instant(schedule_id, latest.at, window, upcoming.at if upcoming else None)
    if latest_given > now:  # the latest occurrence's instant is still ahead: the one before it is owed
        upcoming, upcoming_given = latest, latest_given
        latest = rule.latest_at_or_before(latest.at - _ONE_MICROSECOND, first.at)
        latest_given = given_instant(schedule_id, latest.at, window, upcoming.at)
    else:
        after = upcoming and rule.next_after(upcoming.at)
        upcoming_given = upcoming and given_instant(schedule_id, upcoming.at, window, after.at if after else None)
    counted, exact = rule.count_between(first.at, latest.at)
    return Due(latest, max(counted - 1, 1), first.at, upcoming, not exact, latest_given=latest_given,
               next_given=upcoming_given)


class RuleCache:
    """Compiled rules and due computations shared by the schedules of one pass.

    A rule text is parsed once per pass; schedules that share a rule and a due instant
    share the computation (thousands of "daily at 09:00 New York" schedules cost one).
    Both maps are bounded (oldest entries dropped first) so memory follows the batch,
    not the number of distinct rules a long pass meets.
    """

    MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self.rules: dict[str, Recurrence | InvalidRecurrence] = {}
        self.dues: dict[tuple[str, datetime], Due] = {}

    @classmethod
    def _bound(cls, cache: dict) -> None:
        while len(cache) > cls.MAX_ENTRIES:
            del cache[next(iter(cache))]

    def rule(self, text: str) -> Recurrence:
        """The compiled rule of the stored JSON ``text`` (decoded once per pass and text); a
        business-day rule's text carries its workspace's closed dates after a newline
        (``<json>\n2027-01-04,2027-12-24``, the claim's ``rule_text``), evaluated as
        non-business days. Raises :class:`InvalidRecurrence` (cached too) for a rule that
        no longer validates."""
        compiled = self.rules.get(text)
        if compiled is None:
            try:
                rule_json, _, closed = text.partition("\n")
                compiled = with_closures(parse_rule_text(rule_json),
                                         [date.fromisoformat(d) for d in closed.split(",") if d])
            except InvalidRecurrence as error:
                compiled = error
            self.rules[text] = compiled
            self._bound(self.rules)
        if isinstance(compiled, InvalidRecurrence):
            raise compiled
        return compiled

    def due(self, text: str, next_due_at: datetime, now: datetime, schedule_id: object = None) -> Due:
        """:func:`compute_due` of the rule ``text``, shared by schedules with the same
        rule and due instant; a rule with a flexible window is computed for ``schedule_id``
        alone (:func:`compute_windowed_due`, never cached: its instants are the schedule's).
        Raises :class:`InvalidRecurrence` like :meth:`rule`."""
        key = (text, next_due_at)
        due = self.dues.get(key)
        if due is None:
            rule = self.rule(text)
            if rule.window is not None:
                return compute_windowed_due(rule, schedule_id, next_due_at, now)
            due = self.dues[key] = compute_due(rule, next_due_at, now)
            self._bound(self.dues)
        return due
