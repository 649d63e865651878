"""The workspace's audit log, and the trail of staff reads.

The audit log (``audit_events``, migration 0065) holds one row per change in a workspace:
who (``actor``, a user id), when (``at``, UTC), the kind of change (``kind``,
``<area>.<verb>``: ``settings.updated``, ``schedule.updated``, ...), the object changed
(``subject_type``, ``subject_id``), the changed fields before and after, and an optional
reason. The code that makes a change records it with :func:`record_event` on the SAME
connection and transaction, so a change and its event commit or roll back together. Rows
are never changed or deleted (the API and the workers may only insert and read).

The log reads newest first by id with a cursor (:func:`list_events`): one index range scan
per page at any size (``(workspace_id, id DESC)``, and per area or actor).

A staff member who reads a workspace other than their own (the snapshot staff routes)
leaves a ``staff_reads`` row in that workspace, with the actor, what was read and the
instant (:func:`record_staff_read`), and an ``staff.read`` event in its audit log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_all, fetch_value

SQL = load_queries("timekeeper.platform", "audit.sql")

#: The areas of the log (the part of a kind before the dot), what it is filtered by.
AREAS = ("settings", "schedule", "delivery", "query", "report", "closure", "recipient", "opt_out", "staff",
         "run", "dead_letter", "suppression")


@dataclass(frozen=True)
class StaffRead:
    """One staff read of a workspace: ``actor`` (the staff member's user id), ``what`` (e.g.
    ``snapshot_periods``), ``detail`` (the read's filters) and ``at`` (aware UTC)."""

    id: int
    workspace_id: UUID
    actor: str
    what: str
    detail: dict[str, Any]
    at: datetime


@dataclass(frozen=True)
class AuditEvent:
    """One change in a workspace: ``actor`` (a user id; ``actor_name`` their display name
    when the directory shows them to the workspace, else None), ``kind`` (``<area>.<verb>``), the
    object (``subject_type``, ``subject_id`` or None), the changed fields ``before`` and
    ``after`` (JSON objects), ``reason`` (or None) and ``at`` (aware UTC)."""

    id: int
    workspace_id: UUID
    actor: str
    actor_name: str | None
    kind: str
    subject_type: str
    subject_id: str | None
    before: dict[str, Any]
    after: dict[str, Any]
    reason: str | None
    at: datetime

    @property
    def area(self) -> str:
        """The kind's area (``settings``, ``schedule``, ...)."""
        return self.kind.split(".", 1)[0]


def record_event(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, kind: str, subject_type: str,
                 subject_id: str | UUID | None, before: dict[str, Any] | None, after: dict[str, Any] | None,
                 reason: str | None = None, now: datetime) -> int:
    """Record one change in ``workspace_id``'s audit log, in the caller's transaction (an
    API connection must have the workspace entered; a worker's may write any workspace).

    ``actor``: the user id who made the change (1-200 characters; a process names itself,
    e.g. ``system:closures``); ``kind``: ``<area>.<verb>`` with ``area`` one of
    :data:`AREAS` (e.g. ``run.retried``); ``subject_type`` / ``subject_id``: the object
    (``subject_id`` None for the workspace itself); ``before`` / ``after``: JSON-ready
    objects of the changed fields only (None: ``{}``; never an e-mail address: people are
    named by user id, so an erasure leaves nothing behind); ``reason``: the person's
    reason, or None; ``now``: the change's instant (aware UTC). Returns the event's id.
    Raises ``ValueError`` for a kind outside :data:`AREAS` or a naive ``now``, and
    ``psycopg.errors.CheckViolation`` for values the table refuses (an empty actor, a
    reason over 500 characters)."""
    area, _, verb = kind.partition(".")
    if area not in AREAS or not verb:
        raise ValueError(f"audit kind {kind!r} is not <area>.<verb> of a known area")
    if now.tzinfo is None:
        raise ValueError("now must be an aware UTC instant")
    return int(fetch_value(conn, SQL["record_event"], {
        "workspace_id": workspace_id, "actor": actor, "kind": kind, "subject_type": subject_type,
        "subject_id": None if subject_id is None else str(subject_id), "before": Jsonb(before or {}),
        "after": Jsonb(after or {}), "reason": reason, "at": now}))


def list_events(conn: psycopg.Connection, *, workspace_id: UUID, area: str | None = None, actor: str | None = None,
                before_id: int | None = None, after_id: int | None = None, limit: int = 50) -> list[AuditEvent]:
    """The workspace's audit events newest first, at most ``limit``: those with an id below
    ``before_id`` (None: from the newest), or, given ``after_id``, the ``limit`` events just
    above it (still returned newest first). ``area`` (one of :data:`AREAS`) and ``actor``
    (a user id) filter. Raises ``ValueError`` when both ids are given."""
    if before_id is not None and after_id is not None:
        raise ValueError("give before_id or after_id, not both")
    params = {"workspace_id": workspace_id, "area": area, "actor": actor, "limit": limit}
    if after_id is not None:
        return fetch_all(conn, SQL["list_newer"], {**params, "after_id": after_id}, AuditEvent)[::-1]
    return fetch_all(conn, SQL["list_older"], {**params, "before_id": before_id}, AuditEvent)


def record_staff_read(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, what: str,
                      detail: dict[str, Any], now: datetime) -> int:
    """Record, in the caller's transaction (with ``workspace_id`` entered), that ``actor``
    read ``what`` of ``workspace_id`` at ``now`` (a ``staff_reads`` row and a ``staff.read``
    audit event); returns the staff read's id."""
    read_id = int(fetch_value(conn, SQL["record_staff_read"], (workspace_id, actor, what, Jsonb(detail), now)))
    record_event(conn, workspace_id=workspace_id, actor=actor, kind="staff.read", subject_type=what,
                 subject_id=None, before=None, after=detail, now=now)
    return read_id


def record_staff_reads(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, what: str,
                       details: list[dict[str, Any]], now: datetime) -> None:
    """Record, in the caller's transaction (with ``workspace_id`` entered), that ``actor``
    read ``len(details)`` objects of kind ``what`` of ``workspace_id`` at ``now`` (aware
    UTC), one a detail: what :func:`record_staff_read` records for each, in one statement
    (a page that reads many objects at once)."""
    if details:
        conn.execute(SQL["record_staff_reads"], {"workspace_id": workspace_id, "actor": actor, "what": what,
                                                 "details": [Jsonb(d) for d in details], "at": now})


def list_staff_reads(conn: psycopg.Connection, *, workspace_id: UUID, before_id: int | None = None,
                     limit: int = 50) -> list[StaffRead]:
    """The workspace's staff reads, newest first: at most ``limit`` below ``before_id``."""
    return fetch_all(conn, SQL["list_staff_reads"], {"workspace_id": workspace_id, "before_id": before_id,
                                                     "limit": limit}, StaffRead)
