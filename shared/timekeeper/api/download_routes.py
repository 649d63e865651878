"""The public download routes of a delivery's links: follow one, or ask for a fresh one.

Routes (:data:`router`; public: no authorizer, the signed token is the credential):

* ``GET /downloads/{token}``: 403 ``link_invalid`` (tampered, another key, no such
  delivery, or the query schedule was deleted: deleting a schedule revokes the links it
  sent), 410 ``link_expired``, 403 with the access rule's reason when the recipient may no
  longer read the source, else 302 to a presigned S3 GET valid :data:`DOWNLOAD_URL_TTL_S`
  seconds. A browser (``Accept: text/html``) gets each refusal as a page in the
  workspace's language (:mod:`timekeeper.api.link_pages`).
* ``POST /downloads/{token}``: "send me a fresh link" (the token's signature, expired or
  not): 202, the same refusals, 429 ``fresh_link_limited`` past once an hour per delivery
  or five a day.

The app's adapters (:data:`~timekeeper.api.routing.Api`) give ``connection()``, ``now()``,
``files()`` (S3 client, bucket) and ``links()`` (the link signer).
"""

from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Path
from aws_lambda_powertools.event_handler.request import Request
from pydantic import BaseModel

from timekeeper.api import errors, link_pages
from timekeeper.api.delivery_routes import schedule_live
from timekeeper.api.downloads import attachment
from timekeeper.api.errors import ApiError
from timekeeper.api.models import CanonicalUuid
from timekeeper.api.routing import Api, ApiRouter
from timekeeper.api.scope import workspace_unit
from timekeeper.platform import access
from timekeeper.platform.directory import get_workspace
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import link_renewals
from timekeeper.reporting.links import LinkExpired, LinkInvalid

#: Lifetime of the presigned S3 URL a download link redirects to (seconds).
DOWNLOAD_URL_TTL_S = 60
LINK_INVALID = "link_invalid"
LINK_EXPIRED = "link_expired"
#: A fresh link was asked for too often (429): once an hour per delivery, five a day.
FRESH_LINK_LIMITED = "fresh_link_limited"
#: The message of a ``link_expired`` refusal.
EXPIRED_MESSAGE = "the link has expired; ask for a new delivery"
_HTML_PAGE = {"text/html": {"schema": {"type": "string"}}}
_ERRORS = {403: "The caller's roles, or the access rule, refuse this",
           404: "No such query schedule in the caller's workspace", 410: "The link has expired",
           429: "A fresh link of this delivery was asked for within the hour, or five today: fresh_link_limited"}


class FreshLinkOut(BaseModel):
    """A recorded request for a fresh link to run ``run_id``'s file (sent within minutes)."""

    run_id: CanonicalUuid
    requested_at: datetime


router = ApiRouter()



def _link_docs(*codes: int) -> dict[int, dict[str, Any]]:
    """The OpenAPI responses of a link refusal: the API's error, or a page for a browser."""
    docs = errors.error_docs(_ERRORS, *codes)
    for code in codes:  # a browser (Accept: text/html) gets the same refusal as a page
        docs[code]["content"] = {**docs[code]["content"], **_HTML_PAGE}
    return docs


def _headers(request: Request) -> dict[str, str]:
    """The request's headers by lower-case name."""
    return {str(k).lower(): v for k, v in (request.headers or {}).items()}


def _refused(headers: dict[str, str], status: int, code: str, message: str, *, page: str,
             locale: str | None = None, name: str | None = None, fresh_link: bool = False) -> Response[str]:
    """A refused link: the API's error for a script (raised :class:`ApiError`), the page
    ``page`` (a key of :data:`timekeeper.api.link_pages.MESSAGES`) in the workspace's
    language for a browser (``headers``: the request's, by lower-case name)."""
    if not link_pages.wants_html(headers.get("accept")):
        raise ApiError(status, code, message)
    language = link_pages.language_of(locale, headers.get("accept-language"))
    return link_pages.link_page(status, page, language=language, name=name, reason=code, fresh_link=fresh_link)


def _linked_delivery(conn: Any, link: Any,
                     headers: dict[str, str]) -> tuple[Any, Any, str | None, Response[str] | None]:
    """What a verified ``link`` leads to on ``conn`` (in its workspace's unit): the run's
    source, its schedule's settings, the workspace's locale, and the refusal when the link
    no longer leads anywhere (not a sent delivery of that file, its schedule deleted, which
    revokes its links, or the recipient may no longer read the source), else None. A
    refusal for a script is raised as the API's error (:func:`_refused`)."""
    workspace = get_workspace(conn, link.workspace_id)
    locale = workspace.locale if workspace is not None else None
    delivery = dl.get_delivery(conn, workspace_id=link.workspace_id, run_id=link.run_id, user_id=link.user_id)
    source = dl.get_source(conn, workspace_id=link.workspace_id, run_id=link.run_id)
    settings = (dl.get_query_schedule(conn, workspace_id=link.workspace_id, schedule_id=source.schedule_id)
                if source is not None else None)
    if (delivery is None or delivery.status != "sent" or source is None or settings is None
            or source.object_key != link.object_key):
        return source, settings, locale, _refused(headers, HTTPStatus.FORBIDDEN, LINK_INVALID,
                                                  "the link is not valid", page="link_invalid", locale=locale)
    if not schedule_live(conn, link.workspace_id, settings.schedule_id):
        return source, settings, locale, _refused(
            headers, HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid: its schedule was deleted",
            page="schedule_deleted", locale=locale, name=settings.name)
    decision = dl.check_source_access(conn, settings, link.user_id)
    if not decision:
        reason = decision.reason or access.NOT_FOUND
        return source, settings, locale, _refused(
            headers, HTTPStatus.FORBIDDEN, reason, f"you may no longer read this {settings.source_kind}",
            page=link_pages.ACCESS_PAGES.get(reason, "no_access"), locale=locale, name=settings.name)
    return source, settings, locale, None


