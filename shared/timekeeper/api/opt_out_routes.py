"""One-click opt-out of a query schedule's messages (RFC 8058), the owner's view of who
opted out, and re-subscribing (:mod:`timekeeper.reporting.opt_outs`); what SES suppressed
is :mod:`timekeeper.api.suppression_routes`.

Routes (:data:`router`):

* ``GET /opt-outs/{token}`` (public: the signed token in the message is the credential):
  an HTML page naming the schedule with a form that POSTs to the same address. It changes
  nothing: link scanners and prefetchers follow GET links.
* ``POST /opt-outs/{token}`` (public): records the opt-out and answers an HTML page. This
  is the URL of the message's ``List-Unsubscribe`` header: a mailbox provider's one-click
  request posts ``List-Unsubscribe=One-Click`` as a form (the one non-JSON body the API
  takes, and only here), the page's button posts the same. Repeating it changes nothing.
  An invalid token (tampered, another key, a download link, a delivery that does not
  exist) is a 403 page, an expired one a 410 page. A notice e-mail's token (object key
  ``opt-out:notices``) is served by the same two routes: the page names the workspace,
  the POST records the person's opt-out of its notice e-mails
  (:func:`timekeeper.reporting.opt_outs.record_notice_opt_out`); the person turns them
  back on, signed in, with ``POST /notices/mail``.
* ``GET /query-schedules/{id}/opt-outs`` (``queries:read``): the schedule's opt-outs.
* ``POST /query-schedules/{id}/opt-outs/{user_id}/invitation`` (``queries:write``, the
  owner's action): invite an opted-out recipient back; nothing is sent to them until they
  accept (404 when they have not opted out).
* ``POST /query-schedules/{id}/subscription`` (the role that reads the schedule's source:
  ``queries:read`` for a query, ``reports:read`` for a report, by the token and by the
  membership, as the recipients are resolved; the recipient's consent): the caller accepts
  the owner's invitation and receives the schedule's messages again (404 when the caller
  has not opted out, 409 ``not_invited`` without an invitation).
"""


from datetime import datetime
from html import escape
from http import HTTPStatus
from typing import Annotated, Any
from uuid import UUID

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import BaseModel, Field

from timekeeper.api import errors
from timekeeper.api.auth import OWN_NOTICES, QUERIES_READ, QUERIES_WRITE, REPORTS_READ
from timekeeper.api.errors import ApiError
from timekeeper.api.models import CanonicalUuid
from timekeeper.api.routing import SECURITY, Api, ApiContext, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for, workspace_unit
from timekeeper.platform import access
from timekeeper.platform.directory import get_workspace, workspace_timezone
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import opt_outs
from timekeeper.reporting.links import LinkExpired, LinkInvalid

#: The public opt-out route's path prefix (the resolver lets its one-click form body through).
OPT_OUT_PATH_PREFIX = "/opt-outs/"
NOT_INVITED = "not_invited"
_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           404: "No such query schedule, or no opt-out of this recipient",
           409: "The owner has not invited the recipient back", 410: "The link has expired",
           422: "Invalid input (the field and the reason)"}

#: The public routes' JSON errors: a path that names no route (e.g. a token that is not
#: one path segment), before the route runs.
_PATH_ERRORS = {404: "No such route (the token is not one path segment)",
                415: "The body is not application/x-www-form-urlencoded",
                422: "The body is not the one-click form List-Unsubscribe=One-Click (the field)"}


class OptOutOut(BaseModel):
    """A recipient's opt-out of a query schedule: when, from which run's message, and the
    owner's invitation back (null: none)."""

    user_id: str
    run_id: CanonicalUuid
    opted_out_at: datetime
    resubscribe_invited_at: datetime | None = Field(description="when the owner invited the recipient back")
    resubscribe_invited_by: str | None


class OptOutList(BaseModel):
    """The schedule's opt-outs, oldest first (every one; at most the schedule's recipients)."""

    items: list[OptOutOut]
    timezone: str = Field(description="the workspace's IANA zone, in which people's times are shown")


