"""Signing in and out: the development sign-in (local stack), the deployed OpenID Connect
sign-in (:mod:`timekeeper.console.sign_in`: the authorization-code flow with PKCE, whose
ID token maps to the claims the API's authorizer gives the API), and sign-out, which ends
the session on the server first."""

from __future__ import annotations

import uuid
from http import HTTPStatus
from urllib.parse import quote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, public
from timekeeper.console.paths import PREFIX, next_page
from timekeeper.console.sessions import DEV_ROLES, SESSION_MAX_AGE_S, Session
from timekeeper.console.sign_in import (
    FLOW_COOKIE,
    FLOW_MAX_AGE_S,
    Identity,
    IdentityProvider,
    SignInRefused,
    authorization_url,
    check_callback,
    finish,
    new_flow,
)
from timekeeper.observability import logger

router = Router()


def provider(ctx: Request) -> IdentityProvider | None:
    """The deployment's identity provider (None: the development sign-in or none).
    Raises :class:`SignInRefused` when it cannot be reached."""
    if ctx.settings.dev_sign_in or ctx.settings.identity_provider is None:
        return None
    return ctx.settings.identity_provider()


def sign_in_refused(ctx: Request, reason: str, status: int = HTTPStatus.FORBIDDEN) -> Response:
    """The sign-in page saying why a sign-in was refused (``reason``), with status ``status``;
    logged."""
    logger.info("console sign-in refused", extra={"reason": reason})
    return ctx.page("sign_in.html", status, dev=False, samples=(), roles=DEV_ROLES, problem=f"Sign-in refused: "
                    f"{reason}.", retry=True)


@router.get(f"{PREFIX}/sign-in")
@public
def sign_in_form(ctx: Request) -> Response:
    """``GET /console/sign-in``: the development sign-in's form, or, deployed, a redirect to
    the identity provider with a new flow cookie (a 502 page when it cannot be reached)."""
    try:
        issuer = provider(ctx)
    except SignInRefused as refused:
        return sign_in_refused(ctx, refused.reason, HTTPStatus.BAD_GATEWAY)
    asked = next_page(ctx.params.get("next"))
    if issuer is None:
        return ctx.page("sign_in.html", dev=ctx.settings.dev_sign_in, samples=ctx.settings.samples, roles=DEV_ROLES,
                        next=asked)
    flow = new_flow(asked or "")
    return ctx.redirect(authorization_url(issuer, flow), external=True,
                        cookie=ctx.cookie_header(ctx.console.flows.issue(flow), max_age=FLOW_MAX_AGE_S,
                                                 name=FLOW_COOKIE))


def session_of(identity: Identity) -> Session:
    """A new session for a verified ``identity``. Raises :class:`SignInRefused` when its
    workspace is not a workspace id (a UUID) or its user id is one the API refuses
    (a NUL, more than 200 characters)."""
    try:
        workspace = str(uuid.UUID(identity.workspace_id))
    except ValueError:
        raise SignInRefused("the ID token's workspace claim is not a workspace id") from None
    if "\x00" in identity.user_id or len(identity.user_id) > 200:
        raise SignInRefused("the ID token's user claim is not a user id")
    return Session(user_id=identity.user_id, workspace_id=workspace, roles=identity.roles)


@router.get(f"{PREFIX}/callback")
@public
def callback(ctx: Request) -> Response:
    """``GET /console/callback``: the identity provider's redirect: check the flow, exchange
    the code, verify the ID token, set the session cookie and go to the page asked for (a
    403 sign-in page with the reason otherwise)."""
    params = ctx.params
    try:
        issuer = provider(ctx)
        if issuer is None:
            return ctx.page("error.html", HTTPStatus.NOT_FOUND, title="Not found",
                            message="This console has no identity provider.")
        flow = ctx.console.flows.read(ctx.cookie(FLOW_COOKIE))
        code = check_callback(flow, params)
        assert flow is not None  # check_callback refuses a callback without its flow
        session = session_of(finish(issuer, flow, code))
    except SignInRefused as refused:
        response = sign_in_refused(ctx, refused.reason)
        response.cookies.append(ctx.cookie_header("", max_age=0, name=FLOW_COOKIE))
        return response
    return ctx.redirect(next_page(flow.next) or f"{PREFIX}/schedules", cookies=(
        ctx.cookie_header(ctx.console.sessions.issue(session), max_age=SESSION_MAX_AGE_S),
        ctx.cookie_header("", max_age=0, name=FLOW_COOKIE)))


@router.get(f"{PREFIX}/signed-out")
@public
def signed_out(ctx: Request) -> Response:
    """``GET /console/signed-out``: where a deployed sign-out ends."""
    return ctx.page("sign_in.html", dev=False, samples=(), roles=DEV_ROLES, signed_out=True, retry=True)


@router.post(f"{PREFIX}/sign-in")
@public
def sign_in(ctx: Request) -> Response:
    """``POST /console/sign-in``: the development sign-in (a 404 page in a deployment): a
    session for the typed or picked person."""
    if not ctx.settings.dev_sign_in:
        return ctx.page("error.html", HTTPStatus.NOT_FOUND, title="Not found",
                        message="Sign in through your identity provider.")
    ctx.fields = ctx.form()
    user, workspace = ctx.fields.get("user_id", "").strip(), ctx.fields.get("workspace_id", "").strip()
    roles = ",".join(r for r in DEV_ROLES if ctx.fields.get(f"role:{r}"))
    try:
        workspace = str(uuid.UUID(workspace))
    except ValueError:
        workspace = ""
    asked = next_page(ctx.fields.get("next"))
    if not user or "\x00" in user or len(user) > 200 or not workspace:
        return ctx.page("sign_in.html", HTTPStatus.UNPROCESSABLE_ENTITY, dev=True, samples=ctx.settings.samples,
                        roles=DEV_ROLES, problem="Give a user id and a workspace UUID.", next=asked)
    session = Session(user_id=user, workspace_id=workspace, roles=roles or "schedules:read")
    return ctx.redirect(asked or f"{PREFIX}/schedules", cookie=ctx.cookie_header(ctx.console.sessions.issue(session),
                                                                                 max_age=SESSION_MAX_AGE_S))


@router.post(f"{PREFIX}/sign-out")
@checked_post
def sign_out(ctx: Request) -> Response:
    """``POST /console/sign-out``: sign the session out on the server, clear its cookie, and go
    to the identity provider's logout (or the signed-out page)."""
    cleared = ctx.cookie_header("", max_age=0)
    # The session ends on the server first: a copy of the cookie is refused everywhere.
    revoked = ctx.api().call("POST", f"/sessions/{quote(ctx.session.sid, safe='')}/revocation")
    if revoked.status != 200:
        response = ctx.api_error(revoked)
        response.cookies.append(cleared)
        return response
    if ctx.settings.dev_sign_in:
        return ctx.redirect(f"{PREFIX}/sign-in", cookie=cleared)
    try:
        issuer = provider(ctx)
    except SignInRefused:
        issuer = None  # the session is cleared all the same
    if issuer is not None and issuer.logout_url:
        return ctx.redirect(issuer.logout_url, cookie=cleared, external=True)
    return ctx.redirect(f"{PREFIX}/signed-out", cookie=cleared)
