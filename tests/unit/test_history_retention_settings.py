"""The history retention settings refuse what the rule cannot honour."""

from __future__ import annotations

import pytest

from timekeeper.topology import HISTORY, HistoryRetention


def test_the_deployment_keeps_runs_and_events_90_days_and_exports_past_their_files():
    assert (HISTORY.runs_days, HISTORY.events_days, HISTORY.exports_days) == (90, 90, 35)
    # one pass retires up to 100,000 rows of a kind: a minute of the 100,000-runs-a-minute target
    assert HISTORY.batch_rows * HISTORY.max_batches_per_pass == 100_000


@pytest.mark.parametrize("values, field", [
    ({"runs_days": 0}, "runs_days"),
    ({"exports_days": 0}, "exports_days"),
    ({"failed_snapshot_rows_days": 0}, "failed_snapshot_rows_days"),
    ({"runs_days": 90, "events_days": 30}, "events_days"),
    ({"batch_rows": 0}, "batch_rows"),
    ({"batch_rows": 100_000}, "batch_rows"),
    ({"max_batches_per_pass": 0}, "batch"),
    ({"time_budget_s": 0}, "time budget"),
])
def test_a_retention_that_cannot_work_is_refused_naming_the_field(values, field):
    with pytest.raises(ValueError, match=field):
        HistoryRetention(**values)