class SubscriptionOut(BaseModel):
    """The caller receives the schedule's messages again."""

    schedule_id: CanonicalUuid
    user_id: str
    subscribed: bool


class SubscriptionStateOut(BaseModel):
    """The caller's own standing with a query schedule's messages: whether they opted out
    (``opted_out_at``) and whether its owner invited them back (``invited_at``, by
    ``invited_by``); ``timezone`` is the workspace's, to show the instants in."""

    schedule_id: CanonicalUuid
    name: str
    user_id: str
    opted_out: bool
    opted_out_at: datetime | None
    invited_at: datetime | None
    invited_by: str | None
    timezone: str = Field(description="the workspace's IANA zone, to show the UTC instants in")


def _out(o: opt_outs.OptOut) -> OptOutOut:
    return OptOutOut(user_id=o.user_id, run_id=o.run_id, opted_out_at=o.opted_out_at,
                     resubscribe_invited_at=o.resubscribe_invited_at, resubscribe_invited_by=o.resubscribe_invited_by)


#: The opt-out pages' Content-Security-Policy: nothing loads, no inline script or style
#: (the console's rule), the form posts only to the page's own address, no framing.
PAGE_CSP = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"


def page(status: HTTPStatus, title: str, text: str, *, form: bool = False) -> Response[str]:
    """A small HTML page (the recipient's browser shows it): ``title`` and ``text``
    escaped, with the opt-out form posting to the page's own address when ``form``;
    served under :data:`PAGE_CSP`, never cached, no referrer."""
    button = ('<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
              '<button type="submit">Unsubscribe</button></form>' if form else "")
    body = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><meta name="robots" content="noindex">'
            f"<title>{escape(title)}</title></head><body><main><h1>{escape(title)}</h1>"
            f"<p>{escape(text)}</p>{button}</main></body></html>")
    return Response(status_code=status, content_type="text/html; charset=utf-8", body=body,
                    headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                             "Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff"})


Reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]
Writer = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_WRITE))]
#: The recipient's consent: any signed-in role here, the source kind's read role in the route.
Recipient = Annotated[WorkspaceScope, Depends(scope_for(OWN_NOTICES))]
ScheduleIdPath = Annotated[CanonicalUuid, Path(description="the query schedule's id")]
TokenPath = Annotated[str, Path(min_length=1, max_length=2000, description="the signed opt-out token")]
_TAGS = ["opt-outs"]
_HTML = {"content": {"text/html": {"schema": {"type": "string"}}}}

#: The opt-out routes (see the module's description). The app's adapters
#: (:data:`~timekeeper.api.routing.Api`) give ``connection()``, ``now()`` and ``links()``
#: (the link signer).
router = ApiRouter()


def _resolve(api: ApiContext,
             token: str) -> tuple[opt_outs.OptOutLink | opt_outs.NoticeOptOutLink, str] | Response[str]:
    """The token's link (a schedule's opt-out, or the workspace's notice e-mails') and
    the name the page shows (the schedule's, or the workspace's), or the error page."""
    adapters = api.adapters
    if adapters.links is None:
        raise RuntimeError("the opt-out route's link signer is not configured")
    invalid = page(HTTPStatus.FORBIDDEN, "This link is not valid", "Use the link of a message you received.")
    link: opt_outs.OptOutLink | opt_outs.NoticeOptOutLink
    try:
        try:
            link = opt_outs.verify_notice_opt_out(adapters.links(), token, now=adapters.now())
        except LinkInvalid:
            link = opt_outs.verify_opt_out(adapters.links(), token, now=adapters.now())
    except LinkExpired:
        return page(HTTPStatus.GONE, "This link has expired",
                    "Use the link of a later message, or ask the schedule's owner to remove you from it.")
    except LinkInvalid:
        return invalid
    if isinstance(link, opt_outs.NoticeOptOutLink):
        with workspace_unit(adapters.connection(), link.workspace_id) as conn:
            workspace = get_workspace(conn, link.workspace_id)
        return (link, workspace.name or "your workspace") if workspace is not None else invalid
    with workspace_unit(adapters.connection(), link.workspace_id) as conn:
        delivery = dl.get_delivery(conn, workspace_id=link.workspace_id, run_id=link.run_id, user_id=link.user_id)
        settings = dl.get_query_schedule(conn, workspace_id=link.workspace_id, schedule_id=link.schedule_id)
    if delivery is None or settings is None or delivery.schedule_id != link.schedule_id:
        return invalid
    return link, settings.name


