"""The schedules list's one-line rule (the console's ``rule_text``)."""

from __future__ import annotations

import pytest

from timekeeper.console.display import rule_text


@pytest.mark.parametrize(("recurrence", "text"), [
    ({"cron": "30 2 * * *", "timezone": "UTC"}, "cron 30 2 * * *"),
    ({"interval": {"minutes": 15}}, "every 15 minutes"),
    ({"interval": {"hours": 1}}, "every 1 hour"),
    ({"calendar": {"frequency": "daily", "times": ["09:00", "18:00"]}}, "daily at 09:00, 18:00"),
    ({"calendar": {"frequency": "monthly", "month_day": 1, "times": ["00:10"]}}, "monthly on day 1 at 00:10"),
    ({"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]}},
     "monthly on the last day at 18:00"),
])
def test_a_rule_reads_as_one_line(recurrence, text):
    assert rule_text(recurrence) == text
