"""How a resource's routes are declared: one Powertools ``Router`` per resource module.

Every route module (:mod:`~timekeeper.api.schedule_routes`, :mod:`~timekeeper.api.queries`,
:mod:`~timekeeper.api.reports`, :mod:`~timekeeper.api.exports`,
:mod:`~timekeeper.api.delivery_routes`, :mod:`~timekeeper.api.snapshot_routes`, ...) holds a
module-level ``router = ApiRouter()`` whose handlers are module-level functions;
:func:`timekeeper.api.app.create_app` includes every router (``include_router``). A handler
takes what it uses as parameters, each a Powertools dependency: the caller's scope
(:func:`timekeeper.api.scope.scope_for`, :func:`timekeeper.api.scope.staff_scope`) and,
for the clients the edge gives (renderer, files, links, queues), the app's
:class:`ApiContext` (:data:`Api`). The resolver puts the :class:`ApiContext` in the
request context (``app.context[CONTEXT_KEY]``) before routing, so a handler never reads
a closure local. Their OpenAPI responses come from :func:`timekeeper.api.errors.responses`.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, get_type_hints

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.request import Request

#: The OpenAPI security requirement of every authenticated route.
SECURITY_SCHEME = "authorizer"
SECURITY = [{SECURITY_SCHEME: []}]

#: The key of the :class:`ApiContext` in the resolver's request context (``app.context``).
CONTEXT_KEY = "timekeeper_api"


def idempotency_header(description: str) -> Header:
    """The ``Idempotency-Key`` header parameter (1-200 visible ASCII characters) of a route
    that takes one, documented by ``description``; the route binds it to the request with
    :meth:`timekeeper.api.scope.WorkspaceScope.claim_key`."""
    return Header(alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
                  description=description)


@dataclass(frozen=True)
class ApiContext:
    """What the app gives every request, built once by :func:`timekeeper.api.app.create_app`.

    * ``adapters`` -- the :class:`~timekeeper.api.app.ApiAdapters` of the edge (the
      connection, the clock, the renderer, files, links, queues);
    * ``publisher`` -- the owner-routed run publisher (Run now,
      :class:`~timekeeper.api.scope.OwnerRoutedPublisher`);
    * ``registry`` -- every owner's registered work kinds
      (:class:`~timekeeper.schedules.work.WorkKindRegistry`).
    """

    adapters: Any
    publisher: Any
    registry: Any


def api_context(request: Request) -> ApiContext:
    """The app's :class:`ApiContext` for ``request`` (a Powertools dependency); raises
    ``KeyError`` outside a request resolved by :class:`timekeeper.api.app.JsonApiResolver`."""
    return request.context[CONTEXT_KEY]


#: A handler parameter of this type gets the app's :class:`ApiContext`.
Api = Annotated[ApiContext, Depends(api_context)]

#: The attribute a route dependency's first check is kept in (:func:`checked_first`).
_FIRST_CHECK = "__checked_first__"


def checked_first(check: Callable[[Any, ApiContext], None]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a route dependency (e.g. :func:`timekeeper.api.scope.staff_scope`) whose role
    check the resolver asks before the request is validated: every route with a parameter
    depending on it answers ``check(identity, api_context)``'s refusal (a 403
    :class:`~timekeeper.api.errors.ApiError`) right after authentication and the membership
    rule, whatever its body, parameters or path (:class:`timekeeper.api.app.JsonApiResolver`);
    the dependency still checks the same when it runs."""

    def mark(dependency: Callable[..., Any]) -> Callable[..., Any]:
        setattr(dependency, _FIRST_CHECK, check)
        return dependency

    return mark


def _first_check(func: Callable[..., Any]) -> Callable[[Any, ApiContext], None] | None:
    """The check of the :func:`checked_first` dependency a route function's parameters name, or None."""
    for hint in get_type_hints(func, include_extras=True).values():
        for meta in getattr(hint, "__metadata__", ()):
            check = getattr(getattr(meta, "dependency", None), _FIRST_CHECK, None)
            if isinstance(meta, Depends) and check is not None:
                return check
    return None


