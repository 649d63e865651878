"""The JWT authorizer's execution environment (``functions/authorizer``): one
:class:`~timekeeper.api.authorizer.JwtAuthorizer` (and its JWKS cache) per environment,
configured from the ``JWT_*`` variables (:mod:`timekeeper.settings`). It calls no AWS
service and opens no database connection; it runs outside the VPC, so the issuer's JWKS
document is reached over the internet."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from timekeeper.api.authorizer import AuthorizerSettings, JwtAuthorizer, Unauthorized
from timekeeper.observability import logger


@cache
def jwt_authorizer() -> JwtAuthorizer:
    """The environment's authorizer; raises ``pydantic.ValidationError`` at cold start when
    the issuer or the audience is unset or an algorithm is not accepted."""
    return JwtAuthorizer(AuthorizerSettings.from_environment(os.environ))


def authorize(event: dict[str, Any]) -> dict[str, Any]:
    """The REQUEST authorizer answer for ``event`` (see
    :meth:`~timekeeper.api.authorizer.JwtAuthorizer.authorize`). Raises
    :class:`~timekeeper.api.authorizer.Unauthorized` (API Gateway: 401) after logging the
    reason (never the token)."""
    try:
        return jwt_authorizer().authorize(event)
    except Unauthorized as refused:
        logger.info("request refused by the authorizer", extra={"reason": refused.reason})
        raise


def reset() -> None:
    """Forget the authorizer (tests, after the environment changed)."""
    jwt_authorizer.cache_clear()
