"""Owner notifications through an outbox: the events a schedule's owner must hear about.

The transaction that decides an event (a settlement that pauses, or fails a run its owner
chose to hear of; a claim that pauses an invalid definition or skips a stale delivery, a
failed posting job, an owner hand-off) writes its notice here. Two readers take it from there:

* the operators' topic: notices with ``topic`` (the automatic pauses of settlement) are
  published by the owner's next dispatcher pass and marked sent; a failed publish stays
  unsent and is retried by the next pass, so an auto-pause is never silent;
* the people: every notice is turned into per-person notices (the schedule's owner, the
  workspace's admins) by :mod:`timekeeper.platform.notices`, idempotent by ``event_key``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper import observability as obs
from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_row, fetch_value

SQL = load_queries("timekeeper.schedules", "notifications.sql")


#: The kinds of notice (also the people's notice kinds).
SCHEDULE_PAUSED = "schedule_paused"
DELIVERY_SKIPPED_STALE = "delivery_skipped_stale"
POSTING_FAILED = "posting_failed"
SCHEDULE_OWNERLESS = "schedule_ownerless"
#: A scheduled run failed without pausing its schedule (its owner chose to hear of it).
SCHEDULE_FAILED = "schedule_failed"


@dataclass(frozen=True)
class Notice:
    """One event to tell: its schedule (None for an event without one), workspace, owner
    module, ``kind`` (above), ``event_key`` (the event's identity: the same event enqueued
    twice is told once per person), whether the operators' ``topic`` gets it, and a
    JSON-ready ``payload`` (ids as text, ``reason``, counts)."""

    schedule_id: UUID | None
    workspace_id: UUID
    owner: str
    kind: str
    event_key: str
    payload: dict[str, Any]
    topic: bool = False


def enqueue_notification(conn: psycopg.Connection, *, schedule_id: UUID | None, workspace_id: UUID, owner: str,
                         kind: str, payload: dict[str, Any], now: datetime, event_key: str | None = None,
                         topic: bool = True) -> int:
    """Insert a notice in the caller's transaction; returns its id. ``event_key`` defaults
    to ``<kind>:<schedule>:<now>``; ``topic`` (default True, the pause notices' behaviour)
    sends it to the operators' topic as well as to the people."""
    key = event_key or f"{kind}:{schedule_id}:{now.isoformat()}"
    return fetch_value(conn, SQL["insert_notification"],
                       (schedule_id, workspace_id, owner, kind, Jsonb(payload), now, key, topic))


def enqueue_notifications(conn: psycopg.Connection, notices: list[Notice], *, now: datetime) -> int:
    """Insert ``notices`` in the caller's transaction in one statement; returns the count."""
    if not notices:
        return 0
    conn.execute(SQL["insert_notifications"], {
        "now": now, "schedule_id": [n.schedule_id for n in notices],
        "workspace_id": [n.workspace_id for n in notices], "owner": [n.owner for n in notices],
        "kind": [n.kind for n in notices], "payload": [Jsonb(n.payload) for n in notices],
        "event_key": [n.event_key for n in notices], "topic": [n.topic for n in notices]})
    return len(notices)


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
