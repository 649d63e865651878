"""The failover campaign: the database server restarts several times in a row under a
dispatcher and consumer workload, as an Aurora failover (the writer lost, the reader
promoted, RDS Proxy reconnecting its pool) looks to the product, and nothing is lost.

Each restart cuts every connection the product holds inside one of its transactions (the
crash point reached first at or after the restart's instant), and the next one comes
before the product has settled what the previous one interrupted. The campaign's audit
then asserts exactly one run per due occurrence, every run settled, no run executed
concurrently, every delivery sent once and empty queues.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from timekeeper.local import embedded
from timekeeper.local.chaos import injector
from timekeeper.local.chaos.records import ChaosOptions

#: The restarts: one a simulated minute (a dispatcher pass) from 09:00 of the campaign's
#: day, when the load's half-hourly sweeps and hourly deliveries are due, so they come a
#: few wall-clock seconds apart, each before the work the previous one interrupted settled.
RESTARTS = 3
FIRST_RESTART = timedelta(hours=9)


@pytest.fixture
def own_server(monkeypatch, tmp_path):
    """An embedded server of the campaign's own (in ``tmp_path``), which it may restart
    without breaking the connections of the session's other tests; stopped afterwards."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("TIMEKEEPER_HOME", str(tmp_path))
    yield tmp_path / "pgdata"
    embedded.release_server(tmp_path / "pgdata")


def _restarts_in_a_row(options: ChaosOptions) -> list[datetime]:
    first = datetime.combine(options.start, datetime.min.time(), tzinfo=UTC) + FIRST_RESTART
    return [first + timedelta(minutes=i) for i in range(RESTARTS)]


def test_restarts_in_a_row_lose_nothing(own_server, monkeypatch):
    # Given a campaign with no fault but database restarts, at instants in a row
    monkeypatch.setattr(injector, "restart_instants", _restarts_in_a_row)
    options = ChaosOptions(days=1, seed=21, quiet_hours=1, load=1, crash_rate=0, duplicate_rate=0, refuse_rate=0,
                           disconnect_rate=0, stall_rate=0, ses_throttle_rate=0, ses_reject_rate=0, cut_rate=0,
                           api_requests=0, db_restarts=RESTARTS, show_progress=False)

    # When the product runs its day of schedules through them
    result = injector.run_chaos(options)

    # Then every restart was made, in order, inside a transaction of the product
    assert result.skipped_restarts == 0, result.notes
    assert result.fault_totals() == {"db_restart": RESTARTS}
    instants = [at for at, _, _ in result.restarts]
    assert instants == sorted(instants) and len(instants) == RESTARTS
    assert instants[0] >= _restarts_in_a_row(options)[0]
    assert instants[-1] - instants[0] <= timedelta(minutes=30), instants
    # And the audit holds: one run per due occurrence, every run settled, no lost outcome
    assert [check.failures for check in result.checks if not check.held] == []
    checked = {check.name: check.checked for check in result.checks}
    assert checked["every due occurrence has exactly one run (or is counted as skipped backlog)"] > 100
    assert checked["every run is terminal (or explained)"] > 100
    assert checked["delivery messages sent once per (run, recipient) (twice only in the documented window)"] > 0
