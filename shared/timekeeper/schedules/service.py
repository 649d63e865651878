"""Owner actions on schedules: create, update, pause, resume, delete, run now, read.

Every function takes an autocommit connection, the acting user, the workspace and ``now``
(aware UTC) and runs its own transaction; publishing happens after commit. Objects of
another workspace are :class:`ScheduleNotFound`, never a permission error, so existence
does not leak. Rows come back as the frozen dataclasses of :mod:`timekeeper.schedules.models`
(:class:`Schedule`, :class:`ScheduleDetails`, :class:`SchedulePage`), whatever the
connection's row factory.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.db.keyset import split_page
from timekeeper.db.rows import fetch_all, fetch_one, fetch_value
from timekeeper.schedules.closures import workspace_rule
from timekeeper.schedules.messages import RunMessage, RunPublisher
from timekeeper.schedules.models import (
    Schedule,
    ScheduleDetails,
    ScheduleEvent,
    SchedulePage,
    ScheduleRun,
    ScheduleState,
    UpcomingOccurrence,
)
from timekeeper.schedules.notifications import Notice, enqueue_notifications
from timekeeper.schedules.recurrence import (
    InvalidRecurrence,
    Occurrence,
    Recurrence,
    describe_rule,
    given_instant,
    parse_rule,
)
from timekeeper.schedules.runs import Event, publish_offers, record_events
from timekeeper.schedules.work import WorkKindRegistry

SQL = load_queries("timekeeper.schedules", "service.sql")

__all__ = [
    "Schedule", "ScheduleDetails", "ScheduleEvent", "ScheduleNotFound", "SchedulePage", "ScheduleRun",
    "ScheduleStateError", "UpcomingOccurrence", "OWNERLESS", "Ownerless", "OwnerlessSchedule", "list_ownerless",
    "pause_ownerless", "set_owner", "get_owner", "create_schedule", "delete_schedule", "get_details",
    "list_schedules", "pause_schedule", "preview_rule", "resume_schedule", "run_now", "update_schedule",
    "upcoming_occurrences", "ScheduleDeletion", "get_deletion",
]


class ScheduleNotFound(LookupError):
    """No live schedule with this id in this workspace."""


class ScheduleStateError(RuntimeError):
    """The action does not apply in the schedule's current status (e.g. resume an active one)."""


#: The pause reason of a schedule whose owner was deactivated or left the workspace.
OWNERLESS = "ownerless"


class Ownerless(ScheduleStateError):
    """The schedule is paused as ownerless: an admin reassigns it before anyone resumes it."""


def _event(conn: psycopg.Connection, schedule: Schedule, kind: str, actor: str, now: datetime, *,
           reason: str | None = None, detail: dict | None = None, run_id: UUID | None = None) -> None:
    record_events(conn, [Event(schedule.id, schedule.workspace_id, kind, reason, detail, run_id)],
                  actor=actor, now=now)


def _checked_rule(rule: dict[str, Any], now: datetime, conn: psycopg.Connection | None = None,
                  workspace_id: UUID | None = None) -> tuple[Recurrence, datetime]:
    """Compile ``rule`` and return it with its first occurrence after ``now`` (aware UTC);
    with ``conn`` and ``workspace_id``, a business-day rule counts the workspace's closures.

    Rule: a schedule's rule must validate and fire within the recurrence's horizon (ten
    years) of ``now``; one that never would is refused rather than saved without a next
    due instant. Raises :class:`InvalidRecurrence` naming the field.
    """
    compiled = parse_rule(rule)
    if conn is not None and workspace_id is not None:
        compiled = workspace_rule(conn, compiled, rule, workspace_id=workspace_id)
    return compiled, compiled.check_fires(now).at


def _schedule(conn: psycopg.Connection, query: str, params: dict[str, Any]) -> Schedule:
    """Run one of the schedule statements that return the written row, as a :class:`Schedule`
    (:class:`ScheduleNotFound` if none: callers lock the row first, so it always exists)."""
    row = fetch_one(conn, SQL[query], params, Schedule)
    if row is None:
        raise ScheduleNotFound(str(params["id"]))
    return row


