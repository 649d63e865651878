"""What row-level security makes of a connection's login (the API refuses an unwalled one)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from timekeeper.db.rows import fetch_one
from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.db", "logins.sql")


@dataclass(frozen=True)
class Login:
    """The session's login ``name``: ``bypass`` (superuser or BYPASSRLS), ``walled`` (a
    member of the walled role asked about) and ``owner`` (may act as the owner of the
    schedules table, to whom no policy applies)."""

    name: str
    bypass: bool
    walled: bool
    owner: bool

    @property
    def under_policies(self) -> bool:
        """Whether row-level security applies to everything this login does."""
        return self.walled and not self.bypass and not self.owner


def current_login(conn: psycopg.Connection, *, walled_role: str) -> Login | None:
    """The :class:`Login` of ``conn``'s session, judged against ``walled_role`` (None when
    the login is not in ``pg_roles``, which a live session's is)."""
    return fetch_one(conn, SQL["current_login"], {"walled_role": walled_role}, Login)