@router.get("/opt-outs/<token>", tags=_TAGS, operation_id="optOutPage", security=[],
            summary="The opt-out confirmation page (public; changes nothing): a schedule's messages, "
                    "or the workspace's notice e-mails",
            responses={200: {"description": "The page with the opt-out form", **_HTML},
                       403: {"description": "The link is not valid", **_HTML},
                       410: {"description": "The link has expired", **_HTML},
                       **errors.error_docs(_PATH_ERRORS, 404)})
def opt_out_page(api: Api, token: TokenPath) -> Response[str]:
    found = _resolve(api, token)
    if isinstance(found, Response):
        return found
    link, name = found
    if isinstance(link, opt_outs.NoticeOptOutLink):
        return page(HTTPStatus.OK, f"Stop notice e-mails from \u201c{name}\u201d?",
                    f"You will no longer receive e-mails about your schedules in \u201c{name}\u201d. The "
                    "notices stay listed in Timekeeper, and you can turn the e-mails back on there.", form=True)
    return page(HTTPStatus.OK, f"Unsubscribe from \u201c{name}\u201d?",
                f"You will no longer receive the scheduled delivery \u201c{name}\u201d. Only the schedule's "
                "owner can invite you back, and only you can accept.", form=True)


@router.post("/opt-outs/<token>", tags=_TAGS, operation_id="optOut", security=[],
             summary="Opt out of a schedule's messages, or of the workspace's notice e-mails (public, RFC 8058 "
                     "one-click; repeating it changes nothing)",
             responses={200: {"description": "Opted out", **_HTML},
                        403: {"description": "The link is not valid", **_HTML},
                        410: {"description": "The link has expired", **_HTML},
                        **errors.error_docs(_PATH_ERRORS, 404, 415, 422)})
def opt_out(api: Api, token: TokenPath) -> Response[str]:
    found = _resolve(api, token)
    if isinstance(found, Response):
        return found
    link, name = found
    adapters = api.adapters
    with workspace_unit(adapters.connection(), link.workspace_id) as conn:
        if isinstance(link, opt_outs.NoticeOptOutLink):
            opt_outs.record_notice_opt_out(conn, link, now=adapters.now())
        else:
            opt_outs.record_opt_out(conn, link, now=adapters.now())
    if isinstance(link, opt_outs.NoticeOptOutLink):
        return page(HTTPStatus.OK, "Notice e-mails are off",
                    f"You will no longer receive e-mails about your schedules in \u201c{name}\u201d; the "
                    "notices stay listed in Timekeeper, where you can turn the e-mails back on.")
    return page(HTTPStatus.OK, "You are unsubscribed",
                f"You will no longer receive the scheduled delivery \u201c{name}\u201d.")


def _live_schedule(conn: Any, scope: WorkspaceScope, schedule_id: UUID) -> dl.QuerySchedule:
    settings = dl.get_query_schedule(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id)
    if settings is None:
        raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such query schedule")
    return settings


@router.get("/query-schedules/<schedule_id>/opt-outs", tags=_TAGS, operation_id="queryScheduleOptOuts",
            security=SECURITY, summary="Who opted out of the schedule's messages",
            responses=errors.responses(200, "The schedule's opt-outs", 404, texts=_ERRORS))
def list_opt_outs(scope: Reader, schedule_id: ScheduleIdPath) -> OptOutList:
    with scope.unit(access.QUERIES_READ) as conn:
        _live_schedule(conn, scope, schedule_id)
        return OptOutList(items=[_out(o) for o in opt_outs.list_opt_outs(
            conn, workspace_id=scope.workspace_id, schedule_id=schedule_id)],
            timezone=workspace_timezone(conn, scope.workspace_id))


