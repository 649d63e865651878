"""The local stack driven for simulated days (DESIGN sections 7 and 10): the real handlers,
moto queues with redrive, the embedded database; assertions on the final tables."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime

import pytest

from timekeeper.local.simulate import SimulationOptions, run_simulation


@pytest.fixture(scope="module")
def simulated(pg_server_url, monkeypatch_module):
    # 2027-03-06 .. 2027-03-26: New York's spring gap (03-14), a 3-hour dispatcher outage
    # (03-20), London's calendar coverage ending 03-21 and the fifth refusal (03-26).
    monkeypatch_module.setenv("DATABASE_URL", pg_server_url)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return run_simulation(SimulationOptions(start=date(2027, 3, 6), days=21, show_progress=False,
                                            database=f"tk_e2e_{worker}"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_every_run_finished_and_the_poison_message_is_dead_lettered(simulated):
    assert simulated.unfinished_runs == 0
    assert simulated.dlq_messages == {"accounting": 1}
    assert simulated.dispatcher_invocations + simulated.silent_minutes == 21 * 24 * 60


def test_the_spring_gap_shifts_new_yorks_0230_roll_to_0330(simulated):
    shifted = [r for r in simulated.dst_shifted if r["name"] == "ny.payables.roll"]
    assert len(shifted) == 1
    assert shifted[0]["occurrence_local"] == datetime(2027, 3, 14, 2, 30)
    assert shifted[0]["occurrence_at"] == datetime(2027, 3, 14, 7, 30, tzinfo=UTC)


def test_coverage_refusals_pause_londons_roll_on_the_fifth(simulated):
    refused = [r for r in simulated.runs_by_kind
               if r["work_kind"] == "batch.roll" and r["outcome_code"] == "outside_calendar_coverage"]
    assert sum(r["runs"] for r in refused) == 5
    (paused,) = simulated.paused
    assert (paused["name"], paused["pause_reason"], paused["consecutive_failures"]) == (
        "london.sales.roll", "consecutive_failures", 5)
    assert paused["paused_at"] == datetime(2027, 3, 26, 7, 0, tzinfo=UTC)  # 07:00 London = UTC in March
    assert simulated.notifications_sent == 1


def test_the_outage_backlog_is_collapsed_to_one_run_per_schedule(simulated):
    backlog = {r["name"]: r["skipped_backlog"] for r in simulated.backlog}
    # Lord Howe's hourly sweep at :40 missed 10:40 and 11:40 UTC and ran once for 12:40
    assert backlog == {"lord_howe.reconciliation.hourly": 2}


def test_succeeded_rolls_posted_their_closed_batches(simulated):
    assert simulated.posting_jobs.get("succeeded", 0) >= 3
    assert "failed" not in simulated.posting_jobs
