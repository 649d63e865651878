"""Owner notifications through an outbox (the seeds' open "pause notification" question).

The settling transaction writes the notice; after commit it is published and marked sent.
A notice whose publish failed stays unsent and is retried by the next dispatcher pass, so
an auto-pause is never silent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper import observability as obs
from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_row, fetch_value

SQL = load_queries("timekeeper.schedules", "notifications.sql")


def enqueue_notification(conn: psycopg.Connection, *, schedule_id: UUID, workspace_id: UUID, owner: str,
                         kind: str, payload: dict[str, Any], now: datetime) -> int:
    """Insert a notice in the caller's transaction; returns its id."""
    return fetch_value(conn, SQL["insert_notification"], (schedule_id, workspace_id, owner, kind, Jsonb(payload), now))


def flush_notifications(conn: psycopg.Connection, *, owner: str, notifier: Any, now: datetime,
                        limit: int = 100) -> int:
    """Publish unsent notices of ``owner`` (oldest first); return how many were sent.

    Each notice is locked, published and marked sent in its own transaction; a publish
    failure counts an attempt and leaves it for the next flush. Never raises for a
    notifier failure (it is logged).
    """
    sent = 0
    for _ in range(limit):
        with conn.transaction():
            row = fetch_row(conn, SQL["lock_next_unsent"], (owner,))
            if row is None:
                break
            try:
                notifier.notify(subject=f"Timekeeper {owner}: {row['kind']}", payload=row["payload"])
            except Exception:  # noqa: BLE001 - reported, retried next pass
                obs.logger.exception("notification publish failed", extra={"notification_id": row["id"]})
                execute(conn, SQL["count_attempt"], (row["id"],))
                break
            execute(conn, SQL["mark_sent"], (now, row["id"]))
            sent += 1
    return sent