@dataclass(frozen=True)
class Operation:
    """One route as declared: ``method`` and Powertools ``rule`` (``/schedules/<schedule_id>``),
    whether it takes no credentials (``public``: ``security`` empty or none), the query
    parameter names its handler declares (an unknown one is a 422) and the role check its
    scope asks before validation (``first_check``)."""

    method: str
    rule: str
    public: bool
    query_names: frozenset[str]
    #: The role check asked before validation (:func:`checked_first`), or None.
    first_check: Callable[[Any, ApiContext], None] | None = None

    @property
    def openapi_path(self) -> str:
        """The rule in OpenAPI form: ``/schedules/{schedule_id}``."""
        return re.sub(r"<([^/>]+)>", r"{\1}", self.rule)


def _query_names(func: Callable[..., Any]) -> frozenset[str]:
    """The query parameter names a route function declares (``Annotated[..., Query()]``)."""
    names = set()
    for name, hint in get_type_hints(func, include_extras=True).items():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Query):
                names.add(meta.alias or name)
    return frozenset(names)


_ROUTE_SIGNATURE = inspect.signature(Router.route)


class ApiRouter(Router):
    """A Powertools ``Router`` that also records each route as an :class:`Operation`
    (:attr:`operations`): a 405 names a rule's methods, an unknown query parameter is a
    422, and a request to any rule but the public ones is authenticated (and, for a route
    whose scope is :func:`checked_first`, its role checked) before its request is validated
    (:class:`timekeeper.api.app.JsonApiResolver`)."""

    def __init__(self) -> None:
        super().__init__()
        #: Every route of this router, in declaration order.
        self.operations: list[Operation] = []

    def route(self, rule: str, method: Any, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """``Router.route`` (same parameters), recording the route's :class:`Operation`."""
        bound = _ROUTE_SIGNATURE.bind(self, rule, method, *args, **kwargs)
        security = bound.arguments.get("security")
        methods = (method,) if isinstance(method, str) else tuple(method)
        register = super().route(rule, method, *args, **kwargs)

        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            names, check = _query_names(func), _first_check(func)
            self.operations.extend(Operation(m.upper(), rule, not security, names, check) for m in methods)
            return register(func)

        return decorator


def with_annotations(func: Callable[..., Any], **annotations: Any) -> Callable[..., Any]:
    """A copy of the module-level handler ``func`` whose parameters named in
    ``annotations`` have those annotations instead (e.g. a body type built from the app's
    registry): the one way a handler's declared types depend on the app."""
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__doc__, copy.__module__, copy.__qualname__ = func.__doc__, func.__module__, func.__qualname__
    unknown = set(annotations) - set(func.__annotations__)
    if unknown:
        raise ValueError(f"{func.__name__} has no parameters {sorted(unknown)}")
    copy.__annotations__ = {**func.__annotations__, **annotations}
    return copy


@dataclass
class RouteTable:
    """Every included router's :class:`Operation`, by rule: what the resolver checks
    before and around routing."""

    operations: list[Operation] = field(default_factory=list)

    def add(self, router: ApiRouter) -> None:
        """Take ``router``'s operations (call once per included router)."""
        self.operations.extend(router.operations)

    @property
    def methods_by_rule(self) -> dict[str, set[str]]:
        """Powertools rule -> the methods routed there."""
        out: dict[str, set[str]] = {}
        for op in self.operations:
            out.setdefault(op.rule, set()).add(op.method)
        return out

    @property
    def query_names(self) -> dict[tuple[str, str], frozenset[str]]:
        """(method, OpenAPI path) -> the query parameter names the route declares."""
        return {(op.method, op.openapi_path): op.query_names for op in self.operations}

    @property
    def first_checks(self) -> dict[tuple[str, str], Callable[[Any, ApiContext], None] | None]:
        """(method, Powertools rule) -> the role check asked before validation (None: none)."""
        return {(op.method, op.rule): op.first_check for op in self.operations}

    @property
    def public(self) -> set[tuple[str, str]]:
        """The (method, Powertools rule) pairs that take no credentials."""
        return {(op.method, op.rule) for op in self.operations if op.public}
