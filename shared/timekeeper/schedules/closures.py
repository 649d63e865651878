"""A workspace's closures: local dates it does not work, skipped by its business-day rules.

A closure is a local date (in each schedule's own zone) on top of the public holidays a
business-day calendar rule names (``{"calendar": {"business_day": 3, "holidays": "DE-BE"}}``).
Adding or removing one changes the holiday set of every business-day schedule of the
workspace: in the same transaction each active one's next due instant is recomputed from
``now`` and a ``holidays_changed`` history event records the date, the change and the
instants before and after. A schedule already due (its next due instant at or before
``now``, not yet claimed) keeps it: the dispatcher's claim evaluates it with the new set.
A new version of the holiday data does the same for every workspace, once, at the deploy
that ships it (:func:`refresh_holiday_data`, called by the migration step).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_all
from timekeeper.schedules.recurrence import InvalidRecurrence, Recurrence, parse_rule_text
from timekeeper.schedules.recurrence.business import HOLIDAYS_VERSION
from timekeeper.schedules.runs import Event, record_events

SQL = load_queries("timekeeper.schedules", "closures.sql")

#: The history event of a business-day schedule whose holiday set changed.
HOLIDAYS_CHANGED = "holidays_changed"


@dataclass(frozen=True, slots=True)
class Closure:
    """A closed local date of a workspace, why, and who closed it when (aware UTC)."""

    closed_on: date
    reason: str
    created_by: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class _BusinessDaySchedule:
    id: UUID
    workspace_id: UUID
    rule_text: str
    next_due_at: datetime | None


def list_closures(conn: psycopg.Connection, *, workspace_id: UUID) -> list[Closure]:
    """The workspace's closures, by date (in a transaction: the tenant wall applies per transaction)."""
    with conn.transaction():
        return fetch_all(conn, SQL["list_closures"], {"workspace_id": workspace_id}, Closure)


@dataclass(frozen=True, slots=True)
class _ClosedOn:
    closed_on: date


def closed_dates(conn: psycopg.Connection, *, workspace_id: UUID) -> frozenset[date]:
    """The workspace's closed local dates (empty when none), read in a transaction (a
    savepoint inside the caller's): the tenant wall applies per transaction."""
    with conn.transaction():
        rows = fetch_all(conn, SQL["closed_dates"], {"workspace_id": workspace_id}, _ClosedOn)
    return frozenset(row.closed_on for row in rows)


def uses_business_days(rule: dict[str, Any]) -> bool:
    """True for a business-day calendar rule (the rules a workspace's closures apply to)."""
    calendar = rule.get("calendar") if isinstance(rule, dict) else None
    return isinstance(calendar, dict) and "business_day" in calendar


def workspace_rule(conn: psycopg.Connection, rule: Recurrence, source: dict[str, Any], *,
                   workspace_id: UUID) -> Recurrence:
    """The compiled ``rule`` (of the JSON ``source``) as the workspace evaluates it: a
    business-day rule with the workspace's closures; any other rule unchanged, without a query."""
    if not uses_business_days(source):
        return rule
    return with_closures(rule, closed_dates(conn, workspace_id=workspace_id))


def with_closures(rule: Recurrence, closed: frozenset[date] | list[date] | tuple[date, ...] | None) -> Recurrence:
    """``rule`` evaluated with the workspace's closed dates as non-business days: a
    business-day calendar rule gets them (a different compiled rule, its own cache key);
    every other rule, and an empty set, is returned unchanged."""
    if not closed:
        return rule
    attach = getattr(rule, "with_closures", None)
    return attach(frozenset(closed)) if attach is not None else rule