@router.post("/query-schedules/<schedule_id>/opt-outs/<user_id>/invitation", tags=_TAGS,
             operation_id="inviteBack", security=SECURITY,
             summary="The owner invites an opted-out recipient back (they must accept)",
             responses=errors.responses(200, "The opt-out with its invitation", 404, texts=_ERRORS))
def invite(scope: Writer, schedule_id: ScheduleIdPath,
           user_id: Annotated[str, Path(min_length=1, max_length=200, description="the recipient")]) -> OptOutOut:
    with scope.unit(access.QUERIES_WRITE) as conn:
        settings = _live_schedule(conn, scope, schedule_id)
        access.require(dl.check_source_access(conn, settings, scope.user_id), f"read the {settings.source_kind}")
        if not opt_outs.invite_resubscribe(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                           user_id=user_id, actor=scope.user_id, now=scope.now,
                                           schedule_name=settings.name):
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "this recipient has not opted out", "user_id")
        found = opt_outs.get_opt_out(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                     user_id=user_id)
    assert found is not None
    return _out(found)


def _as_recipient(conn: Any, scope: WorkspaceScope, schedule_id: UUID) -> dl.QuerySchedule:
    """The schedule, once the caller may read its source as its recipients are resolved."""
    settings = _live_schedule(conn, scope, schedule_id)
    permission = dl.source_read_permission(settings)
    scope.identity.require(permission)
    access.require(access.check_person(conn, workspace_id=scope.workspace_id, user_id=scope.user_id,
                                       permission=permission), f"read the {settings.source_kind}")
    return settings


@router.get("/query-schedules/<schedule_id>/subscription", tags=_TAGS, operation_id="getSubscription",
            security=SECURITY, summary="The caller's own standing with the schedule's messages: opted out, invited "
                                       "back (queries:read for a query's schedule, reports:read for a report's)",
            responses=errors.responses(200, "The caller's subscription", 404, texts=_ERRORS))
def subscription(scope: Recipient, schedule_id: ScheduleIdPath) -> SubscriptionStateOut:
    if not scope.identity.permissions & {QUERIES_READ, REPORTS_READ}:
        scope.identity.require(QUERIES_READ)
    with scope.unit() as conn:
        settings = _as_recipient(conn, scope, schedule_id)
        found = opt_outs.get_opt_out(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                     user_id=scope.user_id)
        zone = workspace_timezone(conn, scope.workspace_id)
    return SubscriptionStateOut(schedule_id=schedule_id, name=settings.name, user_id=scope.user_id,
                                opted_out=found is not None, opted_out_at=found and found.opted_out_at,
                                invited_at=found and found.resubscribe_invited_at,
                                invited_by=found and found.resubscribe_invited_by, timezone=zone)


@router.post("/query-schedules/<schedule_id>/subscription", tags=_TAGS, operation_id="acceptInvitation",
             security=SECURITY, summary="The recipient accepts the owner's invitation and gets the messages again "
                                        "(queries:read for a query's schedule, reports:read for a report's)",
             responses=errors.responses(200, "Subscribed again", 404, 409, texts=_ERRORS))
def accept(scope: Recipient, schedule_id: ScheduleIdPath) -> SubscriptionOut:
    # The role that reads the schedule's source, as its recipients are resolved: the
    # token must hold one of the two before anything is looked up, then the one of
    # this schedule's source kind, by the token and by the membership.
    if not scope.identity.permissions & {QUERIES_READ, REPORTS_READ}:
        scope.identity.require(QUERIES_READ)
    with scope.unit() as conn:
        _as_recipient(conn, scope, schedule_id)
        found = opt_outs.get_opt_out(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                     user_id=scope.user_id)
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "you have not opted out of this schedule")
        if not opt_outs.accept_resubscribe(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                           user_id=scope.user_id, now=scope.now):
            raise ApiError(HTTPStatus.CONFLICT, NOT_INVITED, "the schedule's owner has not invited you back")
    return SubscriptionOut(schedule_id=schedule_id, user_id=scope.user_id, subscribed=True)


__all__ = ["NOT_INVITED", "OPT_OUT_PATH_PREFIX", "PAGE_CSP", "page", "router"]
