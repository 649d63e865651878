"""Fresh download links: a recipient whose link expired asks for a new one, and gets it.

The public download route (``POST /downloads/{token}``, the "Send me a fresh link" button
of the expired link's page) verifies the expired token's signature, asks the access rule
for the recipient again and records the request (:func:`request`), at most once an hour
per delivery (:data:`PER_DELIVERY_S`) and :data:`PER_DAY` times a day per person and
workspace. The queries pipeline's people pass then sends each request once
(:func:`send_pending`): a new signed link to the same file, valid the schedule's link
lifetime, to the address the delivery went to; the access rule is asked once more at
sending. Every request, its message id and the new link's expiry (or why nothing was
sent) stay in ``query_delivery_link_renewals``: the delivery's ledger of links.

A crash between the provider's acceptance and the record may send one fresh link twice;
nothing else is repeated.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_row, fetch_rows
from timekeeper.observability import logger
from timekeeper.reporting import delivery_store as store
from timekeeper.reporting.delivery import check_source_access
from timekeeper.reporting.links import DownloadLink, LinkSigner, RotatingLinkSigner
from timekeeper.schedules import service

SQL = load_queries("timekeeper.reporting", "link_renewals.sql")

#: A person asks for a fresh link of one delivery at most once in this many seconds.
PER_DELIVERY_S = 3600
#: ... and at most this many times a day in one workspace.
PER_DAY = 5
#: Requests one pass sends (the rest wait for the next pass, a minute later).
SEND_LIMIT = 50


@dataclass(frozen=True)
class Renewal:
    """One request for a fresh link (``query_delivery_link_renewals``); instants aware UTC,
    ``error_code`` why nothing was sent (no_address, no_access, schedule_deleted,
    submission_error)."""

    id: int
    workspace_id: UUID
    run_id: UUID
    user_id: str
    requested_at: datetime
    sent_at: datetime | None
    provider_message_id: str | None
    link_expires_at: datetime | None
    error_code: str | None


class Mailer(Protocol):
    """The communications adapter: submits one message, returns the provider's message id."""

    def send(self, *, to: str, subject: str, html: str, text: str, headers: Any = None) -> str: ...


def request(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, user_id: str,
            now: datetime) -> datetime | None:
    """Record ``user_id``'s request for a fresh link to run ``run_id``'s file at ``now``
    (aware UTC), in the caller's transaction; the caller asked the access rule first.
    Returns the request's instant, or None when the limits refuse it (a request for this
    delivery within :data:`PER_DELIVERY_S`, or :data:`PER_DAY` requests in a day)."""
    params = {"workspace_id": workspace_id, "run_id": run_id, "user_id": user_id, "now": now,
              "per_delivery_s": PER_DELIVERY_S, "per_day": PER_DAY}
    execute(conn, SQL["lock_person"], params)
    row = fetch_row(conn, SQL["request"], params)
    return row["requested_at"] if row else None


def list_for_delivery(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, user_id: str) -> list[Renewal]:
    """Every fresh-link request of ``user_id`` for run ``run_id``, oldest first."""
    return fetch_all(conn, SQL["list_for_delivery"], {"workspace_id": workspace_id, "run_id": run_id,
                                                      "user_id": user_id}, Renewal)


def compose(name: str, link: str, expires_at: datetime) -> tuple[str, str, str]:
    """The fresh link's message: ``(subject, text, html)``; ``expires_at`` aware UTC."""
    until = f"{expires_at:%Y-%m-%d %H:%M} UTC"
    subject = f"A fresh link to \u201c{name}\u201d"
    text = (f"You asked for a fresh link to the file of \u201c{name}\u201d.\n\n{link}\n\n"
            f"The link is personal and valid until {until}.\n")
    body = (f"<p>You asked for a fresh link to the file of \u201c{html.escape(name)}\u201d.</p>"
            f'<p><a href="{html.escape(link, quote=True)}">Download the file</a></p>'
            f"<p>The link is personal and valid until {until}.</p>")
    return subject, text, body


def send_pending(conn: psycopg.Connection, *, mailer: Mailer, links: LinkSigner | RotatingLinkSigner,
                 base_url: str, now: datetime, limit: int = SEND_LIMIT,
                 on_sent: Callable[[int], None] | None = None) -> dict[str, int]:
    """Send every recorded request (up to ``limit``), each in a committed transaction of
    its own on ``conn`` (the workers' login, idle): the access rule asked again, a new
    link to the same file signed with ``links`` and valid the schedule's link lifetime
    from ``now``, under ``base_url`` (ending in ``/``), to the address the delivery went
    to. Returns counts by outcome (``sent`` and each error code); a refused submission is
    recorded as ``submission_error`` and not tried again."""
    counts: dict[str, int] = {}
    for _ in range(limit):
        with conn.transaction():
            rows = fetch_rows(conn, SQL["claim_pending"], {"limit": 1})
            if not rows:
                break
            row = rows[0]
            outcome = _send_one(conn, row, mailer=mailer, links=links, base_url=base_url, now=now)
        counts[outcome] = counts.get(outcome, 0) + 1
    if on_sent and counts.get("sent"):
        on_sent(counts["sent"])
    return counts


def _send_one(conn: psycopg.Connection, row: dict[str, Any], *, mailer: Mailer,
              links: LinkSigner | RotatingLinkSigner, base_url: str, now: datetime) -> str:
    settings = store.get_query_schedule(conn, workspace_id=row["workspace_id"], schedule_id=row["schedule_id"])
    state = service.get_state(conn, workspace_id=row["workspace_id"], schedule_id=row["schedule_id"])
    error = None
    if settings is None or state is None or state.deleted_at is not None:
        error = "schedule_deleted"
    elif not check_source_access(conn, settings, row["user_id"]):
        error = "no_access"
    elif not row["address"]:
        error = "no_address"
    if error is None:
        assert settings is not None
        expires = (now + timedelta(hours=settings.link_ttl_hours)).replace(microsecond=0)
        token = links.sign(DownloadLink(row["workspace_id"], row["run_id"], row["user_id"], row["object_key"],
                                        expires))
        subject, text, body = compose(settings.name, f"{base_url}downloads/{token}", expires)
        try:
            message_id = mailer.send(to=row["address"], subject=subject, html=body, text=text)
        except Exception as refused:  # noqa: BLE001 - recorded; the person may ask again later
            logger.warning("fresh link not sent", extra={"error_type": type(refused).__name__})
            error = "submission_error"
        else:
            execute(conn, SQL["record_sent"], {"id": row["id"], "now": now, "message_id": message_id,
                                               "expires_at": expires})
            return "sent"
    execute(conn, SQL["record_unsent"], {"id": row["id"], "error_code": error})
    return error
