"""The console's pages, one module per group of pages, each with its Powertools
``Router`` (:data:`ROUTERS`, in the order the console includes them)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.pages import (
    actions,
    admin,
    audit,
    claim_weights,
    closures,
    dead_letters,
    deliveries,
    delivery_authoring,
    errors,
    notices,
    operations,
    queries,
    reports,
    runs,
    schedule_authoring,
    schedules,
    session,
    settings,
    snapshot_ranges,
    snapshots,
    static,
)

#: Every page group's router. :mod:`~timekeeper.console.pages.actions` comes last: its
#: ``POST /console/<kind>/<id>/<action>`` would otherwise answer the schedule page's own
#: three-segment POST routes (Powertools tries routes with parameters in the order they
#: were added).
ROUTERS: tuple[Router, ...] = (static.router, session.router, schedule_authoring.router, schedules.router,
                               deliveries.router, delivery_authoring.router, closures.router, snapshot_ranges.router,
                               snapshots.router, operations.router, claim_weights.router, dead_letters.router,
                               runs.router, notices.router, admin.router, settings.router, audit.router,
                               queries.router, reports.router, errors.router, actions.router)
