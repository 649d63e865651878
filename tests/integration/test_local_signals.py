"""The local commands stop what they started when interrupted: SIGTERM or SIGINT stops
the embedded PostgreSQL (exit code 143 / 130, one line, no traceback), and a run killed
outright (SIGKILL, nothing can clean up) does not make later runs leave the server running.

Each test starts its own embedded server in a fresh ``TIMEKEEPER_HOME``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


def _start(home: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(TIMEKEEPER_HOME=str(home), PYTHONPATH=f"{REPO / 'shared'}{os.pathsep}{REPO}")
    return subprocess.Popen([sys.executable, "-m", "timekeeper", *args], cwd=home, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _server_pid(home: Path, process: subprocess.Popen, *, marker: str, timeout_s: float = 180) -> int:
    """Wait until the embedded server runs and ``marker`` shows the command is at work;
    return the server's process id."""
    pid_file = home / "pgdata" / "postmaster.pid"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if pid_file.exists() and marker_seen(home, marker):
            return int(pid_file.read_text().splitlines()[0])
        time.sleep(0.2)
    process.kill()
    pytest.fail(f"the command did not get to work within {timeout_s}s")


def marker_seen(home: Path, marker: str) -> bool:
    """Whether the database ``marker`` exists on the embedded server (by its data folder)."""
    import psycopg

    pid_file = home / "pgdata" / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    if len(lines) < 8 or "ready" not in lines[7]:
        return False
    url = f"host={lines[4]} port={lines[3]} user=postgres dbname=postgres"
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (marker,)).fetchone() is not None
    except psycopg.Error:
        return False


def _gone(pid: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def started_servers():
    """Server process ids a test saw; any still running afterwards (a failed test) is stopped."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGTERM)


@pytest.mark.parametrize(("command", "signum", "marker"), [
    (("simulate", "--no-progress", "--every-minute"), signal.SIGTERM, "timekeeper_sim"),
    (("serve", "--port", "0", "--quiet"), signal.SIGINT, "timekeeper_serve"),
])
def test_an_interrupted_command_stops_the_embedded_server(tmp_path, command, signum, marker, started_servers):
    # Given a running command on its own embedded server
    process = _start(tmp_path, *command)
    server = _server_pid(tmp_path, process, marker=marker)
    started_servers.append(server)
    time.sleep(1)
    # When it is sent the signal
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    # Then it exits 128 + the signal number with one line and no traceback, and the server is stopped
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert f"stopped by {signum.name}" in err
    assert _gone(server), "the embedded PostgreSQL is still running"


def test_a_killed_run_does_not_make_later_runs_leak_the_server(tmp_path, started_servers):
    # Given a simulation killed outright: its server keeps running and its pid stays listed
    killed = _start(tmp_path, "simulate", "--no-progress", "--every-minute")
    server = _server_pid(tmp_path, killed, marker="timekeeper_sim")
    started_servers.append(server)
    killed.kill()
    killed.wait(30)
    assert psutil.pid_exists(server)
    # When a later simulation runs to its end
    later = _start(tmp_path, "simulate", "--no-progress", "--days", "1", "--no-outage", "--poison", "0")
    out, err = later.communicate(timeout=300)
    # Then it succeeded and left no server running
    assert later.returncode == 0, err
    assert "Simulated 1 days" in out
    assert _gone(server), "the embedded PostgreSQL was left running"
