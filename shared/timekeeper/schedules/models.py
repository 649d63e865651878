"""The schedules module's rows as frozen dataclasses, as its owner actions return them.

Instants are aware UTC datetimes (``timestamptz``); a local wall time is a naive
``datetime`` in the schedule's timezone (``timestamp``); recurrence rules and details
are the JSON columns' dicts. Column names match the fields, so a row is built with
:func:`timekeeper.db.rows.from_row` (or ``fetch_one`` / ``fetch_all``) from a dict row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any
from uuid import UUID


@dataclass(frozen=True, slots=True)
class Schedule:
    """A ``schedules`` row: ``owner``'s ``work_kind`` in ``workspace_id`` on ``recurrence``.

    * ``recurrence`` -- the rule as stored (the JSON form :func:`~timekeeper.schedules.recurrence.parse_rule`
      reads); ``timezone`` -- the IANA zone it is evaluated in (``"UTC"`` when the rule names none).
    * ``status`` -- ``active`` | ``paused`` | ``disabled`` (deleted); ``pause_reason`` e.g.
      ``paused_by_owner``, ``consecutive_failures``, ``deleted``.
    * ``next_due_at`` -- the next due instant; None unless active.
    * ``consecutive_failures`` -- the current failure streak (>= 0); ``definition_version``
      -- 1, then + 1 per definition change.
    * ``last_run_id`` / ``last_outcome`` / ``last_run_at`` -- the latest settled run's summary.
    * ``created_by`` -- the acting user of the create; ``deleted_at`` -- set when deleted
      (owner reads never return deleted schedules).
    * ``notify_on`` -- which failures of its scheduled runs the owner is told of
      (:data:`NOTIFY_ON`): ``first_failure`` (a streak's first, the default),
      ``every_failure`` or ``pause_only``; the pause is always told.
    """

    id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    subject_id: UUID | None
    name: str
    recurrence: dict[str, Any]
    timezone: str
    status: str
    pause_reason: str | None
    next_due_at: datetime | None
    consecutive_failures: int
    last_run_id: UUID | None
    last_outcome: str | None
    last_run_at: datetime | None
    definition_version: int
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    notify_on: str = "first_failure"


#: The owner's choices of failure notices (``schedules.notify_on``), the default first.
NOTIFY_ON = ("first_failure", "every_failure", "pause_only")


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A schedule's state as a route of its own work kind shows it: ``status``
    (active / paused / disabled), ``pause_reason``, ``next_due_at`` (aware UTC, None while
    not active) and ``deleted_at`` (None unless deleted)."""

    status: str
    pause_reason: str | None
    next_due_at: datetime | None
    deleted_at: datetime | None


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """A run of a schedule as the owner's reads show it (a ``schedule_runs`` row's public columns).

    * ``trigger`` -- ``scheduled`` (one occurrence) | ``manual`` ("Run now");
      ``requested_by`` -- the acting user of a manual run.
    * ``occurrence_at`` -- the occurrence's instant (a manual run's request time);
      ``occurrence_local`` -- its intended local wall time (naive, the schedule's timezone);
      ``dst_shifted`` -- a spring-forward gap moved it later by the gap.
    * ``state`` -- ``queued`` | ``running`` | ``succeeded`` | ``skipped`` | ``failed``;
      ``attempts`` -- starts so far; ``offer_count`` -- times offered to the run queue.
    * ``queued_at`` / ``started_at`` / ``finished_at`` -- instants (None until reached).
    * ``outcome_code``, ``detail`` (the work kind's result, a dict) and ``error`` (the
      refusal or fault text) once settled.
    * ``skipped_backlog`` -- older due occurrences collapsed into this run (>= 0), the
      oldest at ``first_skipped_at``.
    * ``due_at`` -- the instant a flexible window gave the run (aware UTC; None: due at
      its occurrence).
    * ``retry_of`` -- the run an operator's Retry now retried to make this one (None: no retry).
    * ``published_at``, ``offered_at``, ``lease_until`` -- when its message was last accepted by
      the queue, last offered, and when the current attempt's lease ends (aware UTC; None
      until then, or where the read does not say): whether it is stuck
      (:func:`timekeeper.schedules.run_ops.stuck_why`).
    """

    id: UUID
    occurrence_at: datetime
    occurrence_local: datetime
    dst_shifted: bool
    trigger: str
    requested_by: str | None
    state: str
    attempts: int
    offer_count: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    outcome_code: str | None
    detail: dict[str, Any] | None
    error: str | None
    skipped_backlog: int
    first_skipped_at: datetime | None
    due_at: datetime | None = None
    retry_of: UUID | None = None
    published_at: datetime | None = None
    offered_at: datetime | None = None
    lease_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class ScheduleEvent:
    """An entry of a schedule's append-only history (a ``schedule_events`` row's public columns).

    ``id`` increases with time; ``kind`` e.g. ``created``, ``paused``, ``run_requested``,
    ``settled``; ``run_id`` names the run it concerns, if any; ``actor`` the acting user or
    component; ``reason`` and ``detail`` (a dict) depend on the kind; ``at`` the instant.
    """

    id: int
    run_id: UUID | None
    kind: str
    actor: str
    reason: str | None
    detail: dict[str, Any] | None
    at: datetime


@dataclass(frozen=True, slots=True)
class UpcomingOccurrence:
    """One upcoming occurrence of a rule: ``at`` the instant (aware UTC), ``local`` the
    same instant as a naive wall time in the rule's timezone, ``local_date`` and
    ``local_time`` the intended local date and wall time (kept when a gap shifts the
    time), ``shifted`` whether a spring-forward gap moved it later, ``repeated``
    whether its local time is in a fall-back overlap (the wall clock shows it twice) and
    ``skipped`` whether it is a gap time the rule's DST choice skips (recorded, not run).
    A rule with a flexible window adds ``window_end`` (aware UTC, exclusive: the run is due
    at an instant in ``[at, window_end)``) and, for a saved schedule, ``due_at`` (aware UTC:
    the instant its run is given in that window); both None without a window."""

    at: datetime
    local: datetime
    local_date: date
    shifted: bool
    local_time: time | None = None
    repeated: bool = False
    skipped: bool = False
    window_end: datetime | None = None
    due_at: datetime | None = None


@dataclass(frozen=True)
class ScheduleDetails:
    """A schedule, its recent runs and history events (newest first), its next occurrences
    (none when the saved rule no longer validates), the rule's warnings, and who last
    changed its definition (``changed_by``, the acting user of its create or latest
    ``updated`` event) and when (``changed_at``, aware UTC)."""

    schedule: Schedule
    runs: list[ScheduleRun]
    events: list[ScheduleEvent]
    next_occurrences: list[UpcomingOccurrence]
    warnings: tuple[str, ...]
    description: str | None = None
    changed_by: str | None = None
    changed_at: datetime | None = None


@dataclass(frozen=True)
class SchedulePage:
    """One page of a schedule listing: ``rows`` (oldest first) and ``next_after`` -- the
    ``(created_at, id)`` key to pass as ``after`` for the next page, or None on the last page."""

    rows: list[Schedule]
    next_after: tuple[datetime, UUID] | None