def _locked(conn: psycopg.Connection, workspace_id: UUID, schedule_id: UUID) -> Schedule:
    row = fetch_one(conn, SQL["get_schedule_for_update"], {"id": schedule_id, "workspace_id": workspace_id},
                    Schedule)
    if row is None:
        raise ScheduleNotFound(str(schedule_id))
    return row


def _check_kind(conn: psycopg.Connection, kinds: WorkKindRegistry | None, *, workspace_id: UUID, owner: str,
                work_kind: str, subject_id: UUID | None, via_own_route: bool) -> None:
    """A work kind's input rules: unless ``via_own_route``, a kind with a route of its own
    is refused (:class:`~timekeeper.schedules.work.OwnRouteOnly`, naming ``work_kind``);
    the schedule's subject must be what the kind declared
    (:class:`~timekeeper.schedules.work.SubjectRequirement`; raises
    :class:`~timekeeper.schedules.work.InvalidSubject`). No check without ``kinds``."""
    kind = kinds.find(owner, work_kind) if kinds is not None else None
    if kind is not None:
        if not via_own_route:
            kind.check_generic()
        kind.check_subject(conn, workspace_id=workspace_id, subject_id=subject_id)


def _hidden_from_generic(kinds: WorkKindRegistry | None, schedule: Schedule) -> None:
    """The generic schedules actions do not see a schedule whose work kind has a route of
    its own (its access rule and settings live there): raises :class:`ScheduleNotFound`,
    as for a schedule of another workspace. No check without ``kinds``."""
    kind = kinds.find(schedule.owner, schedule.work_kind) if kinds is not None else None
    if kind is not None and kind.route is not None:
        raise ScheduleNotFound(str(schedule.id))


def own_route_kinds(kinds: WorkKindRegistry | None) -> list[str]:
    """``owner/work_kind`` of every kind with a route of its own (hidden from generic lists)."""
    return [f"{kind.owner}/{kind.name}" for kind in kinds.kinds() if kind.route] if kinds is not None else []


def _check_generic(kinds: WorkKindRegistry | None, schedule: Schedule) -> None:
    """Refuse a generic action on a schedule whose work kind has a route of its own
    (:class:`~timekeeper.schedules.work.OwnRouteOnly`); no check without ``kinds``."""
    kind = kinds.find(schedule.owner, schedule.work_kind) if kinds is not None else None
    if kind is not None:
        kind.check_generic()


def create_schedule(conn: psycopg.Connection, *, workspace_id: UUID, owner: str, work_kind: str,
                    recurrence: dict[str, Any], actor: str, now: datetime, subject_id: UUID | None = None,
                    name: str = "", active: bool = True, schedule_id: UUID | None = None,
                    kinds: WorkKindRegistry | None = None, via_own_route: bool = False,
                    notify_on: str = "first_failure") -> Schedule:
    """Create a schedule; its first due instant is the rule's first occurrence after ``now``;
    ``notify_on`` (one of :data:`~timekeeper.schedules.models.NOTIFY_ON`) says which
    failures its owner is told of.

    Returns the new :class:`Schedule`. Raises :class:`InvalidRecurrence` (a ``ValueError``) naming
    the field when the rule does not validate or has no occurrence within ten years, and,
    when ``kinds`` is given, ``InvalidSubject`` when the work kind's declared subject is
    missing or not in the workspace and ``OwnRouteOnly`` for a kind with a route of its
    own unless ``via_own_route`` (the caller is that route's module, writing the kind's
    settings in the same transaction).
    """
    rule, first_due = _checked_rule(recurrence, now, conn, workspace_id)
    with conn.transaction():
        _check_kind(conn, kinds, workspace_id=workspace_id, owner=owner, work_kind=work_kind,
                    subject_id=subject_id, via_own_route=via_own_route)
        row = _schedule(conn, "insert_schedule", {
            "id": schedule_id or uuid.uuid4(), "workspace_id": workspace_id, "owner": owner,
            "work_kind": work_kind, "subject_id": subject_id, "name": name, "recurrence": Jsonb(recurrence),
            "timezone": rule.timezone or "UTC", "status": "active" if active else "paused",
            "next_due_at": first_due if active else None, "actor": actor, "now": now, "notify_on": notify_on})
        _event(conn, row, "created", actor, now, detail={"warnings": list(rule.warnings)} if rule.warnings else None)
    return row


