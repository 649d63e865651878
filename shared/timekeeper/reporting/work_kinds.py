"""The queries owner module's work kinds: scheduled delivery (``queries.deliver``).

Registered under owner ``"queries"`` as a ``leased`` kind (its effects leave the database:
files in S3, messages through Communications, each keyed by the run) with a staleness
bound of :data:`~timekeeper.reporting.delivery.STALENESS`: a delivery claimed that late is
skipped stale rather than sent. The handler needs ``ctx.services["delivery"]`` (a
:class:`~timekeeper.reporting.delivery.DeliveryServices`): the kind declares the service
``delivery``, and the edge builds it for the queries consumer
(:func:`timekeeper.edge.runs.delivery_services`).
"""

from __future__ import annotations

from timekeeper.reporting.delivery import DELIVER, OWNER, STALENESS, check_time_budget, deliver
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import QUERIES

#: The route that alone creates, changes and runs ``queries.deliver`` schedules: a delivery
#: needs its settings (source, format, recipients, templates), which the generic schedules
#: routes do not take, so they refuse this kind (422 naming ``work_kind``).
ROUTE = "/query-schedules"
#: The service a delivery reads from ``ctx.services``: the journal connection, the files
#: bucket, the renderer, the mailer and the link signer.
DELIVERY_SERVICES = "delivery"


def register(registry: WorkKindRegistry, *, consumer_timeout_s: int = QUERIES.consumer.timeout_s) -> None:
    """Register ``queries.deliver`` under owner ``"queries"`` with its own :data:`ROUTE`;
    raises ``ValueError`` when it is registered already, or when a whole render poll and
    the most recipients would not fit in ``consumer_timeout_s`` (seconds; the topology's
    queries consumer by default: :func:`~timekeeper.reporting.delivery.check_time_budget`)."""
    check_time_budget(consumer_timeout_s)
    registry.register(OWNER, DELIVER, deliver, staleness=STALENESS, leased=True, route=ROUTE,
                      services=(DELIVERY_SERVICES,))


__all__ = ["DELIVER", "DELIVERY_SERVICES", "OWNER", "ROUTE", "register"]
