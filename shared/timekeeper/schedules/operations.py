"""What needs an operator's attention in every workspace: the schedules that are paused or
failing, and the runs that wait too long; and the record of what staff did about it
(:func:`record_action`, the table of migration ``0038_operations_actions.sql``).

Both reads go through the narrow cross-workspace functions of the migration
``0039_operations_overview.sql`` (the only way the API's walled login reads more than one
workspace), so they work on the API's connection and on the owner's alike. Each is
bounded (at most :data:`MAX_ROWS` rows) and reads through a partial index.

A run waits too long (``why``):

* ``not_started`` -- the queue accepted its message more than ``reoffer_after`` ago and no
  consumer started it (the dispatcher re-offers it; a run here again and again means its
  messages are lost or its consumer fails before it starts);
* ``not_published`` -- queued, its message refused or never sent, for longer than
  ``reoffer_after`` (the next re-offer pass publishes it);
* ``lease_expired`` -- started, and its lease ended (the execution died; the next receive
  of its message takes it over).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from timekeeper.db.rows import fetch_all, fetch_one
from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.schedules", "operations.sql")

#: The most rows one read returns (the functions cap it too).
MAX_ROWS = 500


@dataclass(frozen=True)
class AttentionSchedule:
    """A paused or failing schedule (``consecutive_failures`` > 0), any workspace."""

    id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    name: str
    status: str
    pause_reason: str | None
    consecutive_failures: int
    last_outcome: str | None
    last_run_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class StrandedRun:
    """A run that waits too long (see the module docstring for ``why``), any workspace."""

    id: UUID
    schedule_id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    state: str
    why: str
    occurrence_at: datetime
    queued_at: datetime
    published_at: datetime | None
    lease_until: datetime | None
    attempts: int
    offer_count: int


@dataclass(frozen=True)
class OperationsAction:
    """What a staff member did through the operations routes: ``action`` (``redrive`` of
    the dead-letter queue ``target``, or ``resume`` of the schedule ``target``), the
    ``actor`` (``actor_name``: their display name in the directory, when read back among the
    recent actions; else None), their ``reason``, ``detail`` and the instant (UTC)."""

    id: int
    action: str
    actor: str
    target: str
    reason: str
    detail: dict[str, Any]
    at: datetime
    actor_name: str | None = None


def record_action(conn: Any, *, action: str, actor: str, target: str, reason: str, detail: dict[str, Any],
                  at: datetime) -> OperationsAction:
    """Record an operations action (in the caller's transaction); returns it."""
    return fetch_one(conn, SQL["record_action"], {"action": action, "actor": actor, "target": target,
                                                  "reason": reason, "detail": Jsonb(detail), "at": at},
                     OperationsAction)


def recent_actions(conn: Any, *, limit: int = 20) -> list[OperationsAction]:
    """The latest operations actions, newest first, at most ``limit`` (capped at :data:`MAX_ROWS`)."""
    return fetch_all(conn, SQL["recent_actions"], {"limit": min(limit, MAX_ROWS)}, OperationsAction)


def schedules_needing_attention(conn: Any, *, limit: int = 100, kind: str | None = None, status: str | None = None,
                                name: str | None = None) -> list[AttentionSchedule]:
    """Paused and failing schedules of every workspace, most recently changed first, at most
    ``limit`` (capped at :data:`MAX_ROWS`); the filters (work ``kind``, ``status``, a part
    of the ``name`` in any case) narrow the :data:`MAX_ROWS` most recently changed."""
    return fetch_all(conn, SQL["schedules_needing_attention"], {
        "cap": MAX_ROWS if (kind or status or name) else min(limit, MAX_ROWS), "limit": min(limit, MAX_ROWS),
        "kind": kind, "status": status, "name": name}, AttentionSchedule)


def stranded_runs(conn: Any, *, owners: list[str], reoffer_after: dict[str, timedelta], now: datetime,
                  limit: int = 100, kind: str | None = None, state: str | None = None) -> list[StrandedRun]:
    """The runs of ``owners`` that wait too long at ``now`` (aware UTC): per owner at most
    ``limit`` of each kind (capped at :data:`MAX_ROWS`), the longest waiting first;
    ``reoffer_after[owner]`` is that owner's pipeline's re-offer period. The filters (work
    ``kind``, run ``state``) narrow the :data:`MAX_ROWS` longest waiting."""
    out: list[StrandedRun] = []
    for owner in owners:
        out += fetch_all(conn, SQL["stranded_runs"], {
            "owner": owner, "now": now, "published_before": now - reoffer_after[owner],
            "cap": MAX_ROWS if (kind or state) else min(limit, MAX_ROWS), "limit": min(limit, MAX_ROWS),
            "kind": kind, "state": state}, StrandedRun)
    return out


def schedule_names(conn: Any, ids: list[UUID]) -> dict[UUID, dict[str, Any]]:
    """The schedules ``ids`` of the workspace entered on ``conn``: id -> ``{"name",
    "last_failed_run_id"}`` (the latest failed run's id, None when none failed); a schedule
    of another workspace is not found (row-level security)."""
    rows = conn.execute(SQL["schedule_names"], {"ids": ids}).fetchall()
    return {row["id"]: {"name": row["name"], "last_failed_run_id": row["last_failed_run_id"]} for row in rows}
