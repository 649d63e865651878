"""The API's database connection: the row-level security wall.

The API does not use the workers' connection. It logs in as its own role
``timekeeper_api`` (or its rotation twin ``timekeeper_api_clone``, a member of it), and
every transaction it opens while a workspace is entered starts with
:func:`timekeeper.db.set_tenant` (the transaction-local ``app.workspace_id``). The policies
of migration ``0003_row_level_security.sql`` then show that login the entered workspace's
rows only, and no rows at all outside :meth:`TenantConnection.entered` -- so a query that
forgot its ``workspace_id`` filter still cannot read or write another workspace. The wall
is the login itself, not a session ``SET ROLE`` a statement could undo (``RESET ROLE``),
and nothing session-level is set, so RDS Proxy never pins the connection.

The owner modules' service functions run their own ``with conn.transaction():`` blocks
(and publish after commit), so the tenant is applied per transaction by the connection
itself rather than by one outer transaction around the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from timekeeper.db.connection import API_LOGIN, set_tenant
from timekeeper.db.logins import current_login
from timekeeper.topology import CONNECT_TIMEOUT_S

#: The role the policies apply to (created by migration 0003, a login since 0005).
API_ROLE = API_LOGIN


class UnwalledLogin(RuntimeError):
    """The API was given a login row-level security does not wall (the owner, a superuser,
    a role with BYPASSRLS, or one that is not a member of ``timekeeper_api``)."""


class TenantConnection(psycopg.Connection):
    """An autocommit psycopg connection that enters a workspace in every top-level
    transaction it opens inside :meth:`entered` (nested ones are savepoints of it)."""

    _workspace_id: UUID | None = None

    @contextmanager
    def entered(self, workspace_id: UUID) -> Iterator[TenantConnection]:
        """Within the block, every top-level transaction applies ``workspace_id``.

        Not re-entrant across workspaces: raises ``RuntimeError`` when another workspace
        is already entered on this connection.
        """
        if self._workspace_id is not None and self._workspace_id != workspace_id:
            raise RuntimeError("another workspace is entered on this connection")
        previous = self._workspace_id
        self._workspace_id = workspace_id
        try:
            yield self
        finally:
            self._workspace_id = previous

    @contextmanager
    def transaction(self, savepoint_name: str | None = None, force_rollback: bool = False):
        """``psycopg.Connection.transaction`` that sets ``app.workspace_id`` (transaction-local)
        first thing in a top-level transaction while a workspace is entered."""
        top_level = self.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with super().transaction(savepoint_name, force_rollback) as tx:
            if top_level and self._workspace_id is not None:
                set_tenant(self, self._workspace_id)
            yield tx


def connect_api(url: str, *, connect_timeout_s: int = CONNECT_TIMEOUT_S) -> TenantConnection:
    """Open the API's autocommit, dict-row :class:`TenantConnection` as the login ``url``
    names (``timekeeper_api`` or its twin; see :func:`timekeeper.db.connection.login_url`).

    Checks once that the login is walled: a member of ``timekeeper_api`` that is neither
    superuser nor BYPASSRLS nor the owner of ``schedules``. Raises :class:`UnwalledLogin`
    otherwise, ``psycopg.OperationalError`` when the server cannot be reached or refuses
    the login. The statement timeout is the login role's (no startup options).
    """
    conn = TenantConnection.connect(url, row_factory=dict_row, autocommit=True, connect_timeout=connect_timeout_s,
                                    application_name="timekeeper-api")
    try:
        login = current_login(conn, walled_role=API_ROLE)
        if login is None or not login.under_policies:
            raise UnwalledLogin(f"the API may not log in as {login and login.name!r}: row-level security "
                                f"would not apply; use {API_ROLE}")
    except Exception:
        conn.close()
        raise
    return conn
