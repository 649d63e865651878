"""Console sessions signed out on the server.

A console session is a signed cookie with a random session id that lasts
:data:`SESSION_LIFETIME_S`. Clearing the cookie in one browser does not end it: a copy
stays valid until it expires. A sign-out therefore records the session id here
(:func:`revoke`), in PostgreSQL, so that every execution environment of the API function
refuses it (:func:`revoked_at`); the record is kept until the session would have
expired.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_value

SQL = load_queries("timekeeper.platform", "sessions.sql")

#: How long a console session lasts (seconds): a revocation is kept at least as long.
SESSION_LIFETIME_S = 8 * 3600


def display_name(conn: psycopg.Connection, *, user_id: str) -> str | None:
    """The directory's display name of ``user_id``, or None when the directory does not
    know the person (or knows no name). Read-only, caller's transaction."""
    name = fetch_value(conn, SQL["display_name"], {"user_id": user_id})
    return name or None


def revoke(conn: psycopg.Connection, *, workspace_id: UUID, session_id: str, now: datetime) -> None:
    """Record that the session ``session_id`` (of ``workspace_id``) is signed out at
    ``now`` (aware UTC), kept until ``now`` + :data:`SESSION_LIFETIME_S`; a second
    sign-out keeps the first instant. Runs in the caller's transaction."""
    execute(conn, SQL["revoke"], {"workspace_id": workspace_id, "session_id": session_id, "now": now,
                                  "expires_at": now + timedelta(seconds=SESSION_LIFETIME_S)})


def revoked_at(conn: psycopg.Connection, *, workspace_id: UUID, session_id: str) -> datetime | None:
    """When the session ``session_id`` of ``workspace_id`` was signed out (aware UTC), or
    None while it is not."""
    return fetch_value(conn, SQL["revoked_at"], {"workspace_id": workspace_id, "session_id": session_id})
