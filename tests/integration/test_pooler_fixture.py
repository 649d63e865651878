"""The test pooler itself: the PgBouncer that the pooler pass routes every database test
through must keep serving for a whole run, however much it logs."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.conftest import _free_port, start_pgbouncer

#: What an unread pipe holds on Linux; PgBouncer blocked once its stderr had this much.
PIPE_CAPACITY = 64 * 1024


@pytest.fixture
def pgbouncer_workdir():
    if not (shutil.which("pgbouncer") or Path("/usr/sbin/pgbouncer").exists()):
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    workdir = Path(tempfile.mkdtemp(prefix="tk-pgbouncer-"))
    yield workdir
    shutil.rmtree(workdir, ignore_errors=True)


def test_the_test_pgbouncer_keeps_serving_after_more_log_than_a_pipe_holds(direct_server_url, pgbouncer_workdir):
    # Given a PgBouncer started the way the fixtures start it
    pooled, process = start_pgbouncer(direct_server_url, pgbouncer_workdir)
    log = pgbouncer_workdir / "pgbouncer.log"
    try:
        # When clients connect and disconnect until it has logged twice what a pipe holds
        # (a login and a close line each; PgBouncer writes each line to stderr as well)
        connections = 0
        while log.stat().st_size < 2 * PIPE_CAPACITY:
            # Then every connection is served (a blocked PgBouncer times it out)
            with psycopg.connect(pooled, connect_timeout=30) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            connections += 1
            assert connections < 5000, "PgBouncer stopped logging connections"
        assert process.poll() is None
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a blocked PgBouncer does not get to its SIGTERM handler
            process.kill()
            process.wait(timeout=10)


def test_the_test_pgbouncer_starts_on_another_port_when_its_free_port_was_taken_meanwhile(
        direct_server_url, pgbouncer_workdir, monkeypatch):
    # Given a free port that another process takes before PgBouncer listens on it
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        chosen = iter([port])
        monkeypatch.setitem(start_pgbouncer.__globals__, "_free_port", lambda: next(chosen, None) or _free_port())
        # When the fixtures start PgBouncer
        pooled, process = start_pgbouncer(direct_server_url, pgbouncer_workdir)
        try:
            # Then it serves on another port
            assert psycopg.conninfo.conninfo_to_dict(pooled)["port"] != str(port)
            with psycopg.connect(pooled, connect_timeout=5) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            assert process.poll() is None
        finally:
            process.terminate()
            process.wait(timeout=10)
