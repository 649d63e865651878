"""Value helpers of the accounting repositories: money amounts and the acting instant.

Rows into dataclasses are :mod:`timekeeper.db.rows`' (shared with the schedules module).
Domain code never reads a clock: the acting instant is always passed in by the caller
(the edge reads :func:`timekeeper.clock.now` once per event).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal


def money(amount: Decimal | int | str) -> Decimal:
    """Return ``amount`` as a Decimal with at most two places; raises ``ValueError`` otherwise."""
    value = Decimal(str(amount))
    if not value.is_finite() or value.normalize().as_tuple().exponent < -2:  # type: ignore[operator]
        raise ValueError(f"amount {amount!r} must be a finite number with at most two decimal places")
    return value


def instant(now: datetime) -> datetime:
    """Return ``now`` unchanged; raises ``ValueError`` when it is naive (an instant must be aware)."""
    if now.tzinfo is None:
        raise ValueError("instants must be aware UTC datetimes")
    return now
