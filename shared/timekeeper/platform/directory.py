"""Workspaces, users and workspace memberships: the directory the access rule reads.

Rows come back as frozen dataclasses. Writers take a connection and run in the caller's
transaction (they never commit); readers work on any connection (the worker login sees
every workspace, the API's login only the entered one, through row-level security).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_one, fetch_rows
from timekeeper.schedules import service
from timekeeper.schedules.zones import is_canonical_zone
from timekeeper.settings import FILE_LOCALE_LANGUAGES

WORKSPACE_STATUSES = ("active", "loading", "disabled")
USER_STATUSES = ("active", "deactivated")

SQL = load_queries("timekeeper.platform", "directory.sql")


class InvalidTimezone(ValueError):
    """A workspace timezone that is not a canonical IANA zone name."""


class InvalidLocale(ValueError):
    """A workspace locale that names no locale CLDR (Babel's data) knows, or one of a
    language the deployment does not ship (:data:`timekeeper.settings.FILE_LOCALE_LANGUAGES`)."""


#: The locale of a workspace that chose none (the column's default).
DEFAULT_LOCALE = "en_US"


@dataclass(frozen=True)
class Workspace:
    """A tenant: ``timezone`` is an IANA name (where its months begin and end),
    ``status`` one of :data:`WORKSPACE_STATUSES`, ``snapshots_enabled`` its snapshot policy
    flag, ``currency`` an ISO 4217 code, ``created_at`` an aware UTC instant, ``locale``
    a CLDR locale identifier (``en_US``, ``de_DE``): how the files its recipients get
    write money (:mod:`timekeeper.reporting.presentation`)."""

    id: UUID
    name: str
    timezone: str
    status: str
    snapshots_enabled: bool
    currency: str
    created_at: datetime
    locale: str = DEFAULT_LOCALE

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


#: The form a workspace's locale is stored in (language, optional script, optional territory
#: or UN M.49 region): the same pattern the ``workspaces.locale`` column's check holds.
LOCALE_FORM = re.compile(r"[a-z]{2,3}(_[A-Z][a-z]{3})?(_([A-Z]{2}|[0-9]{3}))?")


def check_locale(name: str) -> str:
    """Return ``name`` when it is a CLDR locale identifier in the canonical form Babel
    gives (``language[_Script][_TERRITORY]``: ``en_US``, ``de_DE``, ``fr``) of a language
    the layer ships data for (:data:`timekeeper.settings.FILE_LOCALE_LANGUAGES`); raises
    :class:`InvalidLocale` otherwise (unknown to CLDR, written another way, such as
    ``de-DE``, or of another language)."""
    from babel import Locale, UnknownLocaleError

    try:
        parsed = Locale.parse(name)
    except (UnknownLocaleError, ValueError, TypeError):
        raise InvalidLocale(f"{name!r} is not a CLDR locale identifier") from None
    if str(parsed) != name:
        raise InvalidLocale(f"{name!r} is not a CLDR locale identifier (write it {str(parsed)!r})")
    if not LOCALE_FORM.fullmatch(name):
        raise InvalidLocale(f"{name!r} has a variant or extension; a workspace's locale is language[_Script]"
                            f"[_TERRITORY], e.g. en_US")
    if parsed.language not in FILE_LOCALE_LANGUAGES:
        raise InvalidLocale(f"{name!r} is of a language whose locale data the deployment does not ship; one of "
                            f"{', '.join(sorted(FILE_LOCALE_LANGUAGES))}")
    return name


def create_workspace(conn: psycopg.Connection, *, name: str, timezone: str, status: str = "active",
                     snapshots_enabled: bool = True, currency: str = "USD", locale: str = DEFAULT_LOCALE,
                     workspace_id: UUID | None = None, now: datetime) -> Workspace:
    """Insert a workspace and return it. Raises :class:`InvalidTimezone` for an unknown zone,
    :class:`InvalidLocale` for an unknown locale, ``psycopg.errors.CheckViolation`` for a
    status or currency the table refuses."""
    check_timezone(timezone)
    check_locale(locale)
    row = fetch_one(conn, SQL["insert_workspace"],
                    (workspace_id, name, timezone, status, snapshots_enabled, currency, locale, now), Workspace)
    assert row is not None
    return row


def set_workspace_locale(conn: psycopg.Connection, workspace_id: UUID, locale: str) -> None:
    """Set a workspace's locale (the files its recipients get write money by it). Raises
    :class:`InvalidLocale` for an unknown locale, ``LookupError`` when there is no such
    workspace."""
    check_locale(locale)
    if execute(conn, SQL["set_workspace_locale"], (locale, workspace_id)) != 1:
        raise LookupError(f"no workspace {workspace_id}")


def set_workspace_status(conn: psycopg.Connection, workspace_id: UUID, status: str) -> None:
    """Set a workspace's status (one of :data:`WORKSPACE_STATUSES`); raises ``LookupError``
    when there is no such workspace."""
    if execute(conn, SQL["set_workspace_status"], (status, workspace_id)) != 1:
        raise LookupError(f"no workspace {workspace_id}")


def set_notify_admins(conn: psycopg.Connection, workspace_id: UUID, value: bool) -> None:
    """The workspace's notice setting: whether its admins (``workspace:admin`` members) get
    a copy of every notice about its schedules (default False: the owner alone; ownerless
    schedules always reach the admins). Raises ``LookupError`` for an unknown workspace."""
    if execute(conn, SQL["set_notify_admins"], (value, workspace_id)) != 1:
        raise LookupError(f"no workspace {workspace_id}")


def get_workspace(conn: psycopg.Connection, workspace_id: UUID) -> Workspace | None:
    """The workspace ``workspace_id``, or None (unknown, or not visible to this login)."""
    return fetch_one(conn, SQL["get_workspace"], (workspace_id,), Workspace)


def workspace_timezone(conn: psycopg.Connection, workspace_id: UUID) -> str:
    """The IANA zone of ``workspace_id`` (the zone people's times are shown in), ``"UTC"``
    when the directory has no such workspace (or this login cannot see it)."""
    workspace = get_workspace(conn, workspace_id)
    return workspace.timezone if workspace is not None else "UTC"


def display_names(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, str]:
    """``{user id: display name}`` of the users among ``user_ids`` the directory knows by a
    name (the others are left out). Read-only, caller's transaction."""
    if not user_ids:
        return {}
    return {r["id"]: r["display_name"] for r in fetch_rows(conn, SQL["display_names"], {"ids": list(user_ids)})}


def upsert_user(conn: psycopg.Connection, *, user_id: str, display_name: str = "", email: str | None = None,
                status: str = "active", now: datetime) -> User:
    """Insert or update a user (the identity provider's id) and return it."""
    row = fetch_one(conn, SQL["upsert_user"], (user_id, display_name, email, status, now), User)
    assert row is not None
    return row


def set_user_status(conn: psycopg.Connection, user_id: str, status: str, *, now: datetime | None = None) -> None:
    """Activate or deactivate a user in the caller's transaction; raises ``LookupError``
    when there is no such user. Deactivating hands off the user's schedules in every
    workspace (:func:`timekeeper.schedules.service.pause_ownerless`: paused as ownerless,
    the admins told) at ``now`` (aware UTC), which a deactivation therefore needs
    (``ValueError`` without it)."""
    if status == "deactivated" and now is None:
        raise ValueError("deactivating a user hands off their schedules: pass now")
    if execute(conn, SQL["set_user_status"], (status, user_id)) != 1:
        raise LookupError(f"no user {user_id!r}")
    if status == "deactivated":
        assert now is not None
        service.pause_ownerless(conn, user_id=user_id, why="user_deactivated", now=now)


def add_member(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, roles: Sequence[str],
               now: datetime) -> Membership:
    """Make ``user_id`` a current member of the workspace with ``roles`` (rejoining reopens
    the membership with the new roles and join instant)."""
    row = fetch_one(conn, SQL["add_member"], (workspace_id, user_id, list(roles), now), Membership)
    assert row is not None
    return row


def leave_workspace(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, now: datetime) -> None:
    """Record that ``user_id`` left the workspace at ``now`` (aware UTC) and hand off their
    schedules there (paused as ownerless, the admins told); raises ``LookupError`` when
    they are not a current member."""
    updated = execute(conn, SQL["leave_workspace"], (now, workspace_id, user_id))
    if updated != 1:
        raise LookupError(f"{user_id!r} is not a current member of workspace {workspace_id}")
    service.pause_ownerless(conn, user_id=user_id, workspace_id=workspace_id, why="left_workspace", now=now)


def member_with_user(conn: psycopg.Connection, *, workspace_id: UUID,
                     user_id: str) -> tuple[User | None, Membership | None]:
    """The user ``user_id`` and their membership of the workspace (either may be None)."""
    user = fetch_one(conn, SQL["get_user"], (user_id,), User)
    membership = fetch_one(conn, SQL["get_membership"], (workspace_id, user_id), Membership)
    return user, membership


@dataclass(frozen=True)
class MemberContact:
    """A current member who is an active user, as people pick a recipient: their id, display
    name and address (None: none on file)."""

    user_id: str
    display_name: str
    email: str | None


def list_members(conn: psycopg.Connection, *, workspace_id: UUID, after: tuple[str, str] | None = None,
                 limit: int = 50) -> list[MemberContact]:
    """The workspace's current members who are active users, by display name then id: at
    most ``limit`` after the key ``(display_name, user_id)`` of the previous page's last row."""
    return fetch_all(conn, SQL["list_members"],
                     {"ws": workspace_id, "after_name": after[0] if after else None,
                      "after_id": after[1] if after else None, "limit": limit}, MemberContact)
