"""The console's addresses: where its pages live, which page a sign-in may return to, and
which list an error page leads back to."""

from __future__ import annotations

from urllib.parse import urlsplit

from timekeeper.settings import CONSOLE_FAVICON_PATH

#: Where the console's pages live (``/`` leads to them).
PREFIX = "/console"
#: The icon path a browser asks for by itself (the console redirects it to its icon).
FAVICON_PATH = CONSOLE_FAVICON_PATH

#: The list a page belongs to, by its path's first segment after ``/console``: where an
#: error page leads back to (the path, its words).
_WAYS_BACK = {"deliveries": ("/deliveries", "Back to the deliveries"),
              "mail-suppressions": ("/deliveries", "Back to the deliveries"),
              "snapshots": ("/snapshots", "Back to the snapshots"), "reports": ("/reports", "Back to the reports"),
              "queries": ("/queries", "Back to the queries"), "exports": ("/queries", "Back to the queries"),
              "notices": ("/notices", "Back to the notices"), "open": ("/notices", "Back to the notices"),
              "operations": ("/operations", "Back to operations"), "closures": ("/closures", "Back to the closures"),
              "ownerless": ("/ownerless", "Back to the ownerless schedules"),
              "posting-jobs": ("/posting-jobs", "Back to the failed posting jobs")}


#: The console pages a sign-in never returns to (the sign-in's own).
_NOT_NEXT = (f"{PREFIX}/sign-in", f"{PREFIX}/callback", f"{PREFIX}/sign-out", f"{PREFIX}/signed-out")


def next_page(value: str | None) -> str | None:
    """``value`` when it is a console page to return to after signing in: a path under
    ``/console/`` with an optional query (same origin only: no scheme, no host, no ``//``
    or backslash, no control character or white space, at most 2,000 characters, not a
    sign-in page); else None."""
    if not value or len(value) > 2000 or not value.startswith(PREFIX + "/") or "\\" in value:
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value) or "//" in value.split("?", 1)[0]:
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or parts.fragment or parts.path.startswith(_NOT_NEXT):
        return None
    return value


def way_back(path: str) -> tuple[str, str]:
    """Where an error page on ``path`` (a console path, ``/console/deliveries/...``) leads
    back to: ``(path after /console, words)``, the list the page belongs to; the schedules
    for any other."""
    section = path.removeprefix(PREFIX).lstrip("/").split("/", 1)[0]
    return _WAYS_BACK.get(section, HOME)


def section_of(path: str) -> str:
    """The first segment of a console ``path`` after ``/console`` (``"operations"``)."""
    return path.removeprefix(PREFIX).lstrip("/").split("/", 1)[0]


#: The home page: where a refusal leads when the list a page belongs to is refused too.
HOME = ("/schedules", "Back to the schedules")
#: Pages only platform staff may open, by section: what a refusal says instead of the
#: API's words about the action (those name the snapshot staff role).
STAFF_ONLY = {"operations": "Operations is for platform staff: it needs a staff role (e.g. platform:staff).",
              "dead-letters": "The dead-letter queues are for platform staff: they need a staff role "
                              "(e.g. platform:staff)."}
