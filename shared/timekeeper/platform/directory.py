"""Workspaces, users and workspace memberships: the directory the access rule reads.

Rows come back as frozen dataclasses. Writers take a connection and run in the caller's
transaction (they never commit); readers work on any connection (the worker login sees
every workspace, the API's login only the entered one, through row-level security).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import class_row

from timekeeper.schedules.zones import is_canonical_zone

WORKSPACE_STATUSES = ("active", "loading", "disabled")
USER_STATUSES = ("active", "deactivated")


class InvalidTimezone(ValueError):
    """A workspace timezone that is not a canonical IANA zone name."""


@dataclass(frozen=True)
class Workspace:
    """A tenant: ``timezone`` is an IANA name (where its months begin and end),
    ``status`` one of :data:`WORKSPACE_STATUSES`, ``snapshots_enabled`` its snapshot policy
    flag, ``currency`` an ISO 4217 code, ``created_at`` an aware UTC instant."""

    id: UUID
    name: str
    timezone: str
    status: str
    snapshots_enabled: bool
    currency: str
    created_at: datetime

    @property
    def zone(self) -> ZoneInfo:
        """The workspace's :class:`ZoneInfo`."""
        return ZoneInfo(self.timezone)


@dataclass(frozen=True)
class User:
    """A person, by the identity provider's opaque id. ``email`` may be None (no address);
    ``status`` one of :data:`USER_STATUSES`."""

    id: str
    display_name: str
    email: str | None
    status: str
    created_at: datetime


@dataclass(frozen=True)
class Membership:
    """A user's membership of a workspace: ``roles`` (names, see
    :mod:`timekeeper.platform.access`), ``joined_at`` and ``left_at`` (None while a member),
    aware UTC instants."""

    workspace_id: UUID
    user_id: str
    roles: list[str]
    joined_at: datetime
    left_at: datetime | None

    @property
    def current(self) -> bool:
        """Whether the user still belongs to the workspace."""
        return self.left_at is None


def check_timezone(name: str) -> str:
    """Return ``name`` when it is a canonical IANA zone (:mod:`timekeeper.schedules.zones`,
    the one zone rule); raises :class:`InvalidTimezone`."""
    if not is_canonical_zone(name):
        raise InvalidTimezone(f"{name!r} is not an IANA timezone name")
    return name


def create_workspace(conn: psycopg.Connection, *, name: str, timezone: str, status: str = "active",
                     snapshots_enabled: bool = True, currency: str = "USD", workspace_id: UUID | None = None,
                     now: datetime) -> Workspace:
    """Insert a workspace and return it. Raises :class:`InvalidTimezone` for an unknown zone,
    ``psycopg.errors.CheckViolation`` for a status or currency the table refuses."""
    check_timezone(timezone)
    with conn.cursor(row_factory=class_row(Workspace)) as cur:
        row = cur.execute(
            """INSERT INTO workspaces (id, name, timezone, status, snapshots_enabled, currency, created_at)
               VALUES (coalesce(%s, gen_random_uuid()), %s, %s, %s, %s, %s, %s)
               RETURNING id, name, timezone, status, snapshots_enabled, currency, created_at""",
            (workspace_id, name, timezone, status, snapshots_enabled, currency, now)).fetchone()
    assert row is not None
    return row


def set_workspace_status(conn: psycopg.Connection, workspace_id: UUID, status: str) -> None:
    """Set a workspace's status (one of :data:`WORKSPACE_STATUSES`); raises ``LookupError``
    when there is no such workspace."""
    if conn.execute("UPDATE workspaces SET status = %s WHERE id = %s", (status, workspace_id)).rowcount != 1:
        raise LookupError(f"no workspace {workspace_id}")


def get_workspace(conn: psycopg.Connection, workspace_id: UUID) -> Workspace | None:
    """The workspace ``workspace_id``, or None (unknown, or not visible to this login)."""
    with conn.cursor(row_factory=class_row(Workspace)) as cur:
        return cur.execute(
            """SELECT id, name, timezone, status, snapshots_enabled, currency, created_at
                 FROM workspaces WHERE id = %s""", (workspace_id,)).fetchone()


def upsert_user(conn: psycopg.Connection, *, user_id: str, display_name: str = "", email: str | None = None,
                status: str = "active", now: datetime) -> User:
    """Insert or update a user (the identity provider's id) and return it."""
    with conn.cursor(row_factory=class_row(User)) as cur:
        row = cur.execute(
            """INSERT INTO users (id, display_name, email, status, created_at) VALUES (%s, %s, %s, %s, %s)
               ON CONFLICT (id) DO UPDATE SET display_name = EXCLUDED.display_name, email = EXCLUDED.email,
                                              status = EXCLUDED.status
               RETURNING id, display_name, email, status, created_at""",
            (user_id, display_name, email, status, now)).fetchone()
    assert row is not None
    return row


def set_user_status(conn: psycopg.Connection, user_id: str, status: str) -> None:
    """Activate or deactivate a user; raises ``LookupError`` when there is no such user."""
    if conn.execute("UPDATE users SET status = %s WHERE id = %s", (status, user_id)).rowcount != 1:
        raise LookupError(f"no user {user_id!r}")


def add_member(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, roles: Sequence[str],
               now: datetime) -> Membership:
    """Make ``user_id`` a current member of the workspace with ``roles`` (rejoining reopens
    the membership with the new roles and join instant)."""
    with conn.cursor(row_factory=class_row(Membership)) as cur:
        row = cur.execute(
            """INSERT INTO workspace_memberships (workspace_id, user_id, roles, joined_at)
               VALUES (%s, %s, %s, %s)
               ON CONFLICT (workspace_id, user_id) DO UPDATE
                   SET roles = EXCLUDED.roles,
                       joined_at = CASE WHEN workspace_memberships.left_at IS NULL
                                        THEN workspace_memberships.joined_at ELSE EXCLUDED.joined_at END,
                       left_at = NULL
               RETURNING workspace_id, user_id, roles, joined_at, left_at""",
            (workspace_id, user_id, list(roles), now)).fetchone()
    assert row is not None
    return row


def leave_workspace(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, now: datetime) -> None:
    """Record that ``user_id`` left the workspace at ``now``; raises ``LookupError`` when
    they are not a current member."""
    updated = conn.execute(
        """UPDATE workspace_memberships SET left_at = %s
            WHERE workspace_id = %s AND user_id = %s AND left_at IS NULL""", (now, workspace_id, user_id)).rowcount
    if updated != 1:
        raise LookupError(f"{user_id!r} is not a current member of workspace {workspace_id}")


def member_with_user(conn: psycopg.Connection, *, workspace_id: UUID,
                     user_id: str) -> tuple[User | None, Membership | None]:
    """The user ``user_id`` and their membership of the workspace (either may be None)."""
    with conn.cursor(row_factory=class_row(User)) as cur:
        user = cur.execute("SELECT id, display_name, email, status, created_at FROM users WHERE id = %s",
                           (user_id,)).fetchone()
    with conn.cursor(row_factory=class_row(Membership)) as cur:
        membership = cur.execute(
            """SELECT workspace_id, user_id, roles, joined_at, left_at FROM workspace_memberships
                WHERE workspace_id = %s AND user_id = %s""", (workspace_id, user_id)).fetchone()
    return user, membership
