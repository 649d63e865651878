"""Timekeeper's HTTP API: schedule owners' actions and saved queries (tenant scope, row-level security).

* :mod:`timekeeper.api.app` -- the routes (Powertools REST resolver with pydantic
  validation) and the OpenAPI document generated from the same models.
* :mod:`timekeeper.api.queries` -- the saved-query routes and the catalogue (token roles,
  then the access rule of :mod:`timekeeper.platform.access`).
* :mod:`timekeeper.api.auth` -- identity from the API Gateway authorizer's claims; roles.
* :mod:`timekeeper.api.scope` -- the tenant rule in one place.
* :mod:`timekeeper.api.db` -- the API's connection under row-level security.
* :mod:`timekeeper.api.errors` -- the machine-readable error bodies.
* :mod:`timekeeper.api.snapshot_routes` -- staff snapshot requests and the period listings.

The API's Lambda edge (its adapters once per execution environment) is
:mod:`timekeeper.edge.api`.
"""

from timekeeper.api.app import ApiAdapters, create_app, openapi_document, write_openapi

__all__ = ["ApiAdapters", "create_app", "openapi_document", "write_openapi"]
