"""The queries owner module's work kinds: scheduled delivery (``queries.deliver``).

Registered under owner ``"queries"`` as a ``leased`` kind (its effects leave the database:
files in S3, messages through Communications, each keyed by the run) with a staleness
bound of :data:`~timekeeper.queries.delivery.STALENESS`: a delivery claimed that late is
skipped stale rather than sent. The handler needs ``ctx.services["delivery"]`` (a
:class:`~timekeeper.queries.delivery.DeliveryServices`, built by
:func:`timekeeper.runtime.delivery_services`).
"""

from __future__ import annotations

from timekeeper.queries.delivery import DELIVER, OWNER, STALENESS, deliver
from timekeeper.schedules.work import WorkKindRegistry


def register(registry: WorkKindRegistry) -> None:
    """Register ``queries.deliver`` under owner ``"queries"``; raises ``ValueError`` when it
    is registered already."""
    registry.register(OWNER, DELIVER, deliver, staleness=STALENESS, leased=True)


__all__ = ["DELIVER", "OWNER", "register"]
