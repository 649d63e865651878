"""The API's Lambda edge: adapters created once per execution environment (DESIGN section 1).

The API's connection is its own (the login ``timekeeper_api``, row-level security; see
:mod:`timekeeper.api.db`), built from the same settings as :func:`timekeeper.runtime.database`;
publishers, the work-kind registry and the clock are the runtime's.
"""

from __future__ import annotations

from functools import cache

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from timekeeper import clock, runtime
from timekeeper.api.app import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.db.connection import ConnectionProvider


@cache
def api_database() -> ConnectionProvider:
    """The execution environment's lazy API connection (recreated when broken)."""
    return ConnectionProvider(lambda: runtime.open_with_rotation(connect_api, login=API_ROLE),
                              max_idle_s=runtime.CONNECTION_MAX_IDLE_S)


def edge_adapters() -> ApiAdapters:
    """The adapters of a Lambda execution environment (or of the local stack's ``serve``)."""
    return ApiAdapters(connection=lambda: api_database().get(), publisher_for=runtime.publisher,
                       registry=runtime.registry, now=clock.now)


@cache
def lambda_app() -> APIGatewayRestResolver:
    """The resolver ``functions/api/handler.py`` serves, built on first use."""
    return create_app(edge_adapters())


def reset() -> None:
    """Forget the cached app and close the API connection (local stack and tests, after
    the environment changed); the runtime's own caches are reset by ``runtime.reset()``."""
    if api_database.cache_info().currsize:
        api_database().close()
    api_database.cache_clear()
    lambda_app.cache_clear()
