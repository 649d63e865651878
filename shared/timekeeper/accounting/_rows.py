"""Value helpers of the accounting repositories: money amounts and the acting instant.

Rows into dataclasses are :mod:`timekeeper.db.rows`' (shared with the schedules module).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal


def money(amount: Decimal | int | str) -> Decimal:
    """Return ``amount`` as a Decimal with at most two places; raises ``ValueError`` otherwise."""
    value = Decimal(str(amount))
    if not value.is_finite() or value.normalize().as_tuple().exponent < -2:  # type: ignore[operator]
        raise ValueError(f"amount {amount!r} must be a finite number with at most two decimal places")
    return value


def utc_now(now: datetime | None) -> datetime:
    """Return ``now`` (which must be aware) or, when None, the wall clock in UTC."""
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("instants must be aware UTC datetimes")
    return now
