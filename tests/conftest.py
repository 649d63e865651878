"""Shared fixtures: one PostgreSQL server per test session (embedded unless DATABASE_URL),
a fresh migrated database per test module, moto for AWS, and event factories.

With ``TIMEKEEPER_TEST_POOLER=pgbouncer`` every database test connects through a local
PgBouncer, which (like RDS Proxy) refuses connection startup options and hands out server
connections per client session; ``.ci/run`` runs the database tests that way as a pass of
its own. The ``pooled_server_url`` fixture starts the same pooler for the tests that must
always go through it.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from hypothesis import settings as hypothesis_settings

from timekeeper.db.connection import LOGIN_ROLES, connect
from timekeeper.db.migrate import apply_migrations
from timekeeper.local import embedded

#: Property tests: random by default (a run may find a new case; hypothesis keeps it in
#: .hypothesis for the next run), the same examples every time with the ``ci`` profile, which
#: .ci/run selects, so a CI run is repeatable and a differential test's rare find is not a
#: red build nobody can reproduce (run without the profile to search further).
#: No profile has hypothesis' per-example deadline (200 ms): on a busy machine an example
#: that is slow once fails the run as "unreliable test timings" though nothing is wrong, and
#: the tests time nothing (performance is benchmarks/' concern).
hypothesis_settings.register_profile("default", hypothesis_settings.get_profile("default"), deadline=None)
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
hypothesis_settings.load_profile(os.environ.get("TIMEKEEPER_HYPOTHESIS_PROFILE", "default"))

#: The environment variable that routes the database tests through a pooler.
POOLER_VARIABLE = "TIMEKEEPER_TEST_POOLER"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_pgbouncer(server_url: str, workdir: Path) -> tuple[str, subprocess.Popen]:
    """Start a PgBouncer in front of ``server_url``'s server; return the URL of the same
    database through it and the process (the caller terminates it).

    Session pooling (one server connection per client session, reset with DISCARD ALL on
    release), every database of the server reachable, no ``ignore_startup_parameters``: a
    client sending ``options`` is refused as RDS Proxy refuses it. Trust authentication,
    like the embedded server, for the server's user and the Timekeeper logins. Run as root,
    PgBouncer drops to the user owning the server's socket directory (or ``postgres``). The
    port is a free one; when another process takes it before PgBouncer listens (a busy
    machine's other tests open connections meanwhile), PgBouncer exits and is started again
    on another, :data:`PGBOUNCER_STARTS` times at most. Raises ``RuntimeError`` when it
    does not accept connections then, or within :data:`PGBOUNCER_START_S` seconds of a start.
    """
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    workdir.mkdir(parents=True, exist_ok=True)
    users = {info.get("user") or "postgres", "postgres", *LOGIN_ROLES}
    (workdir / "users.txt").write_text("".join(f'"{u}" ""\n' for u in sorted(users)))
    command, user = [binary], None
    if os.geteuid() == 0:
        # The user that runs the server can reach its socket directory.
        host = info.get("host") or ""
        socket_owner = pwd.getpwuid(Path(host).stat().st_uid).pw_name if host.startswith("/") else None
        user = socket_owner if socket_owner not in (None, "root") else next(
            (u for u in ("postgres", "nobody") if _user_exists(u)), None)
        if user is None:
            raise RuntimeError("PgBouncer refuses to run as root and no postgres/nobody user exists")
        command += ["-u", user]
    for start in range(1, PGBOUNCER_STARTS + 1):
        port = _free_port()
        _write_pgbouncer_ini(workdir, info, port)
        if user is not None:
            shutil.chown(workdir, user)
            for child in workdir.iterdir():
                shutil.chown(child, user)
            workdir.chmod(0o755)
        pooled = psycopg.conninfo.make_conninfo(server_url, host="127.0.0.1", port=str(port))
        process = _launch_pgbouncer(command, workdir)
        if _accepts(pooled, process):
            return pooled, process
        exited = process.poll() is not None
        process.terminate()
        process.wait(timeout=10)
        if not exited or start == PGBOUNCER_STARTS:
            log, stderr = workdir / "pgbouncer.log", workdir / "pgbouncer.stderr"
            tail = (log if log.exists() else stderr).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"PgBouncer did not start: {tail}")
    raise AssertionError("unreachable")


#: How often :func:`start_pgbouncer` tries a free port, and how long one start may take to
#: accept connections (seconds: generous, for a busy machine).
PGBOUNCER_STARTS = 5
PGBOUNCER_START_S = 30


def _write_pgbouncer_ini(workdir: Path, info: dict, port: int) -> None:
    backend = f"host={info.get('host') or 'localhost'} port={info.get('port') or 5432}"
    (workdir / "pgbouncer.ini").write_text(f"""[databases]
* = {backend}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / 'users.txt'}
pool_mode = session
server_reset_query = DISCARD ALL
max_client_conn = 400
default_pool_size = 40
server_idle_timeout = 5
logfile = {workdir / 'pgbouncer.log'}
""")


def _launch_pgbouncer(command: list[str], workdir: Path) -> subprocess.Popen:
    # PgBouncer run in the foreground writes every log line to stderr as well as to its
    # logfile, and blocks (its one thread, so every client and server connection with it)
    # when stderr cannot take more. A pipe nobody reads fills after 64 KiB of log, a few
    # dozen databases' worth: stderr goes to a file.
    with (workdir / "pgbouncer.stderr").open("wb") as stderr:
        return subprocess.Popen([*command, str(workdir / "pgbouncer.ini")], stdout=subprocess.DEVNULL,
                                stderr=stderr)


def _accepts(pooled: str, process: subprocess.Popen) -> bool:
    """Whether the PgBouncer ``process`` accepts a connection to ``pooled`` within
    :data:`PGBOUNCER_START_S` seconds (False at once when it exits: what answered on its
    port then was another process's listener)."""
    deadline = time.monotonic() + PGBOUNCER_START_S
    while True:
        try:
            with psycopg.connect(pooled, connect_timeout=5):
                return process.poll() is None
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="session")
def direct_server_url(tmp_path_factory) -> str:
    """URL of the PostgreSQL server itself (never through a pooler)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    # One data directory shared by all xdist workers of this session.
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return embedded.server_url(root / "pgdata")


@pytest.fixture(scope="session")
def pooled_server_url(direct_server_url) -> str:
    """The server through this worker's PgBouncer (skips when PgBouncer is not installed;
    ``.ci/run`` installs it)."""
    if not (shutil.which("pgbouncer") or Path("/usr/sbin/pgbouncer").exists()):
        if os.environ.get(POOLER_VARIABLE):
            pytest.fail(f"{POOLER_VARIABLE} is set but pgbouncer is not installed")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    # Not under pytest's private temporary folder: PgBouncer runs as another user.
    workdir = Path(tempfile.mkdtemp(prefix="tk-pgbouncer-"))
    url, process = start_pgbouncer(direct_server_url, workdir)
    yield url
    process.terminate()
    process.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server_url(request) -> str:
    """URL of the server every test module creates its database on: through the pooler
    when ``TIMEKEEPER_TEST_POOLER=pgbouncer``, directly otherwise."""
    pooler = os.environ.get(POOLER_VARIABLE, "")
    if pooler and pooler != "pgbouncer":
        raise pytest.UsageError(f"{POOLER_VARIABLE}={pooler!r}: the only pooler supported is pgbouncer")
    return request.getfixturevalue("pooled_server_url" if pooler else "direct_server_url")


@pytest.fixture(scope="module")
def db_url(pg_server_url, request) -> str:
    """A freshly migrated database for this test module (the schema reset per module)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    digest = hashlib.sha1(request.module.__name__.encode()).hexdigest()[:10]
    name = f"tk_{worker}_{digest}"
    url = embedded.create_database(pg_server_url, name)
    with psycopg.connect(url) as conn:
        apply_migrations(conn)
    yield url
    embedded.drop_database(pg_server_url, name)


@pytest.fixture
def conn(db_url):
    """A dict-row connection to the module's database, closed after the test."""
    c = connect(db_url)
    yield c
    c.close()


@pytest.fixture
def utc():
    """Build an aware UTC datetime: ``utc(2027, 3, 14, 7, 30)``."""
    return lambda *parts: datetime(*parts, tzinfo=UTC)
