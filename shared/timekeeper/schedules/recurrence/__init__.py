"""Recurrence rules: validation and occurrence iteration in wall time and absolute time.

Implements the time policy of schedules: rules are evaluated in the schedule's IANA zone,
a time in a spring-forward gap shifts by the gap and keeps its local date, a fixed time
in a fall-back overlap runs once (first instant), hourly wall-time rules run at each real
instant.

Four rule forms, each a JSON-ready dict (the shape the API takes):

* ``{"cron": "m h dom mon dow", "timezone": "America/New_York"}`` -- five standard cron
  fields evaluated in local wall time (POSIX semantics; ``L`` in day-of-month is the
  last day of the month).
* ``{"calendar": {"frequency": ..., ...}, "timezone": "..."}`` -- daily, weekly, monthly
  or yearly calendar rules with one or more local times of day.
* ``{"interval": {"minutes": N} | {"hours": N}, "anchor": "2027-01-01T00:00:00Z"}`` --
  a fixed step in absolute time, aligned to the anchor (optional ``"timezone"`` is for
  display of the local date only).
* ``{"rrule": "FREQ=...;...", "timezone": "...", "start": "YYYY-MM-DD", "exdate": [...]}``
  -- an RFC 5545 recurrence rule from the local date ``start``, in local wall time.

Every instant returned is an aware UTC ``datetime`` (``tzinfo=datetime.timezone.utc``).

DST policy for the wall-time forms (cron, calendar and rrule), using ``zoneinfo``:

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
* These are the defaults: a wall-time rule's ``"dst": {"gap": "shift"|"end"|"skip",
  "overlap": "first"|"second"|"both"}`` runs a gap time at the gap's end or skips it (the
  occurrence is yielded with ``skipped`` set, at the shifted instant, for the dispatcher
  to record), and a fixed time of an overlap at its second instant or at both.

Candidates are generated as local dates and wall times and each is resolved to an
instant; the next occurrence is never computed by adding 24 hours or 30 days.

The package holds a module per job: ``base`` (the :class:`Recurrence` interface, the
:class:`Occurrence` and :class:`InvalidRecurrence` types, shared constants), ``walltime``
(the wall-time resolver the cron and calendar forms share), ``cron``, ``calendars`` and
``interval`` (the three rule engines; ``rrule`` the fourth), ``business`` (business weeks
and public holiday calendars for business-day calendar rules), ``describe`` (a rule in
English words), ``schema`` (the pydantic models a rule is validated
with and its JSON schema) and ``parse`` (validate, compile and cache). Import the public
names from ``timekeeper.schedules.recurrence`` itself.
"""


from timekeeper.schedules.recurrence.base import (
    COUNT_HORIZON,
    FIRE_HORIZON,
    MAX_CALENDAR_INTERVAL,
    InvalidRecurrence,
    Occurrence,
    Recurrence,
    given_instant,
)
from timekeeper.schedules.recurrence.describe import describe_rule
from timekeeper.schedules.recurrence.parse import COMPILED_RULES_KEPT, next_occurrences, parse_rule, parse_rule_text
from timekeeper.schedules.recurrence.parse import _compile_cached as _compile_cached  # the cache benchmarks clear
from timekeeper.schedules.recurrence.schema import (
    RULE_DESCRIPTION,
    RULE_EXAMPLES,
    CalendarRule,
    CronRule,
    IntervalRule,
    RRuleRule,
    rule_json_schema,
)

__all__ = [
    "COMPILED_RULES_KEPT",
    "COUNT_HORIZON",
    "FIRE_HORIZON",
    "MAX_CALENDAR_INTERVAL",
    "RULE_DESCRIPTION",
    "RULE_EXAMPLES",
    "CalendarRule",
    "CronRule",
    "IntervalRule",
    "InvalidRecurrence",
    "Occurrence",
    "RRuleRule",
    "Recurrence",
    "describe_rule",
    "given_instant",
    "next_occurrences",
    "parse_rule",
    "parse_rule_text",
    "rule_json_schema",
]
