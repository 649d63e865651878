"""The pages a recipient's browser gets from a delivery link that does not lead to its file.

A download link (``GET /downloads/{token}``) answers a script with the API's JSON error
(``link_invalid``, ``link_expired``, the access rule's reason), and a person's browser
with an HTML page that says what happened and what they can do, in the workspace's
language (its locale's language; for a link too damaged to name its workspace, the
browser's ``Accept-Language``; English where no catalog exists). Which one a request gets
is :func:`wants_html`: a browser asks for ``text/html`` explicitly, a script asks for JSON
or anything (``*/*``).

The texts are the English messages of :data:`MESSAGES`, translated by the gettext catalogs
beside this module (``locales/<language>.po``, read with Babel and compiled in memory
once per execution environment) through Jinja2's i18n extension.
"""

from __future__ import annotations

import io
from functools import cache
from http import HTTPStatus
from importlib import resources
from typing import Any

from aws_lambda_powertools.event_handler import Response
from babel import Locale, UnknownLocaleError
from babel.core import negotiate_locale
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import NullTranslations, Translations
from jinja2 import Environment, PackageLoader, select_autoescape

#: The page's policy: nothing loads or runs; its one form posts to this origin.
PAGE_CSP = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
#: The language of a page without a better one.
DEFAULT_LANGUAGE = "en"

#: What each refusal says (title, then what happened and what the person can do), by code.
#: ``%(name)s`` is the delivery's name.
MESSAGES: dict[str, tuple[str, str]] = {
    "link_invalid": (
        "This link is not valid",
        "The link may have been copied incompletely or changed. Open it again from the message you received; "
        "if it still does not work, ask the delivery's owner to send it again."),
    "link_expired": (
        "This link has expired",
        "Download links stay valid for a limited time after a delivery is sent. Ask the delivery's owner to send "
        "the file again."),
    "link_expired_fresh": (
        "This link has expired",
        "Download links stay valid for a limited time after a delivery is sent. You still have access to "
        "\u201c%(name)s\u201d: we can send a fresh link to the same file to your address."),
    "schedule_deleted": (
        "This delivery was deleted",
        "Its owner deleted the scheduled delivery \u201c%(name)s\u201d, so its links no longer work. Ask them for "
        "the file if you still need it."),
    "left_workspace": (
        "You are no longer a member of this workspace",
        "The links of a workspace's deliveries stop working when you leave it. If this is a mistake, ask a "
        "workspace admin to add you again."),
    "user_deactivated": (
        "Your account is deactivated",
        "Links stop working while your account is deactivated. If this is a mistake, ask a workspace admin."),
    "no_access": (
        "You may no longer open this file",
        "Your access to what \u201c%(name)s\u201d delivers was removed. Ask the delivery's owner or a workspace "
        "admin for access."),
    "fresh_link_sent": (
        "A fresh link is on its way",
        "We are sending a fresh link to \u201c%(name)s\u201d to your address; it arrives within a few minutes."),
    "fresh_link_limited": (
        "A fresh link was sent recently",
        "Use the link of the last message you received, or ask for another one later."),
}
#: The access rule's reasons, as the page's message (anything else: :data:`MESSAGES` ``no_access``).
ACCESS_PAGES = {"left_workspace": "left_workspace", "user_deactivated": "user_deactivated"}


def _media_ranges(accept: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in accept.split(","):
        kind, *params = [p.strip() for p in part.split(";")]
        if not kind:
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        out[kind.lower()] = max(quality, out.get(kind.lower(), 0.0))
    return out


def wants_html(accept: str | None) -> bool:
    """Whether a request's ``Accept`` header asks for a page rather than JSON: ``text/html``
    (or ``application/xhtml+xml``) named explicitly with a quality above 0 and at least that
    of ``application/json`` when that is named too. ``*/*``, no header, or JSON first: JSON."""
    ranges = _media_ranges(accept or "")
    html = max(ranges.get("text/html", 0.0), ranges.get("application/xhtml+xml", 0.0))
    return html > 0 and html >= ranges.get("application/json", 0.0)


@cache
def _catalogs() -> dict[str, Translations]:
    """Every language's translations (``locales/<language>.po``), compiled once."""
    out = {}
    for entry in resources.files("timekeeper.api").joinpath("locales").iterdir():
        if entry.name.endswith(".po"):
            with entry.open("rb") as po:
                catalog = read_po(po)
            compiled = io.BytesIO()
            write_mo(compiled, catalog)
            compiled.seek(0)
            out[entry.name.removesuffix(".po")] = Translations(compiled)
    return out


def languages() -> frozenset[str]:
    """The languages a page can be in (English and every catalog's)."""
    return frozenset({DEFAULT_LANGUAGE, *_catalogs()})


def language_of(locale: str | None, accept_language: str | None = None) -> str:
    """The page's language: the workspace ``locale``'s (``de_DE`` -> ``de``) when a
    catalog has it, else the best of the browser's ``Accept-Language`` that one has, else
    :data:`DEFAULT_LANGUAGE`."""
    if locale:
        try:
            language = Locale.parse(locale).language
        except (ValueError, UnknownLocaleError):
            language = None
        if language in languages():
            return language
    if accept_language:
        preferred = [part.split(";")[0].strip().replace("-", "_") for part in accept_language.split(",")]
        found = negotiate_locale([p for p in preferred if p], sorted(languages()), sep="_")
        if found:
            return found.split("_")[0]
    return DEFAULT_LANGUAGE


@cache
def _environment(language: str) -> Environment:
    env = Environment(loader=PackageLoader("timekeeper.api", "templates"), extensions=["jinja2.ext.i18n"],
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.install_gettext_translations(_catalogs().get(language) or NullTranslations(), newstyle=True)
    return env


def text(code: str, language: str, **values: Any) -> tuple[str, str]:
    """The title and text of ``code`` (a key of :data:`MESSAGES`) in ``language``, with ``values``."""
    title, body = MESSAGES[code]
    gettext = (_catalogs().get(language) or NullTranslations()).gettext
    return gettext(title), gettext(body) % values if values else gettext(body)


def link_page(status: int, code: str, *, language: str, name: str | None = None, reason: str | None = None,
              fresh_link: bool = False) -> Response[str]:
    """The HTML page of a refused link: ``code`` (a key of :data:`MESSAGES`) in ``language``
    with the delivery's ``name``, the machine-readable ``reason`` shown small (``code`` when
    None), and with ``fresh_link`` a "Send me a fresh link" button (a form posting to the
    page's own address: ``POST /downloads/{token}``). Served with ``status`` under
    :data:`PAGE_CSP`, never cached, no referrer."""
    title, body = text(code, language, name=name or "")
    html = _environment(language).get_template("link_page.html").render(
        lang=language, title=title, text=body, code=reason or code, fresh_link=fresh_link)
    return Response(status_code=HTTPStatus(status), content_type="text/html; charset=utf-8", body=html,
                    headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                             "Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff",
                             "Content-Language": language, "Vary": "Accept, Accept-Language"})