def update_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str,
                    now: datetime, recurrence: dict[str, Any] | None = None, name: str | None = None,
                    subject_id: UUID | None = None, kinds: WorkKindRegistry | None = None,
                    notify_on: str | None = None, record_changes: bool = True) -> Schedule:
    """Change the definition: bumps ``definition_version``; an edit that keeps the rule
    (name, subject) keeps ``next_due_at``, one that changes the rule recomputes it from
    ``now`` (no backlog) except that an owed occurrence whose flexible window is still open
    stays owed (:func:`_edited_due`); returns the updated :class:`Schedule`. The ``updated``
    history event names the changed fields (``changes``: ``{field: {"from", "to"}}``)
    unless ``record_changes`` is False (a caller that records its own changes event). ``notify_on`` (one of
    :data:`~timekeeper.schedules.models.NOTIFY_ON`) changes which failures the owner is told
    of; given alone it changes neither the version nor the timing. Raises
    :class:`ScheduleNotFound`, :class:`InvalidRecurrence` (also for a rule with no
    occurrence within ten years), and, when ``kinds`` is given, ``InvalidSubject`` when the
    resulting subject does not meet the work kind's declared requirement and
    ``OwnRouteOnly`` for a kind with a route of its own (its own module calls this without
    ``kinds``)."""
    with conn.transaction():
        current = _locked(conn, workspace_id, schedule_id)
        _check_kind(conn, kinds, workspace_id=workspace_id, owner=current.owner, work_kind=current.work_kind,
                    subject_id=current.subject_id if subject_id is None else subject_id, via_own_route=False)
        if notify_on is not None and notify_on != current.notify_on:
            before = current.notify_on
            current = _schedule(conn, "set_notify_on", {"id": schedule_id, "notify_on": notify_on, "now": now})
            _event(conn, current, "updated", actor, now, detail={
                "notify_on": notify_on, "changes": {"notify_on": {"from": before, "to": notify_on}}})
        if recurrence is None and name is None and subject_id is None:
            return current
        new_rule = recurrence if recurrence is not None else current.recurrence
        rule, first_due = _checked_rule(new_rule, now, conn, workspace_id)
        if new_rule == current.recurrence:  # the timing is unchanged: an owed occurrence stays owed
            next_due_at = current.next_due_at
        else:
            next_due_at = _edited_due(conn, current, rule, first_due, now)
        row = _schedule(conn, "update_definition", {
            "id": schedule_id, "recurrence": Jsonb(new_rule), "timezone": rule.timezone or "UTC",
            "name": current.name if name is None else name,
            "subject_id": current.subject_id if subject_id is None else subject_id,
            "next_due_at": next_due_at, "now": now})
        detail: dict[str, Any] = {"definition_version": row.definition_version}
        if record_changes:
            detail["changes"] = definition_changes(current, row)
        _event(conn, row, "updated", actor, now, detail=detail)
    return row


def _edited_due(conn: psycopg.Connection, current: Schedule, rule: Recurrence, first_due: datetime,
                now: datetime) -> datetime:
    """The ``next_due_at`` (aware UTC) of an active schedule whose timing an edit changes to
    the compiled ``rule``: ``first_due`` (the first occurrence after ``now``: no backlog on
    an edit), except that with a flexible window the latest occurrence at or before ``now``
    whose window is still open and which the schedule still owes (not before the
    occurrence its current ``next_due_at`` stands for) stays owed: the result is then that
    occurrence, and the next pass runs it at its given instant (at once if that instant
    has passed, the window still being open)."""
    window = rule.window
    if window is None or current.next_due_at is None:
        return first_due
    owed_from = current.next_due_at
    try:  # the occurrence the current timing stands for: its given instant is before the next occurrence
        old = workspace_rule(conn, parse_rule(current.recurrence), current.recurrence,
                             workspace_id=current.workspace_id)
        owed = old.latest_at_or_before(current.next_due_at)
        owed_from = owed.at if owed is not None else owed_from
    except InvalidRecurrence:
        pass
    latest = rule.latest_at_or_before(now, max(owed_from, now - window))
    if latest is None or latest.at + min(window, first_due - latest.at) <= now:
        return first_due
    return latest.at


