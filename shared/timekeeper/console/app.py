"""The console's resolver: a Powertools REST resolver answering HTML, each page built from
the API's answers for the signed-in person.

The pages live in :mod:`timekeeper.console.pages`, one module per group with its own
Powertools ``Router``; :func:`create_console` includes them. What a page is given (the
session, the templates, the API client, the console's public path, the CSRF check) is
:mod:`timekeeper.console.context`; sessions are :mod:`timekeeper.console.sessions` and the
deployed sign-in :mod:`timekeeper.console.sign_in`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timekeeper.console.context import Console, ConsoleResolver, ConsoleSettings
from timekeeper.console.pages import ROUTERS, errors
from timekeeper.console.paths import FAVICON_PATH, PREFIX


def is_console_path(path: str | None) -> bool:
    """Whether a request path belongs to the console (``/``, ``/favicon.ico`` and
    ``/console...``)."""
    return path in ("/", "", FAVICON_PATH) or path == PREFIX or (path or "").startswith(PREFIX + "/")


def create_console(resolve_api: Callable[[dict[str, Any], Any], dict[str, Any]],
                   settings: ConsoleSettings) -> ConsoleResolver:
    """Build the console's resolver: its pages call the API through ``resolve_api(event,
    context)`` (the API resolver of the same execution environment) with the signed-in
    person's claims. Raises ``ValueError`` for a session key shorter than 32 characters."""
    app = ConsoleResolver(Console.of(resolve_api, settings))
    for router in ROUTERS:
        app.include_router(router)
    app.not_found(errors.not_found)
    return app
