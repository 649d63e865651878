"""Rows into dataclasses (:mod:`timekeeper.db.rows`): instants in UTC, fields exactly the columns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest

from timekeeper.db.rows import from_row


@dataclass(frozen=True, slots=True)
class Row:
    at: datetime
    local: datetime
    name: str


def test_an_aware_instant_comes_back_in_utc_and_a_naive_wall_time_as_it_was():
    # Given a row read under a session zone two hours east of UTC
    at = datetime(2027, 3, 14, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    local = datetime(2027, 3, 14, 2, 30)
    # When it becomes a dataclass
    row = from_row(Row, {"at": at, "local": local, "name": "x"})
    # Then the instant is the same one, in UTC, and the local wall time is untouched
    assert row.at == at and row.at.tzinfo is UTC and row.at.hour == 7
    assert row.local == local and row.local.tzinfo is None


def test_a_column_the_dataclass_does_not_name_is_refused():
    with pytest.raises(TypeError):
        from_row(Row, {"at": datetime.now(UTC), "local": datetime(2027, 1, 1), "name": "x", "extra": 1})