@router.get("/downloads/<token>", tags=["downloads"], operation_id="download", security=[],
            summary="Follow a delivery's personal link (public: the signed token is the credential); a browser "
                    "asking for text/html gets a refusal as a page in the workspace's language",
            responses={302: {"description": "Redirect to the file (a presigned URL valid 60 s)",
                                  "headers": {"Location": {"description": "the presigned URL", "required": True,
                                                           "schema": {"type": "string"}}}},
                       **_link_docs(403, 404, 410)})
def download(api: Api, request: Request,
             token: Annotated[str, Path(min_length=1, max_length=2000,
                                        description="the signed link token")]) -> Response[str]:
    """Follow a delivery's personal link: 302 to the file, or the refusal (see the module's description)."""
    adapters, headers = api.adapters, _headers(request)
    if adapters.links is None or adapters.files is None:
        raise RuntimeError("the download route's adapters are not configured")
    now = adapters.now()
    try:
        link, expired = adapters.links().verify(token, now=now), False
    except LinkExpired as gone:
        if gone.link is None or not link_pages.wants_html(headers.get("accept")):
            return _refused(headers, HTTPStatus.GONE, LINK_EXPIRED, EXPIRED_MESSAGE, page="link_expired")
        link, expired = gone.link, True  # a person: say why, and whether they still have access
    except LinkInvalid:
        return _refused(headers, HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid", page="link_invalid")
    with workspace_unit(adapters.connection(), link.workspace_id) as conn:
        source, settings, locale, refusal = _linked_delivery(conn, link, headers)
    if refusal is not None:
        return refusal
    if expired:  # the recipient may still read it: offer a fresh link (POST to this address)
        return _refused(headers, HTTPStatus.GONE, LINK_EXPIRED, EXPIRED_MESSAGE, page="link_expired_fresh",
                        locale=locale, name=settings.name, fresh_link=True)
    s3, bucket = adapters.files()
    disposition = attachment(settings.name or "", suffix=f"-{link.run_id}.{source.format}", default="delivery")
    url = s3.generate_presigned_url("get_object", ExpiresIn=DOWNLOAD_URL_TTL_S, Params={
        "Bucket": bucket, "Key": link.object_key, "ResponseContentDisposition": disposition})
    return Response(status_code=HTTPStatus.FOUND, headers={
        "Location": url, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        content_type=content_types.TEXT_PLAIN, body="")


@router.post("/downloads/<token>", tags=["downloads"], operation_id="requestFreshLink", security=[],
             summary="Send me a fresh link: the recipient of a delivery link (expired or not) asks for a new one "
                     "to the same file, sent to their address within minutes (public: the token's signature is "
                     "the credential; the access rule is asked again; once an hour per delivery, five a day)",
             responses={202: {"description": "The request is recorded; the message follows",
                              "content": {content_types.APPLICATION_JSON: {"model": FreshLinkOut}, **_HTML_PAGE}},
                        **_link_docs(403, 404, 429)})
def request_fresh_link(api: Api, request: Request,
                       token: Annotated[str, Path(min_length=1, max_length=2000,
                                                  description="the signed link token")]) -> Response[str]:
    """Record the recipient's request for a fresh link to the same file (202), or the refusal."""
    adapters, headers = api.adapters, _headers(request)
    if adapters.links is None:
        raise RuntimeError("the download route's adapters are not configured")
    now = adapters.now()
    try:
        link = adapters.links().verify(token, now=now)
    except LinkExpired as gone:
        if gone.link is None:
            return _refused(headers, HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid", page="link_invalid")
        link = gone.link
    except LinkInvalid:
        return _refused(headers, HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid", page="link_invalid")
    with workspace_unit(adapters.connection(), link.workspace_id) as conn:
        _source, settings, locale, refusal = _linked_delivery(conn, link, headers)
        if refusal is not None:
            return refusal
        requested = link_renewals.request(conn, workspace_id=link.workspace_id, run_id=link.run_id,
                                          user_id=link.user_id, now=now)
    if requested is None:
        return _refused(headers, HTTPStatus.TOO_MANY_REQUESTS, FRESH_LINK_LIMITED, "a fresh link of this delivery "
                        "was asked for within the hour, or five today; use the latest message's link",
                        page="fresh_link_limited", locale=locale, name=settings.name)
    if link_pages.wants_html(headers.get("accept")):
        return link_pages.link_page(HTTPStatus.ACCEPTED, "fresh_link_sent", name=settings.name,
                                    language=link_pages.language_of(locale, headers.get("accept-language")),
                                    reason="fresh_link_requested")
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=FreshLinkOut(run_id=link.run_id, requested_at=requested).model_dump_json(),
                    headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


__all__ = ["DOWNLOAD_URL_TTL_S", "LINK_EXPIRED", "LINK_INVALID", "router"]
