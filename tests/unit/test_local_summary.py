"""Pieces of the simulation summary: which local times a fall-back change repeats, and
how the kept database is opened."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from timekeeper.local.simulate import database_hint, is_repeated_local_time, repeated_local_times

NEW_YORK = ZoneInfo("America/New_York")


@pytest.mark.parametrize(("local", "repeated"), [
    (datetime(2027, 11, 7, 1, 30), True),    # 01:00-02:00 happens twice (EDT, then EST)
    (datetime(2027, 11, 7, 0, 59), False),
    (datetime(2027, 11, 7, 2, 0), False),
    (datetime(2027, 3, 14, 2, 30), False),   # the spring gap: never happens, not twice
    (datetime(2027, 6, 1, 1, 30), False),
])
def test_only_a_fall_back_overlap_repeats_a_local_time(local, repeated):
    assert is_repeated_local_time(local, NEW_YORK) is repeated


def test_repeated_local_times_counts_the_runs_of_each_schedule_and_local_time():
    # Given a fixed-time run in the overlap, an hourly rule's two runs there, and an ordinary run
    def run(name, local, at):
        return {"name": name, "timezone": "America/New_York", "occurrence_local": local, "occurrence_at": at,
                "state": "succeeded"}

    runs = [run("daily", datetime(2027, 11, 7, 1, 30), datetime(2027, 11, 7, 5, 30, tzinfo=UTC)),
            run("hourly", datetime(2027, 11, 7, 1, 0), datetime(2027, 11, 7, 5, 0, tzinfo=UTC)),
            run("hourly", datetime(2027, 11, 7, 1, 0), datetime(2027, 11, 7, 6, 0, tzinfo=UTC)),
            run("hourly", datetime(2027, 11, 7, 3, 0), datetime(2027, 11, 7, 8, 0, tzinfo=UTC))]
    # When the repeated local times are picked out
    rows = repeated_local_times(runs)
    # Then each schedule's repeated local time is one row with its first instant and run count
    assert [(r["name"], r["runs"], r["occurrence_at"].hour) for r in rows] == [("daily", 1, 5), ("hourly", 2, 5)]


def test_the_database_hint_is_a_command_that_opens_it():
    url = "user=postgres dbname=timekeeper_sim host=/srv/pgdata port=5432"
    assert database_hint(url, embedded=True).endswith("python3 -m timekeeper psql --database timekeeper_sim")
    assert database_hint(url, embedded=False) == f"Database kept for inspection: psql '{url}'"
