"""Timekeeper's HTTP API: the owner modules' routes under the tenant rule (row-level security).

* :mod:`timekeeper.api.app` -- the resolver (JSON only, 404 / 405, parameter checks) and
  the OpenAPI document generated from the route models.
* :mod:`timekeeper.api.routing` -- how a resource declares its routes (a module-level
  Powertools router, :class:`~timekeeper.api.routing.ApiRouter`, and the app's request
  context, :data:`~timekeeper.api.routing.Api`) and the ``Idempotency-Key`` header.
* one module per resource, each with its ``router``: :mod:`~timekeeper.api.schedule_routes`,
  :mod:`~timekeeper.api.queries` (saved queries, the catalogue), :mod:`~timekeeper.api.reports`
  (reports, renders), :mod:`~timekeeper.api.exports`, :mod:`~timekeeper.api.delivery_routes`
  (query schedules), :mod:`~timekeeper.api.download_routes` (download links),
  :mod:`~timekeeper.api.snapshot_routes`, :mod:`~timekeeper.api.people_routes`,
  :mod:`~timekeeper.api.opt_out_routes`, :mod:`~timekeeper.api.suppression_routes`,
  :mod:`~timekeeper.api.operations_routes`, :mod:`~timekeeper.api.session_routes`.
* :mod:`timekeeper.api.scope` -- the tenant rule, the access rule's refusals and where a
  request's transaction opens, in one place; Idempotency-Keys bound to their request.
* :mod:`timekeeper.api.auth` -- identity from the API Gateway authorizer's claims; roles.
* :mod:`timekeeper.api.db` -- the API's connection under row-level security.
* :mod:`timekeeper.api.errors` -- the machine-readable error bodies and their OpenAPI responses.

The API's Lambda edge (its adapters once per execution environment) is
:mod:`timekeeper.edge.api`.
"""

from timekeeper.api.app import ApiAdapters, create_app, openapi_document

__all__ = ["ApiAdapters", "create_app", "openapi_document"]
