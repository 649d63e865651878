"""The API's database connection: the row-level security wall (DESIGN section 9).

The API does not use the owner connection the dispatchers and consumers use. Its
connection drops to the NOLOGIN role ``timekeeper_api`` for the whole session
(``SET ROLE``), and every transaction it opens while a workspace is entered starts with
:func:`timekeeper.db.set_tenant` (the transaction-local ``app.workspace_id``). The policies
of migration ``0003_row_level_security.sql`` then show that role the entered workspace's
rows only, and no rows at all outside :meth:`TenantConnection.entered` -- so a query that
forgot its ``workspace_id`` filter still cannot read or write another workspace.

The owner modules' service functions run their own ``with conn.transaction():`` blocks
(and publish after commit), so the tenant is applied per transaction by the connection
itself rather than by one outer transaction around the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from timekeeper.db.connection import set_tenant

#: The role the policies apply to (created by migration 0003).
API_ROLE = "timekeeper_api"


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


def connect_api(url: str, *, statement_timeout_ms: int | None = None, connect_timeout_s: int = 5,
                role: str = API_ROLE) -> TenantConnection:
    """Open the API's autocommit, dict-row :class:`TenantConnection` and ``SET ROLE`` to
    ``role`` for the session. The login user must be a member of ``role`` (migration 0003
    grants it to the migrating user). ``statement_timeout_ms`` in milliseconds.

    Raises ``psycopg.OperationalError`` when the server cannot be reached and
    ``psycopg.errors.InsufficientPrivilege`` when the user may not assume ``role``.
    """
    kwargs: dict[str, Any] = {"connect_timeout": connect_timeout_s, "application_name": "timekeeper-api"}
    if statement_timeout_ms:
        kwargs["options"] = f"-c statement_timeout={statement_timeout_ms}"
    conn = TenantConnection.connect(url, row_factory=dict_row, autocommit=True, **kwargs)
    try:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    except Exception:
        conn.close()
        raise
    return conn
