"""Request-scoped state for Powertools resolvers answering requests on several threads.

Powertools' REST resolver keeps the event it answers on its router *class*
(``BaseRouter.current_event = ...``, the same for ``lambda_context``) and hands every
included router to the last resolver built (``include_router`` sets
``router.api_resolver``, and merges that resolver's request context into the new one).
In a Lambda execution environment, which answers one request at a time, that is
harmless. ``serve`` answers requests at once on several threads of one process, each
with its own resolver: there one thread's request could be routed with another thread's
event -- another caller, another workspace -- or find its request context cleared by
the other's end.

:class:`RequestScoped` keeps all three (the event, the Lambda context and the request
context dict) in a :class:`contextvars.ContextVar` set for each request, which it resolves
in a copy of the caller's context: a request sees only its own, whatever runs beside it,
and a resolver called while another answers (the console calling the API) leaves the
caller's state as it was. This module imports nothing of Timekeeper, so every layer may
use it.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _State:
    """One request's state: Powertools' proxy event, the Lambda context and the request
    context dict (``app.context``: route, arguments, the built request, dependencies)."""

    lambda_context: Any
    event: Any = None
    context: dict[str, Any] = field(default_factory=dict)


class RequestScoped:
    """A mixin for a Powertools resolver (``class R(RequestScoped, APIGatewayRestResolver)``)
    whose ``current_event``, ``lambda_context`` and ``context`` belong to the request being
    answered (see the module docstring). :attr:`app_context` holds what every request's
    context starts with (``append_context`` outside a request adds to it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: What every request's context starts with.
        self.app_context: dict[str, Any] = {}
        #: The state of the request this resolver answers in the current context (unset
        #: outside one: another resolver's request, the console calling the API, is not it).
        self._state: contextvars.ContextVar[_State] = contextvars.ContextVar(f"timekeeper_request_{id(self)}")
        super().__init__(*args, **kwargs)

    def include_router(self, router: Any, prefix: str | None = None) -> None:
        """``include_router`` without merging in the request context of the resolver that
        included ``router`` before (another execution environment's)."""
        kept = dict(self.app_context)
        super().include_router(router, prefix)  # type: ignore[misc]
        self.app_context.clear()
        self.app_context.update(kept)

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Answer ``event`` in a copy of the caller's context with state of its own."""
        return contextvars.copy_context().run(self._resolve_scoped, event, context)

    def _resolve_scoped(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self._state.set(_State(lambda_context=context, context=dict(self.app_context)))
        return super().resolve(event, context)  # type: ignore[misc]

    def _to_proxy_event(self, event: dict[str, Any]) -> Any:
        proxy = super()._to_proxy_event(event)  # type: ignore[misc]
        state = self._state.get(None)
        if state is not None:
            state.event = proxy
        return proxy

    @property
    def current_event(self) -> Any:
        """The event of the request being answered (None outside a request)."""
        state = self._state.get(None)
        return state.event if state is not None else None

    @current_event.setter
    def current_event(self, value: Any) -> None:
        state = self._state.get(None)
        if state is not None:
            state.event = value

    @property
    def lambda_context(self) -> Any:
        """The Lambda context of the request being answered (None outside a request)."""
        state = self._state.get(None)
        return state.lambda_context if state is not None else None

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        state = self._state.get(None)
        if state is not None:
            state.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        """The request context of the request being answered; outside a request, what
        every request's context starts with (:attr:`app_context`)."""
        state = self._state.get(None)
        return state.context if state is not None else self.app_context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        state = self._state.get(None)
        if state is not None:
            state.context = value
        elif value is not self.app_context:
            self.app_context = value
