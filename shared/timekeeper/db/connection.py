"""Connections and the unit of work (cosmicpython's pattern over one psycopg connection).

In Lambda one connection lives per execution environment and is recreated when broken
(:class:`ConnectionProvider`); locally and in tests the same class wraps a URL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row


def connect(url: str, *, statement_timeout_ms: int | None = None, connect_timeout_s: int = 5,
            application_name: str = "timekeeper") -> psycopg.Connection[dict[str, Any]]:
    """Open an autocommit connection whose rows are dicts; transactions are explicit
    ``with conn.transaction():`` blocks (or a :class:`UnitOfWork`).

    ``statement_timeout_ms`` (milliseconds) should sit below the calling function's
    timeout. Raises ``psycopg.OperationalError`` when the server cannot be reached.
    """
    options = f"-c statement_timeout={statement_timeout_ms}" if statement_timeout_ms else None
    kwargs: dict[str, Any] = {"connect_timeout": connect_timeout_s, "application_name": application_name}
    if options:
        kwargs["options"] = options
    return psycopg.connect(url, row_factory=dict_row, autocommit=True, **kwargs)


def set_tenant(conn: psycopg.Connection, workspace_id: UUID | str | None) -> None:
    """Enter a workspace for the current transaction (``app.workspace_id``, transaction-local).

    Row-level security policies and scoped queries read this setting (DESIGN section 9).
    """
    conn.execute("SELECT set_config('app.workspace_id', %s, true)",
                 (str(workspace_id) if workspace_id else "",))


class ConnectionProvider:
    """One lazy connection per execution environment, recreated when broken or closed.

    ``factory`` is a zero-argument callable returning a fresh connection (e.g. a
    ``functools.partial`` of :func:`connect`).
    """

    def __init__(self, factory: Callable[[], psycopg.Connection]):
        self._factory = factory
        self._conn: psycopg.Connection | None = None

    def get(self) -> psycopg.Connection:
        """Return a usable idle connection, reconnecting if the previous one broke."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = self._factory()
        elif conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        return conn

    def close(self) -> None:
        """Close the held connection, if any."""
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None


class UnitOfWork:
    """One transaction on one connection: commit explicitly, roll back on error.

    Use as ``with UnitOfWork(conn) as uow: ...; uow.commit()``. Leaving the block without
    ``commit()`` (or with an exception) rolls back. Callbacks registered with
    :meth:`after_commit` run after a successful commit, in order (publishing to SQS
    happens there, never inside the transaction); an exception raised by a callback
    propagates after the others ran. The connection must be in autocommit mode.
    """

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self._after_commit: list[Callable[[], None]] = []
        self.committed = False

    def __enter__(self) -> UnitOfWork:
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise RuntimeError("UnitOfWork needs an idle autocommit connection")
        self.conn.execute("BEGIN")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.committed and not self.conn.closed:
            self.conn.execute("ROLLBACK")

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        """Run one statement in this transaction and return its cursor."""
        return self.conn.execute(query, params)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Register ``callback`` to run once this unit of work has committed."""
        self._after_commit.append(callback)

    def commit(self) -> None:
        """Commit, then run the after-commit callbacks (each runs even if one fails)."""
        self.conn.execute("COMMIT")
        self.committed = True
        callbacks, self._after_commit = self._after_commit, []
        first_error: BaseException | None = None
        for callback in callbacks:
            try:
                callback()
            except Exception as error:  # noqa: BLE001 - re-raised below after the rest ran
                first_error = first_error or error
        if first_error is not None:
            raise first_error