def definition_changes(before: Schedule, after: Schedule) -> dict[str, dict[str, Any]]:
    """What an update changed, for the history and the audit log: ``{field: {"from", "to"}}``
    for each of ``name``, ``subject_id`` (as text), ``recurrence`` and ``timezone`` whose
    value differs."""
    out: dict[str, dict[str, Any]] = {}
    for field in ("name", "subject_id", "recurrence", "timezone"):
        old, new = getattr(before, field), getattr(after, field)
        if old != new:
            out[field] = {"from": str(old) if isinstance(old, UUID) else old,
                          "to": str(new) if isinstance(new, UUID) else new}
    return out


def pause_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str, now: datetime,
                   reason: str = "paused_by_owner", kinds: WorkKindRegistry | None = None) -> Schedule:
    """Pause an active schedule (idempotent for an already paused one); returns it paused.
    Raises :class:`ScheduleNotFound` (also, when ``kinds`` is given, for a schedule whose
    work kind has a route of its own: the generic actions do not see it)."""
    with conn.transaction():
        current = _locked(conn, workspace_id, schedule_id)
        _hidden_from_generic(kinds, current)
        if current.status == "paused":
            return current
        row = _schedule(conn, "set_status", {"id": schedule_id, "status": "paused", "pause_reason": reason,
                                             "next_due_at": None, "reset_streak": False, "deleted_at": None,
                                             "now": now})
        _event(conn, row, "paused", actor, now, reason=reason)
    return row


def resume_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str,
                    now: datetime, kinds: WorkKindRegistry | None = None, reason: str | None = None) -> Schedule:
    """Resume: reset the failure streak; next_due_at = first occurrence after ``now``, so
    the time spent paused floods no backlog. Returns the active :class:`Schedule`;
    resuming an active schedule is a no-op. ``reason`` (a staff resume's) is recorded on
    the ``resumed`` history event. An ownerless schedule stays paused: raises
    :class:`Ownerless` (an admin reassigns it first).
    A definition that no longer validates, or has no occurrence within ten years, stays
    paused: raises :class:`InvalidRecurrence`. Raises :class:`ScheduleNotFound` (with
    ``kinds``: also for a kind with a route of its own)."""
    with conn.transaction():
        current = _locked(conn, workspace_id, schedule_id)
        _hidden_from_generic(kinds, current)
        if current.status == "active":
            return current
        if current.pause_reason == OWNERLESS:
            raise Ownerless(f"schedule {schedule_id} has no owner: an admin reassigns it first")
        _, first_due = _checked_rule(current.recurrence, now, conn, workspace_id)
        row = _schedule(conn, "set_status", {"id": schedule_id, "status": "active", "pause_reason": None,
                                             "next_due_at": first_due, "reset_streak": True,
                                             "deleted_at": None, "now": now})
        _event(conn, row, "resumed", actor, now, reason=reason, detail={"previous_reason": current.pause_reason})
    return row


def delete_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str,
                    now: datetime, kinds: WorkKindRegistry | None = None) -> None:
    """Delete: the schedule stops and disappears from reads; its runs and history are kept
    for audit. Queued runs settle ``skipped`` (``schedule_deleted``) when consumed.
    Raises :class:`ScheduleNotFound` (with ``kinds``: also for a kind with a route of its own)."""
    with conn.transaction():
        current = _locked(conn, workspace_id, schedule_id)
        _hidden_from_generic(kinds, current)
        conn.execute(SQL["set_status"], {"id": schedule_id, "status": "disabled", "pause_reason": "deleted",
                                         "next_due_at": None, "reset_streak": False, "deleted_at": now,
                                         "now": now})
        _event(conn, current, "deleted", actor, now)


