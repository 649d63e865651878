"""Fixtures of the fault tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def fault_db(conn):
    """The module's database emptied of schedules and runs, with a ``fault_effects`` table
    (one row per committed handler effect) for the fault tests' work kinds."""
    conn.execute("CREATE TABLE IF NOT EXISTS fault_effects (run_id uuid NOT NULL)")
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, fault_effects CASCADE")
    return conn
