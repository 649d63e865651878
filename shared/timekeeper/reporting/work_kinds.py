"""The queries owner module's work kinds: scheduled delivery (``queries.deliver``).

Registered under owner ``"queries"`` as a ``leased`` kind (its effects leave the database:
files in S3, messages through Communications, each keyed by the run) with a staleness
bound of :data:`~timekeeper.reporting.delivery.STALENESS`: a delivery claimed that late is
skipped stale rather than sent. The handler needs ``ctx.services["delivery"]`` (a
:class:`~timekeeper.reporting.delivery.DeliveryServices`, built by
:func:`timekeeper.edge.runs.delivery_services`).
"""

from __future__ import annotations

from timekeeper.reporting.delivery import DELIVER, OWNER, STALENESS, deliver
from timekeeper.schedules.work import WorkKindRegistry

#: The route that alone creates, changes and runs ``queries.deliver`` schedules: a delivery
#: needs its settings (source, format, recipients, templates), which the generic schedules
#: routes do not take, so they refuse this kind (422 naming ``work_kind``).
ROUTE = "/query-schedules"


def register(registry: WorkKindRegistry) -> None:
    """Register ``queries.deliver`` under owner ``"queries"`` with its own :data:`ROUTE`;
    raises ``ValueError`` when it is registered already."""
    registry.register(OWNER, DELIVER, deliver, staleness=STALENESS, leased=True, route=ROUTE)


__all__ = ["DELIVER", "OWNER", "ROUTE", "register"]