def run_now(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str, now: datetime,
            publisher: RunPublisher, idempotency_key: str | None = None,
            kinds: WorkKindRegistry | None = None, trigger: str = "manual",
            admit: Callable[[psycopg.Connection, Schedule], None] | None = None,
            occurrence: tuple[datetime, datetime] | None = None,
            retry_of: UUID | None = None) -> tuple[UUID, bool]:
    """"Run now": commit a manual run, then publish it; a refused publish releases it for the
    dispatcher's next pass. Returns ``(run_id, created)``; a repeated ``idempotency_key``
    returns the first request's run with ``created=False``. Works on paused schedules too.
    ``occurrence``: ``(occurrence_at, occurrence_local)`` (aware UTC, naive wall time in the
    schedule's zone) of an earlier run this one does again (an operator's retry: the work
    kind sees the same occurrence, e.g. the same month); None: the occurrence is ``now``.
    ``trigger``: ``manual``, or ``test`` (an owner's test send: settlement leaves the
    schedule as it was). ``admit(conn, schedule)``: the owner's own check of a new run,
    called in the transaction with the schedule row locked (a repeated key is answered
    before it); what it raises refuses the run. ``retry_of``: the run an operator's retry
    does again, named in the ``run_requested`` event's detail (and so in the audit log's
    request) as ``retry_of``. Raises :class:`ScheduleNotFound`, and
    ``OwnRouteOnly`` when ``kinds`` is given and the schedule's work kind has a route of its
    own (which checks more before it runs one)."""
    if trigger not in ("manual", "test"):
        raise ValueError(f"not a requested run's trigger: {trigger!r}")
    key = f"{trigger}:{idempotency_key or uuid.uuid4()}"
    with conn.transaction():
        schedule = _locked(conn, workspace_id, schedule_id)
        _check_generic(kinds, schedule)
        if admit is not None:
            if idempotency_key is not None:
                earlier = fetch_value(conn, SQL["find_run_by_key"], {"schedule_id": schedule_id,
                                                                     "occurrence_key": key})
                if earlier is not None:
                    return earlier, False
            admit(conn, schedule)
        zone = ZoneInfo(schedule.timezone) if schedule.timezone else None
        local = now.astimezone(zone).replace(tzinfo=None) if zone else now.replace(tzinfo=None)
        occurrence_at, local = occurrence if occurrence is not None else (now, local)
        run_id = fetch_value(conn, SQL["insert_manual_run"], {
            "schedule_id": schedule_id, "workspace_id": workspace_id, "owner": schedule.owner,
            "work_kind": schedule.work_kind, "occurrence_key": key, "now": now, "occurrence_at": occurrence_at,
            "occurrence_local": local,
            "actor": actor, "definition_version": schedule.definition_version, "trigger": trigger})
        if run_id is None:
            return fetch_value(conn, SQL["find_run_by_key"], {"schedule_id": schedule_id,
                                                              "occurrence_key": key}), False
        detail = {"trigger": "test"} if trigger == "test" else {}
        if retry_of is not None:
            detail["retry_of"] = str(retry_of)
        _event(conn, schedule, "run_requested", actor, now, run_id=run_id, detail=detail or None)
    message = RunMessage(run_id=run_id, schedule_id=schedule_id, workspace_id=workspace_id,
                         owner=schedule.owner, work_kind=schedule.work_kind)
    publish_offers(conn, publisher, [message], now=now, actor=actor)
    return run_id, True