def add_closure(conn: psycopg.Connection, *, workspace_id: UUID, closed_on: date, reason: str, actor: str,
                now: datetime) -> tuple[Closure | None, int]:
    """Close ``closed_on`` for the workspace (idempotent: a date already closed keeps its
    first row) and recompute its business-day schedules, in one transaction.

    Returns ``(the new closure or None when the date was already closed, how many schedules
    recorded a holidays_changed event)``. ``now`` is aware UTC.
    """
    with conn.transaction():
        rows = fetch_all(conn, SQL["insert_closure"], {"workspace_id": workspace_id, "closed_on": closed_on,
                                                       "reason": reason, "actor": actor, "now": now}, Closure)
        if not rows:
            return None, 0
        return rows[0], _recompute(conn, workspace_id, closed_on, "closure_added", actor, now)


def remove_closure(conn: psycopg.Connection, *, workspace_id: UUID, closed_on: date, actor: str,
                   now: datetime) -> tuple[Closure | None, int]:
    """Reopen ``closed_on`` and recompute the workspace's business-day schedules, in one
    transaction. Returns ``(the removed closure or None when the date was not closed, how
    many schedules recorded a holidays_changed event)``."""
    with conn.transaction():
        rows = fetch_all(conn, SQL["delete_closure"], {"workspace_id": workspace_id, "closed_on": closed_on},
                         Closure)
        if not rows:
            return None, 0
        return rows[0], _recompute(conn, workspace_id, closed_on, "closure_removed", actor, now)


@dataclass(frozen=True, slots=True)
class _Workspace:
    workspace_id: UUID


@dataclass(frozen=True, slots=True)
class _Data:
    data: str


#: The holiday data this layer evaluates business-day rules with.
HOLIDAY_DATA = f"holidays {HOLIDAYS_VERSION}"


def refresh_holiday_data(conn: psycopg.Connection, *, now: datetime, actor: str = "timekeeper") -> int:
    """Record this layer's holiday data version (:data:`HOLIDAY_DATA`); when it is new,
    recompute every active business-day schedule of every workspace from ``now`` (aware
    UTC) with a ``holidays_changed`` event (reason ``holiday_data_changed``) on each, in one
    transaction. Returns how many schedules were recomputed (0 for a version already seen).

    Rule: a new year's or a new release's holiday data reaches the next due instants at
    the deploy that ships it (the migration step calls this), not only at the next claim.
    Run it as the migrating (owner) role: it reads every workspace's schedules."""
    with conn.transaction():
        if not fetch_all(conn, SQL["record_holiday_data"], {"data": HOLIDAY_DATA, "now": now}, _Data):
            return 0
        workspaces = fetch_all(conn, SQL["business_day_workspaces"], {}, _Workspace)
        return sum(_recompute(conn, w.workspace_id, None, "holiday_data_changed", actor, now) for w in workspaces)


def _recompute(conn: psycopg.Connection, workspace_id: UUID, closed_on: date | None, reason: str, actor: str,
               now: datetime) -> int:
    """Rule: a holiday set change recomputes each active business-day schedule's next due
    instant from ``now`` (one already due keeps it) and records the change on each."""
    closed = closed_dates(conn, workspace_id=workspace_id)
    schedules = fetch_all(conn, SQL["business_day_schedules_for_update"], {"workspace_id": workspace_id},
                          _BusinessDaySchedule)
    events = []
    for schedule in schedules:
        try:
            rule = with_closures(parse_rule_text(schedule.rule_text), closed)
        except InvalidRecurrence:
            continue  # a rule that no longer validates is paused by its next claim
        before = schedule.next_due_at
        after = before
        if before is None or before > now:
            nxt = rule.next_after(now)
            after = nxt.at if nxt is not None else None
            if after != before and after is not None:
                conn.execute(SQL["set_next_due"], {"id": schedule.id, "next_due_at": after, "now": now})
        events.append(Event(schedule.id, schedule.workspace_id, HOLIDAYS_CHANGED, reason, {
            "closed_on": closed_on.isoformat() if closed_on else None,
            "holiday_data": getattr(rule, "holiday_data", None),
            "previous_next_due_at": _iso(before), "next_due_at": _iso(after), "moved": after != before}))
    record_events(conn, events, actor=actor, now=now)
    return len(events)


def _iso(instant: datetime | None) -> str | None:
    return instant.isoformat().replace("+00:00", "Z") if instant is not None else None
