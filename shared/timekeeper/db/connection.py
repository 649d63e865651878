"""Connections: one autocommit psycopg connection, explicit ``with conn.transaction():`` blocks.

In Lambda one connection lives per execution environment and is recreated when broken or
long idle (:class:`ConnectionProvider`); locally and in tests the same class wraps a URL.

Connections send no startup ``options`` (RDS Proxy refuses them, and so does the PgBouncer
the tests can run through): the statement and idle-in-transaction timeouts belong to the
login roles (migration ``0005_login_roles.sql``), so every connection of a login gets them
without a session ``SET`` (which would also pin an RDS Proxy connection).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from timekeeper.topology import API_LOGIN, CONNECT_TIMEOUT_S, WORKER_LOGIN

#: The workers' login (dispatchers, consumers) and the API's login, each with the name the
#: alternating-users rotation gives its twin (``<name>_clone``): migration 0005 creates all
#: four, the twins as members of the originals, with the same timeouts.
LOGIN_ROLES = (WORKER_LOGIN, f"{WORKER_LOGIN}_clone", API_LOGIN, f"{API_LOGIN}_clone")


def connect(url: str, *, connect_timeout_s: int = CONNECT_TIMEOUT_S,
            application_name: str = "timekeeper") -> psycopg.Connection[dict[str, Any]]:
    """Open an autocommit connection whose rows are dicts; transactions are explicit
    ``with conn.transaction():`` blocks.

    Only ``connect_timeout`` (seconds, client side) and ``application_name`` are sent;
    the statement timeout comes from the login role. Raises ``psycopg.OperationalError``
    when the server (or the pooler) cannot be reached or refuses the login.
    """
    return psycopg.connect(url, row_factory=dict_row, autocommit=True, connect_timeout=connect_timeout_s,
                           application_name=application_name)


#: How the Lambda edge verifies the database server: TLS required, the certificate must chain
#: to a trusted root and name the host connected to.
SSL_MODE = "verify-full"


def tls_parameters(root_cert: str | None = None) -> dict[str, str]:
    """The libpq parameters that verify the server: ``sslmode`` :data:`SSL_MODE` and
    ``sslrootcert`` ``root_cert`` (a PEM bundle's path; None: certifi's bundle of Mozilla's
    roots, where the Amazon roots that RDS Proxy's certificates chain to are). A server
    whose certificate does not chain to the bundle, or names another host, is refused
    (``psycopg.OperationalError`` at connect)."""
    if root_cert is None:
        import certifi

        root_cert = certifi.where()
    return {"sslmode": SSL_MODE, "sslrootcert": root_cert}


def login_url(url: str, login: str) -> str:
    """Return ``url`` with its user replaced by ``login`` (its password, if any, dropped):
    how the local stack and the tests reach the login roles of a server that trusts local
    connections. Raises ``ValueError`` when ``login`` is not one of :data:`LOGIN_ROLES`."""
    if login not in LOGIN_ROLES:
        raise ValueError(f"{login!r} is not a Timekeeper login role")
    info = conninfo_to_dict(url)
    info.pop("password", None)
    info["user"] = login
    return make_conninfo(**info)


def set_login_password(conn: psycopg.Connection, login: str, password: str) -> None:
    """Give ``login`` (one of :data:`LOGIN_ROLES`) the password ``password``, as the role that
    owns the schema (the migration function, holding the owner's credentials, does this
    from each login's secret). Idempotent. Raises ``ValueError`` for another role name or
    an empty password, ``psycopg.errors.InsufficientPrivilege`` without CREATEROLE."""
    if login not in LOGIN_ROLES:
        raise ValueError(f"{login!r} is not a Timekeeper login role")
    if not password:
        raise ValueError(f"empty password for {login}")
    # ALTER ROLE takes no bound parameters: the literal is quoted by psycopg.
    conn.execute(sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(
        sql.Identifier(login), sql.Literal(password)))


def set_tenant(conn: psycopg.Connection, workspace_id: UUID | str | None) -> None:
    """Enter a workspace for the current transaction (``app.workspace_id``, transaction-local).

    Row-level security policies and scoped queries read this setting.
    """
    conn.execute("SELECT set_config('app.workspace_id', %s, true)",
                 (str(workspace_id) if workspace_id else "",))


#: The role user-defined queries run as (migration 0025): SELECT on the query catalogue's
#: tables, each walled to the transaction's workspace by row-level security.
QUERY_ROLE = "timekeeper_query"


@contextmanager
def walled_query(conn: psycopg.Connection, workspace_id: UUID) -> Iterator[None]:
    """Run the block's statements as :data:`QUERY_ROLE` with ``workspace_id`` entered, inside
    the transaction open on ``conn`` (``RuntimeError`` when none is): row-level security
    then shows that workspace's rows of the catalogue's tables and nothing else, whatever
    the statement's own filters say, and no other table can be read or written. The role
    and the workspace are transaction-local ``set_config`` values (no session ``SET``: RDS
    Proxy does not pin); the role is given back when the block ends, the workspace setting
    when the transaction ends. Any other workspace the transaction had entered is replaced
    for the rest of it.

    The workers' login and the owner may switch to the role (members of it); a compiled
    query is one SELECT built from the catalogue's identifiers with bound values, so the
    statement itself cannot switch back.
    """
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("walled_query needs an open transaction")
    set_tenant(conn, workspace_id)
    conn.execute("SELECT set_config('role', %s, true)", (QUERY_ROLE,))
    try:
        yield
    finally:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
            conn.execute("SELECT set_config('role', 'none', true)")


class ConnectionProvider:
    """One lazy connection per execution environment, recreated when broken, closed, or
    idle longer than ``max_idle_s`` seconds (None: never), so a connection the proxy's
    idle client timeout closed while the environment was frozen is not used again.

    ``factory`` is a zero-argument callable returning a fresh connection (e.g. a
    ``functools.partial`` of :func:`connect`); ``monotonic`` is the clock (seconds).
    """

    def __init__(self, factory: Callable[[], psycopg.Connection], *, max_idle_s: float | None = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self._factory = factory
        self._conn: psycopg.Connection | None = None
        self._max_idle_s = max_idle_s
        self._monotonic = monotonic
        self._handed_out_at = 0.0

    def get(self) -> psycopg.Connection:
        """Return a usable idle connection, reconnecting if the previous one broke or idled
        past ``max_idle_s``."""
        conn = self._conn
        now = self._monotonic()
        stale = self._max_idle_s is not None and now - self._handed_out_at > self._max_idle_s
        if conn is not None and not conn.closed and stale:
            conn.close()
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = self._factory()
        elif conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        self._handed_out_at = now
        return conn

    def exchange(self, conn: psycopg.Connection | None) -> psycopg.Connection | None:
        """Hold ``conn`` from now on (None: open a new one at the next :meth:`get`) and return
        the connection held until now, without closing either. The local fault campaign
        uses it to run a second execution environment beside a stalled one."""
        previous, self._conn = self._conn, conn
        return previous

    def current(self) -> psycopg.Connection | None:
        """The connection held now (None before the first :meth:`get`), without checking it."""
        return self._conn

    def close(self) -> None:
        """Close the held connection, if any."""
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

