"""The audit trail of staff reads: a staff member who reads a workspace other than their
own (the snapshot staff routes) leaves a row in that workspace, with the actor, what was
read and the instant; the workspace's admins read them back through the API.

Changes to schedules are the schedules' own history (``schedule_events``), written by the
code that changes them.
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


def record_staff_read(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, what: str,
                      detail: dict[str, Any], now: datetime) -> int:
    """Record, in the caller's transaction (with ``workspace_id`` entered), that ``actor``
    read ``what`` of ``workspace_id`` at ``now``; returns the row's id."""
    return int(fetch_value(conn, SQL["record_staff_read"], (workspace_id, actor, what, Jsonb(detail), now)))


def list_staff_reads(conn: psycopg.Connection, *, workspace_id: UUID, before_id: int | None = None,
                     limit: int = 50) -> list[StaffRead]:
    """The workspace's staff reads, newest first: at most ``limit`` below ``before_id``."""
    return fetch_all(conn, SQL["list_staff_reads"], {"workspace_id": workspace_id, "before_id": before_id,
                                                     "limit": limit}, StaffRead)
