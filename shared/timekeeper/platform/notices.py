"""Owner notices: what a person is told about the schedules they answer for.

An event an owner must hear about (an automatic pause, an invalid definition, a delivery
skipped as stale after an outage, a failed posting job, an owner hand-off) is committed
into the scheduling library's notification outbox
(:mod:`timekeeper.schedules.notifications`) by the transaction that decides it. A people
pass (:func:`tell_people`, after each dispatcher pass of the queries pipeline) turns every
untold event into one :class:`OwnerNotice` per recipient:

* the schedule's owner (``schedules.owner_user_id``), audience ``owner``;
* the workspace's admins (members holding ``workspace:admin``), audience ``admin``, when
  the workspace asks for copies (``workspaces.notify_admins``), and always for an
  ownerless schedule or an event without a schedule (nobody else can act on it);
* only active users who are current members of the workspace.

A notice is idempotent per (event, recipient): the event's ``event_key`` is unique with
the recipient, so an event told twice (a duplicate delivery of the message that caused
it, a pass that dies after its insert) gives one notice each. The API lists the signed-in
person's notices and marks them read; their e-mails (one message each, or a digest) go
through the per-recipient outbox of deliveries (:mod:`timekeeper.reporting.notice_mail`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_row, fetch_value

SQL = load_queries("timekeeper.platform", "notices.sql")

#: Events one people pass takes (the rest wait for the next pass, a minute later).
TELL_LIMIT = 500


@dataclass(frozen=True)
class OwnerNotice:
    """One notice to one person: ``kind`` (``schedule_paused``, ``delivery_skipped_stale``,
    ``posting_failed``, ``schedule_ownerless``, ``schedule_failed``), ``audience`` (``owner`` | ``admin``), the
    schedule (None for an event without one), the machine-readable ``reason`` and the
    event's ``detail`` (ids as text, counts); ``created_at`` (when the event was decided),
    ``read_at`` and ``mailed_at`` are aware UTC instants (None: not yet)."""

    id: int
    workspace_id: UUID
    user_id: str
    kind: str
    audience: str
    schedule_id: UUID | None
    reason: str | None
    detail: dict[str, Any]
    created_at: datetime
    read_at: datetime | None
    mailed_at: datetime | None


def has_untold(conn: psycopg.Connection) -> bool:
    """Whether any event waits for the people pass (one indexed probe)."""
    row = fetch_row(conn, SQL["probe"], {})
    return bool(row and row["untold"])


def tell_people(conn: psycopg.Connection, *, now: datetime, limit: int = TELL_LIMIT) -> dict[str, int]:
    """Turn up to ``limit`` untold events into owner notices, in one committed transaction
    at ``now`` (aware UTC). ``conn`` must see every workspace (the workers' login) and be
    idle. Returns ``{"events": told, "notices": inserted}``; an event with no eligible
    recipient is told with no notice. Raises ``psycopg.Error`` (nothing is marked told)."""
    with conn.transaction():
        row = fetch_row(conn, SQL["tell_people"], {"now": now, "limit": limit})
    assert row is not None
    return {"events": int(row["events"]), "notices": int(row["notices"])}


def list_notices(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, unread_only: bool = False,
                 before_id: int | None = None, limit: int = 50) -> list[OwnerNotice]:
    """``user_id``'s notices in ``workspace_id``, newest first: at most ``limit`` with an id
    below ``before_id`` (the previous page's last), unread ones only when ``unread_only``."""
    return fetch_all(conn, SQL["list_notices"], {"workspace_id": workspace_id, "user_id": user_id,
                                                 "before_id": before_id, "unread": unread_only, "limit": limit},
                     OwnerNotice)


def mark_read(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, now: datetime,
              ids: list[int] | None = None) -> int:
    """Mark ``user_id``'s unread notices ``ids`` (None: all of them) read at ``now``;
    another person's ids change nothing. Returns how many changed."""
    return execute(conn, SQL["mark_read"], {"workspace_id": workspace_id, "user_id": user_id, "now": now,
                                            "ids": ids})


def count_unread(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str) -> int:
    """How many of ``user_id``'s notices in ``workspace_id`` are unread."""
    return int(fetch_value(conn, SQL["count_unread"], {"workspace_id": workspace_id, "user_id": user_id}))


#: A recipient who opted out of a query schedule's messages was invited back by its owner
#: (audience :data:`RECIPIENT`): the notice links to where they accept.
RESUBSCRIBE_INVITED = "resubscribe_invited"
#: The audience of a notice to the person an action concerns (not the schedule's owner).
RECIPIENT = "recipient"


def notify_person(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, kind: str, event_key: str,
                  now: datetime, schedule_id: UUID | None = None, reason: str | None = None,
                  detail: dict[str, Any] | None = None, audience: str = RECIPIENT) -> int | None:
    """Tell ``user_id`` of ``workspace_id`` about an action decided in the caller's
    transaction (e.g. :data:`RESUBSCRIBE_INVITED`), at ``now`` (aware UTC). Only an active
    user who is a current member is told; ``event_key`` (at most 300 characters) makes a
    repeat insert nothing. Returns the new notice's id, or None when nothing was written."""
    return fetch_value(conn, SQL["notify_person"], {
        "workspace_id": workspace_id, "user_id": user_id, "event_key": event_key, "kind": kind,
        "audience": audience, "schedule_id": schedule_id, "reason": reason, "detail": Jsonb(detail or {}),
        "now": now})
