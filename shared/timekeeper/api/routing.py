"""How a resource's routes are registered: one signature, ``register(routes: Routes)``.

Every route module (:mod:`~timekeeper.api.schedule_routes`, :mod:`~timekeeper.api.queries`,
:mod:`~timekeeper.api.reports`, :mod:`~timekeeper.api.exports`,
:mod:`~timekeeper.api.delivery_routes`, :mod:`~timekeeper.api.snapshot_routes`) exposes a
``register(routes)`` that declares its routes with :meth:`Routes.route` and takes what it
needs from the one :class:`Routes` value :func:`timekeeper.api.app.create_app` builds:
the scope dependency (:func:`timekeeper.api.scope.scope_dependency`), the adapters, and
the resolver for a resource's own exception handlers. Their OpenAPI responses come from
:func:`timekeeper.api.errors.responses`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from aws_lambda_powertools.event_handler.openapi.params import Header, Query

#: The OpenAPI security requirement of every authenticated route.
SECURITY_SCHEME = "authorizer"
SECURITY = [{SECURITY_SCHEME: []}]


def idempotency_header(description: str) -> Header:
    """The ``Idempotency-Key`` header parameter (1-200 visible ASCII characters) of a route
    that takes one, documented by ``description``; the route binds it to the request with
    :meth:`timekeeper.api.scope.WorkspaceScope.claim_key`."""
    return Header(alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
                  description=description)


def _query_names(func: Callable[..., Any]) -> frozenset[str]:
    """The query parameter names a route function declares (``Annotated[..., Query()]``)."""
    names = set()
    for name, hint in get_type_hints(func, include_extras=True).items():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Query):
                names.add(meta.alias or name)
    return frozenset(names)


@dataclass
class Routes:
    """What a resource's ``register(routes)`` gets.

    * ``app`` -- the resolver (for a resource's own ``exception_handler``);
    * ``adapters`` -- the :class:`~timekeeper.api.app.ApiAdapters` of the edge;
    * ``scope_for(permission)`` -- the scope dependency of a token role;
    * ``publisher`` -- the owner-routed run publisher (Run now);
    * :meth:`route` -- ``app.route`` that also records each rule's methods (a 405 names
      them), each operation's query parameter names (an unknown one is a 422) and the
      rules that take no credentials (``security=[]`` or none: every other path is
      authenticated before its request is validated).
    """

    app: Any
    adapters: Any
    scope_for: Callable[[str], Callable[..., Any]]
    publisher: Any
    #: Every owner module's registered work kinds (the ``POST /schedules`` body's enums).
    kinds_by_owner: dict[str, list[str]] = field(default_factory=dict)
    methods_by_rule: dict[str, set[str]] = field(default_factory=dict)
    query_names: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    public: set[tuple[str, str]] = field(default_factory=set)

    def route(self, method: str, rule: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``method rule`` (a Powertools rule, ``/schedules/<schedule_id>``) with
        the resolver's keyword arguments (``operation_id``, ``responses``, ...)."""
        self.methods_by_rule.setdefault(rule, set()).add(method)
        if not kwargs.get("security"):
            self.public.add((method, rule))
        register = self.app.route(rule, method, **kwargs)

        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            self.query_names[(method, re.sub(r"<([^/>]+)>", r"{\1}", rule))] = _query_names(func)
            return register(func)

        return decorator
