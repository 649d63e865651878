"""The simulation's fast-forward over idle minutes changes nothing but the wall time: the
same two days with the dispatcher invoked at every minute and with idle minutes skipped
leave the same runs (occurrence, the instant a flexible window gave it, state, outcome,
skipped backlog) and the same schedules (their timing: a windowed one's given instant)."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from timekeeper.local.simulate import Outage, SimulationOptions, run_simulation

RUNS = """SELECT s.name, r.occurrence_at, r.due_at, r.trigger, r.state, r.outcome_code, r.skipped_backlog
            FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id ORDER BY 1, 2"""
SCHEDULES = """SELECT name, status, next_due_at, consecutive_failures FROM schedules ORDER BY name"""
# Snapshot runs, and separately their publication minutes: which run of one admission batch
# publishes first follows the runs' random ids, so only the set of minutes is compared.
SNAPSHOTS = """SELECT w.name, r.snapshot_type, r.period, r.version, r.state, r.skip_reason
                 FROM snapshot_runs r JOIN workspaces w ON w.id = r.workspace_id ORDER BY 1, 2, 3, 4"""
PUBLISHED = """SELECT published_at FROM snapshot_runs WHERE published_at IS NOT NULL ORDER BY 1"""


def _simulate(pg_server_url: str, *, fast_forward: bool):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    # 2027-03-20 .. 03-21: the 3-hour outage (10:00 UTC) and London's calendar coverage end
    options = SimulationOptions(start=date(2027, 3, 20), days=2, show_progress=False, fast_forward=fast_forward,
                                outages=(Outage(datetime(2027, 3, 20, 10, 0, tzinfo=UTC), timedelta(hours=3)),),
                                database=f"tk_ff_{worker}_{int(fast_forward)}")
    result = run_simulation(options)
    with psycopg.connect(result.database_url) as conn:
        return result, conn.execute(RUNS).fetchall(), (conn.execute(SCHEDULES).fetchall(),
                                                       conn.execute(SNAPSHOTS).fetchall(),
                                                       conn.execute(PUBLISHED).fetchall())


@pytest.fixture
def database_url_env(pg_server_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", pg_server_url)
    return pg_server_url


def test_fast_forward_leaves_the_same_runs_as_a_pass_every_minute(database_url_env):
    # Given the same two simulated days, once with a dispatcher pass every minute
    every, every_runs, every_schedules = _simulate(database_url_env, fast_forward=False)
    # When they are simulated again with idle minutes fast-forwarded
    fast, fast_runs, fast_schedules = _simulate(database_url_env, fast_forward=True)
    # Then the runs, the schedules and the snapshot runs are the same, with far fewer
    # dispatcher invocations
    assert fast_runs == every_runs and len(fast_runs) > 50
    assert any(row[2] is not None for row in fast_runs)  # the sample's windowed sweep ran at its given instants
    assert fast_schedules == every_schedules
    assert len(fast_schedules[1]) > 50 and any(row[4] == "published" for row in fast_schedules[1])
    assert every.idle_minutes == 0 and every.dispatcher_invocations == 2 * 1440 - 180
    assert fast.dispatcher_invocations + fast.idle_minutes == every.dispatcher_invocations
    assert fast.dispatcher_invocations < every.dispatcher_invocations / 5
