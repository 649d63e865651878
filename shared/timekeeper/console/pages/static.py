"""The console's public files and entrances: ``/`` and ``/console`` lead to the
schedules, the browser's icon request to the console's icon, and ``/console/static/``
serves its scripts, styles and images."""

from __future__ import annotations

from http import HTTPStatus
from importlib import resources

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, public
from timekeeper.console.paths import FAVICON_PATH, PREFIX

router = Router()

_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".svg": "image/svg+xml; charset=utf-8"}


@router.get("/")
@public
def home(ctx: Request) -> Response:
    """``GET /``: to the schedules."""
    return ctx.redirect(f"{PREFIX}/schedules")


@router.get(FAVICON_PATH)
@public
def favicon(ctx: Request) -> Response:
    # The icon is public (no session): a permanent redirect to the static file.
    """The browser's icon request: a permanent redirect to the console's icon."""
    return Response(status_code=HTTPStatus.MOVED_PERMANENTLY, content_type="text/plain", body="",
                    headers={**ctx.security_headers, "Location": f"{ctx.public}/static/favicon.svg",
                             "Cache-Control": "public, max-age=86400"})


@router.get(PREFIX)
@public
def console_root(ctx: Request) -> Response:
    """``GET /console``: to the schedules."""
    return ctx.redirect(f"{PREFIX}/schedules")


@router.get(f"{PREFIX}/static/<name>")
@public
def static(ctx: Request, name: str) -> Response:
    """``GET /console/static/{name}``: a script, style or image of the console (cached five
    minutes); any other name is a 404 page."""
    suffix = name[name.rfind("."):] if "." in name else ""
    if "/" in name or "\\" in name or name.startswith(".") or suffix not in _STATIC_TYPES:
        return ctx.page("error.html", HTTPStatus.NOT_FOUND, title="Not found", message="No such file.")
    try:
        text = resources.files("timekeeper.console").joinpath("static", name).read_text("utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return ctx.page("error.html", HTTPStatus.NOT_FOUND, title="Not found", message="No such file.")
    return Response(status_code=200, content_type=_STATIC_TYPES[suffix], body=text,
                    headers={**ctx.security_headers, "Cache-Control": "public, max-age=300"})
