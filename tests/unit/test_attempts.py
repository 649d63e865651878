"""The one attempt rule alone (the pipelines' uses run on PostgreSQL in tests/integration:
consumer, dispatcher, exports, renders, snapshots)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from timekeeper.db.attempts import AttemptRule

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)


def test_the_attempt_rule():
    rule = AttemptRule(max_attempts=3, lease=timedelta(minutes=5))
    assert rule.held(NOW - timedelta(minutes=4, seconds=59), NOW) and not rule.held(NOW - timedelta(minutes=5), NOW)
    assert not rule.held(None, NOW) and not AttemptRule(max_attempts=3).held(NOW, NOW)
    assert not rule.exhausted(2) and rule.exhausted(3)
    assert not rule.final(attempt=2, receive_count=2) and rule.final(attempt=3) and rule.final(receive_count=3)
    assert not AttemptRule(lease=timedelta(seconds=1)).final(attempt=100)
    with pytest.raises(ValueError):
        AttemptRule(max_attempts=0)
    with pytest.raises(ValueError):
        AttemptRule(lease=timedelta(0))
