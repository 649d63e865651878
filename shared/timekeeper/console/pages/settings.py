"""The workspace admin's settings page: the time zone (with what changes for the
workspace's schedules shown before saving), the locale of files and messages, whether the
admins get a copy of every notice, and each member's notice e-mails."""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import quote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.api_client import ApiReply
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when
from timekeeper.console.pages.schedules import rule_zones
from timekeeper.console.paths import PREFIX
from timekeeper.settings import FILE_LOCALE_LANGUAGES

router = Router()

#: The settings form's fields, as the API names them.
FIELDS = ("timezone", "locale", "notify_admins", "move_schedules")
_DONE = {"saved": "Settings saved.", "mail": "Notice e-mails changed."}


def _refusal(reply: ApiReply) -> tuple[str, dict[str, str]]:
    """The API's refusal: a line for the page and the reason on the field it names."""
    body = reply.body if isinstance(reply.body, dict) else {}
    message = str(body.get("message") or "the request was refused")
    field = str(body.get("field") or "")
    return f"Refused: {message}" + (f" ({field})" if field else ""), ({field: message} if field in FIELDS else {})


def _preview_rows(preview: dict[str, Any]) -> list[dict[str, Any]]:
    """Each previewed schedule with its occurrences as people read them."""
    rows = []
    for s in preview["schedules"]:
        rows.append({**s, "before_at": [when(o["at"], preview["old"]) for o in s["before"]],
                     "after_at": [when(o["at"], preview["new"]) for o in s["after"]],
                     "due_before": when(s["next_due_before"], preview["old"]),
                     "due_after": when(s["next_due_after"], preview["new"])})
    return rows


@cache
def _places() -> frozenset[str]:
    """The zones tzdata's ``zone.tab`` names for a country, and ``UTC``: no deprecated
    alias (``US/Eastern``, ``Asia/Calcutta``) nor a bare abbreviation (``EST5EDT``)."""
    from importlib import resources

    table = resources.files("tzdata").joinpath("zoneinfo", "zone.tab").read_text(encoding="utf-8")
    return frozenset({"UTC"} | {line.split("\t")[2] for line in table.splitlines()
                                if line and not line.startswith("#") and line.count("\t") >= 2})


def zone_choices(api_zones: list[str]) -> list[str]:
    """The zones a workspace may choose: the API's own list (``api_zones``, its document's
    enum) less its deprecated aliases, sorted."""
    return sorted(zone for zone in api_zones if zone in _places())


@cache
def locale_choices() -> tuple[tuple[str, str], ...]:
    """The locales a workspace may name: every CLDR identifier in its canonical form of a
    language the deployment ships (:data:`timekeeper.settings.FILE_LOCALE_LANGUAGES`), as
    ``(identifier, "German (Germany) · de_DE")``, by their English names."""
    from babel import Locale, localedata

    found = []
    for name in localedata.locale_identifiers():
        try:
            parsed = Locale.parse(name)
        except (ValueError, TypeError):
            continue
        if str(parsed) == name and parsed.language in FILE_LOCALE_LANGUAGES:
            found.append((name, f"{parsed.get_display_name('en')} · {name}"))
    return tuple(sorted(found, key=lambda pair: pair[1].casefold()))


def settings_page(ctx: Request, *, typed: dict[str, Any] | None = None, problem: str | None = None,
                  problems: dict[str, str] | None = None, preview: dict[str, Any] | None = None,
                  done: str | None = None, status_code: int = 200) -> Response:
    """The settings (``GET /settings``) with the form (``typed`` keeps what was typed),
    a zone ``preview`` when asked for, and each member's notice e-mails."""
    reply = ctx.api().call("GET", "/settings")
    if reply.status != 200:
        return ctx.api_error(reply)
    current = reply.body
    shown = typed or {"timezone": current["timezone"], "locale": current["locale"],
                      "notify_admins": current["notify_admins"], "move_schedules": False}
    members = [{**m, "since": when(m.get("opted_out_at"), current["timezone"])} for m in current["members"]]
    return ctx.page("settings.html", status_code, current=current, typed=shown, problem=problem,
                    problems=problems or {}, preview=preview, preview_rows=_preview_rows(preview) if preview else [],
                    members=members, done=done, zone=current["timezone"], zones=zone_choices(rule_zones(ctx)),
                    locales=locale_choices())


@router.get(f"{PREFIX}/settings")
@signed_in
def settings(ctx: Request) -> Response:
    """``GET /console/settings``: the workspace's settings (admins; the API refuses others)."""
    return settings_page(ctx, done=_DONE.get(ctx.params.get("done", "")))


@router.post(f"{PREFIX}/settings")
@checked_post
def settings_save(ctx: Request) -> Response:
    """``POST /console/settings``: ``action=preview`` shows what the typed zone would change
    (``POST /settings/zone-preview``); otherwise save (``PATCH /settings``). A refusal keeps
    what was typed and shows the API's reason on its field."""
    fields = ctx.fields
    typed = {"timezone": fields.get("timezone", "").strip(), "locale": fields.get("locale", "").strip(),
             "notify_admins": fields.get("notify_admins") == "on",
             "move_schedules": fields.get("move_schedules") == "on"}
    if fields.get("action") == "preview":
        reply = ctx.api().call("POST", "/settings/zone-preview", body={"timezone": typed["timezone"]})
        if reply.status == 200:
            return settings_page(ctx, typed=typed, preview=reply.body)
    else:
        reply = ctx.api().call("PATCH", "/settings", body={
            "timezone": typed["timezone"], "locale": typed["locale"], "notify_admins": typed["notify_admins"],
            "move_schedules": typed["move_schedules"]})
        if reply.status == 200:
            return ctx.redirect(f"{PREFIX}/settings?done=saved")
    if reply.status in (401, 403, 404):
        return ctx.api_error(reply)
    problem, problems = _refusal(reply)
    return settings_page(ctx, typed=typed, problem=problem, problems=problems,
                         status_code=reply.status if 400 <= reply.status < 500 else 502)


@router.post(f"{PREFIX}/settings/notice-mail")
@checked_post
def notice_mail(ctx: Request) -> Response:
    """``POST /console/settings/notice-mail``: turn a member's notice e-mails on or off
    (``PUT /settings/notice-mail/{user_id}``); a refusal is shown on the page."""
    user_id = ctx.fields.get("user_id", "").strip()
    if not user_id:
        return settings_page(ctx, problem="Refused: no member named (user_id).", status_code=422)
    reply = ctx.api().call("PUT", f"/settings/notice-mail/{quote(user_id, safe='')}",
                           body={"mail": ctx.fields.get("mail") == "on"})
    if reply.status == 200:
        return ctx.redirect(f"{PREFIX}/settings?done=mail")
    if reply.status in (401, 403):
        return ctx.api_error(reply)
    problem, _ = _refusal(reply)
    return settings_page(ctx, problem=problem, status_code=reply.status if 400 <= reply.status < 500 else 502)