def list_schedules(conn: psycopg.Connection, *, workspace_id: UUID, owner: str | None = None,
                   status: str | None = None, after: tuple[datetime, UUID] | None = None,
                   limit: int = 50, kinds: WorkKindRegistry | None = None, work_kind: str | None = None,
                   name: str | None = None) -> SchedulePage:
    """List a workspace's live (not deleted) schedules, oldest first, optionally filtered by
    ``owner`` (module), ``work_kind``, ``status`` and ``name`` (a part of it, any case); at
    most ``limit`` (>= 1) rows after the keyset ``after`` (``(created_at, id)`` of the
    previous page's last row). With ``kinds``, schedules of a kind with a route of its own
    are left out (the generic list does not see them). Runs in its own transaction.
    Returns a :class:`SchedulePage` of :class:`Schedule` rows."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    after_created_at, after_id = after if after is not None else (None, None)
    with conn.transaction():
        rows = fetch_all(conn, SQL["list_schedules"], {
            "workspace_id": workspace_id, "owner": owner, "status": status, "work_kind": work_kind, "name": name,
            "after_created_at": after_created_at,
            "after_id": after_id, "limit": limit + 1, "hidden_kinds": own_route_kinds(kinds)}, Schedule)
    return SchedulePage(*split_page(rows, limit, lambda r: (r.created_at, r.id)))


def get_state(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> ScheduleState | None:
    """The :class:`ScheduleState` of ``workspace_id``'s schedule ``schedule_id``, deleted or
    not (None when there is no such schedule). For owner modules whose work kinds have a
    route of their own (query schedules) and show the schedule beside their settings."""
    return fetch_one(conn, SQL["get_schedule_state"], {"id": schedule_id, "workspace_id": workspace_id},
                     ScheduleState)


@dataclass(frozen=True)
class ScheduleDeletion:
    """A deleted schedule: its ``owner`` and ``work_kind``, ``deleted_at`` (aware UTC) and
    ``deleted_by`` (the deleting user's id; None once the history retention removed the
    ``deleted`` event)."""

    owner: str
    work_kind: str
    deleted_at: datetime
    deleted_by: str | None


def get_deletion(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> ScheduleDeletion | None:
    """The :class:`ScheduleDeletion` of ``workspace_id``'s schedule ``schedule_id`` when it
    was deleted; None for a live schedule, or none of this workspace (another workspace's
    deleted schedule included: it is not this workspace's to know of)."""
    return fetch_one(conn, SQL["get_deletion"], {"id": schedule_id, "workspace_id": workspace_id},
                     ScheduleDeletion)


def get_details(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, now: datetime,
                history_limit: int = 50, upcoming: int = 5, kinds: WorkKindRegistry | None = None) -> ScheduleDetails:
    """Read a schedule with its latest summary, at most ``history_limit`` runs and events
    (newest first) and its next ``upcoming`` occurrences, as :class:`ScheduleDetails`.
    Raises :class:`ScheduleNotFound` (with ``kinds``: also for a kind with a route of its own)."""
    params = {"id": schedule_id, "workspace_id": workspace_id, "limit": history_limit}
    with conn.transaction():
        # Runs and events first, the schedule last: under READ COMMITTED each statement sees
        # the commits made before it, so the summary (last outcome, streak) is never older
        # than the runs shown beside it.
        runs = fetch_all(conn, SQL["recent_runs"], params, ScheduleRun)
        events = fetch_all(conn, SQL["recent_events"], params, ScheduleEvent)
        schedule = fetch_one(conn, SQL["get_schedule"], params, Schedule)
        if schedule is None:
            raise ScheduleNotFound(str(schedule_id))
        _hidden_from_generic(kinds, schedule)
        change = fetch_one(conn, SQL["last_change"], params, LastChange)
    changed = {"changed_by": change.actor, "changed_at": change.at} if change is not None else {}
    try:
        rule = workspace_rule(conn, parse_rule(schedule.recurrence), schedule.recurrence, workspace_id=workspace_id)
    except InvalidRecurrence:
        return ScheduleDetails(schedule, runs, events, [], (), **changed)
    # An active schedule's next due instant is its next occurrence (even if slightly past).
    after = schedule.next_due_at - timedelta(microseconds=1) if schedule.next_due_at else now
    return ScheduleDetails(schedule, runs, events, upcoming_occurrences(rule, after, upcoming, schedule.id),
                           rule.warnings, describe_rule(rule), **changed)


@dataclass(frozen=True)
class LastChange:
    """The acting user (``actor``) and instant (``at``, aware UTC) of a schedule's latest
    definition change."""

    actor: str
    at: datetime


def occurrence_view(occ: Occurrence, zone: ZoneInfo, *, window_end: datetime | None = None,
                    due_at: datetime | None = None) -> UpcomingOccurrence:
    """The occurrence ``occ`` as an :class:`UpcomingOccurrence` in ``zone``: its local wall
    time and DST markers (``repeated`` when its wall time is in a fall-back overlap and a
    gap did not shift it), with the window's end and given instant (aware UTC) as given."""
    local = occ.at.astimezone(zone).replace(tzinfo=None)
    repeated = zone.utcoffset(local.replace(fold=0)) != zone.utcoffset(local.replace(fold=1)) and not occ.shifted
    return UpcomingOccurrence(at=occ.at, local=local, local_date=occ.local_date, shifted=occ.shifted,
                              local_time=occ.local_time, repeated=repeated, skipped=occ.skipped,
                              window_end=window_end, due_at=due_at)


def upcoming_occurrences(rule: Recurrence, after: datetime, count: int,
                         schedule_id: UUID | None = None) -> list[UpcomingOccurrence]:
    """The next ``count`` occurrences of the compiled ``rule`` strictly after the aware
    instant ``after``, each with its instant (UTC), local wall time, intended local date and
    time, and its DST markers: ``shifted`` (a spring-forward gap moved it later) and
    ``repeated`` (its local time is in a fall-back overlap, so the clock shows it twice;
    the rule's DST choice says at which of the two it runs) and ``skipped`` (a gap time the
    rule's DST choice skips: recorded as a skipped run, not run).
    A rule with a flexible window: each has its ``window_end`` and, with ``schedule_id``,
    its ``due_at`` (:func:`~timekeeper.schedules.recurrence.given_instant`); then the
    occurrences are those whose given instant is after ``after`` (an earlier occurrence
    whose instant is still ahead is listed first).
    Fewer than ``count`` only when the rule runs out (past year 9999)."""
    zone = ZoneInfo(rule.timezone) if rule.timezone else ZoneInfo("UTC")
    window = rule.window
    start = after - window if window is not None and schedule_id is not None else after
    occurrences = rule.occurrences_after(start)
    out: list[UpcomingOccurrence] = []
    occ = next(occurrences, None)
    while occ is not None and len(out) < count:
        following = next(occurrences, None) if window is not None else None
        window_end = due_at = None
        if window is not None:
            following_at = following.at if following is not None else None
            window_end = occ.at + (window if following_at is None else min(window, following_at - occ.at))
            if schedule_id is not None:
                due_at = given_instant(schedule_id, occ.at, window, following_at)
                if due_at <= after:
                    occ = following
                    continue
            elif occ.at <= after:
                occ = following
                continue
        out.append(occurrence_view(occ, zone, window_end=window_end, due_at=due_at))
        occ = following if window is not None else next(occurrences, None)
    return out


def preview_rule(conn: psycopg.Connection | None, *, rule: dict[str, Any], now: datetime, count: int,
                 workspace_id: UUID | None = None,
                 schedule_id: UUID | None = None) -> tuple[Recurrence, str, list[UpcomingOccurrence]]:
    """An unsaved rule checked as a create would check it, in words, with its next
    ``count`` occurrences after the aware ``now``: ``(compiled rule, description, upcoming)``.
    With ``conn`` and ``workspace_id`` a business-day rule counts the workspace's closures,
    as the saved schedule will (``conn`` None: no database work). With ``schedule_id`` (the
    schedule the rule would replace, checked by the caller) a windowed rule's occurrences
    have the ``due_at`` the dispatcher would give them (:func:`upcoming_occurrences`).

    Raises :class:`InvalidRecurrence` naming the field for a rule that does not validate or
    has no occurrence within ten years of ``now`` (what create and update refuse)."""
    compiled, _ = _checked_rule(rule, now, conn, workspace_id)
    return compiled, describe_rule(compiled), upcoming_occurrences(compiled, now, count, schedule_id)


@dataclass(frozen=True)
class OwnerlessSchedule:
    """A live schedule paused as ownerless: ids, ``owner`` module and ``work_kind``, its
    ``name``, the departed ``owner_user_id`` and when it was paused (``updated_at``, UTC)."""

    id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    name: str
    owner_user_id: str | None
    updated_at: datetime


def pause_ownerless(conn: psycopg.Connection, *, user_id: str, why: str, now: datetime,
                    workspace_id: UUID | None = None, actor: str = "directory") -> list[dict[str, Any]]:
    """The owner hand-off, in the caller's transaction: pause every live schedule owned by
    ``user_id`` (in ``workspace_id``, or in every workspace when None: a deactivated user)
    as :data:`OWNERLESS`, record a ``paused`` event (reason ``ownerless``, detail ``why``:
    ``user_deactivated`` | ``left_workspace``) and enqueue a ``schedule_ownerless`` notice
    for the workspace's admins. Returns the paused schedules' rows (``id``,
    ``workspace_id``, ``owner``, ``work_kind``, ``name``, ``was_status``, ``was_reason``).
    Idempotent: a schedule already ownerless is left as it is."""
    rows = conn.execute(SQL["pause_ownerless"], {"user_id": user_id, "workspace_id": workspace_id,
                                                 "now": now}).fetchall()
    if not rows:
        return []
    record_events(conn, [Event(r["id"], r["workspace_id"], "paused", OWNERLESS, {
        "owner_user_id": user_id, "why": why, "was_status": r["was_status"], "was_reason": r["was_reason"]})
        for r in rows], actor=actor, now=now)
    enqueue_notifications(conn, [Notice(
        schedule_id=r["id"], workspace_id=r["workspace_id"], owner=r["owner"], kind="schedule_ownerless",
        event_key=f"ownerless:{r['id']}:{user_id}:{now.isoformat()}", topic=False, payload={
            "schedule_id": str(r["id"]), "workspace_id": str(r["workspace_id"]), "reason": OWNERLESS,
            "work_kind": r["work_kind"], "name": r["name"], "owner_user_id": user_id, "why": why})
        for r in rows], now=now)
    return [dict(r) for r in rows]


def list_ownerless(conn: psycopg.Connection, *, workspace_id: UUID) -> list[OwnerlessSchedule]:
    """The workspace's live schedules paused as ownerless, oldest pause first."""
    return fetch_all(conn, SQL["list_ownerless"], {"workspace_id": workspace_id}, OwnerlessSchedule)


def get_owner(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> str | None:
    """The person ``schedule_id`` answers to (its owner user id), or None."""
    return fetch_value(conn, SQL["get_owner"], {"id": schedule_id, "workspace_id": workspace_id})


def set_owner(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, owner_user_id: str, actor: str,
              now: datetime) -> Schedule:
    """Reassign ``schedule_id`` to ``owner_user_id`` in the caller's transaction (the caller
    has checked the access rule for the new owner): an ownerless schedule becomes paused by
    its owner (resumable), and an ``owner_changed`` event records the old and new owner.
    Returns the schedule; raises :class:`ScheduleNotFound`."""
    current = _locked(conn, workspace_id, schedule_id)
    previous = get_owner(conn, workspace_id=workspace_id, schedule_id=schedule_id)
    conn.execute(SQL["set_owner"], {"id": schedule_id, "workspace_id": workspace_id,
                                    "owner_user_id": owner_user_id, "now": now})
    _event(conn, current, "owner_changed", actor, now, reason="reassigned",
           detail={"from": previous, "to": owner_user_id, "was_reason": current.pause_reason})
    return _locked(conn, workspace_id, schedule_id)


def list_events(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, before_id: int | None = None,
                limit: int = 50) -> list[ScheduleEvent]:
    """The schedule's history (the audit trail: every change with its actor and instant),
    newest first: at most ``limit`` events with an id below ``before_id``."""
    return fetch_all(conn, SQL["list_events"], {"id": schedule_id, "workspace_id": workspace_id,
                                                "before_id": before_id, "limit": limit}, ScheduleEvent)
